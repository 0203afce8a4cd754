"""Elasticsearch as the vector store (index/elasticsearch/vectors.py), measured: what the server supports, match quality
against the in-process index on the demo KB, latency, and a swap under load.

    python -m bench.es_vectors                    # starts the noida-db emulator (the tests' one) itself
    python -m bench.es_vectors --es-url URL       # or a running server (results then name it)

Parts (all by default, `--parts probe,equality,swap`):
- probe: which of the features the store relies on the server accepts (dense_vector with int8_hnsw / hnsw,
  knn with a filter, vectors back in `_source`, `_aliases` swap, `rescore_vector`, `script_score`);
- equality: app/demo/faq.jsonl imported into a scratch store, built ONCE with MiniLM (the tests' encoder)
  into an EsBuildRegistry, then every query of app/demo/queries.jsonl through the product pipeline
  (app/match/assembly.py build_pipeline) twice, over the same build: in process (exact cosines) and through kNN
  in Elasticsearch; top-1, MRR, recall and answer precision / recall / F1 at the default threshold, plus
  per-query agreement of the ranked FAQs and their scores, and `Retriever.search` latency both ways;
- swap: client threads search without pause while a new version is built and activated (the alias moves),
  rolled back and built again with pruning; one client searches through the alias, the others through a
  served Retriever that is swapped as the service swaps it. Every failed search is counted.

Writes bench/results/es_vectors.json and .md (`--out`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tests.helpers.es import start_emulator, stop_emulator

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEMO_KB = ROOT / "app" / "demo" / "faq.jsonl"
DEMO_QUERIES = ROOT / "app" / "demo" / "queries.jsonl"


# -- the emulator ---------------------------------------------------------------------------------------
# -- probe ----------------------------------------------------------------------------------------------
def probe(url: str) -> dict[str, str]:
    """Feature -> "ok" or the server's error, on a throwaway 8-d index."""
    from elasticsearch import Elasticsearch, helpers

    es = Elasticsearch(url, request_timeout=10)
    name, other, alias = (f"probe-{uuid.uuid4().hex[:8]}-{i}" for i in range(3))
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[3].tolist()
    out: dict[str, str] = {}

    def attempt(feature: str, fn: Any) -> Any:
        try:
            result = fn()
            out[feature] = "ok"
            return result
        except Exception as exc:  # noqa: BLE001 - the point is to record what fails
            out[feature] = f"{type(exc).__name__}: {str(exc)[:160]}"
            return None

    def mapping(kind: str) -> dict:
        return {"properties": {"kb": {"type": "keyword"}, "variant_id": {"type": "long"},
                               "vector": {"type": "dense_vector", "dims": 8, "similarity": "cosine", "index": True,
                                          "index_options": {"type": kind, "m": 16, "ef_construction": 100}}}}

    try:
        attempt("dense_vector int8_hnsw mapping", lambda: es.indices.create(index=name, mappings=mapping("int8_hnsw")))
        attempt("dense_vector hnsw mapping", lambda: es.indices.create(index=other, mappings=mapping("hnsw")))
        helpers.bulk(es, ({"_index": name, "_id": str(i), "_source": {"kb": "a" if i % 2 else "b", "variant_id": i,
                                                                         "vector": v.tolist()}}
                          for i, v in enumerate(vectors)), refresh=True)
        knn = {"field": "vector", "query_vector": query, "k": 5, "num_candidates": 20,
               "filter": {"bool": {"filter": [{"term": {"kb": "a"}}], "must_not": [{"terms": {"variant_id": [5]}}]}}}
        result = attempt("knn with filter", lambda: es.search(index=name, knn=knn, size=5, _source=["variant_id", "vector"]))
        if result is not None:
            hits = result.body["hits"]["hits"]
            if not all(h["_source"]["variant_id"] % 2 == 1 and h["_source"]["variant_id"] != 5 for h in hits):
                out["knn with filter"] = "filter not applied"
            same = all(np.array_equal(np.array(h["_source"]["vector"], np.float32), vectors[h["_source"]["variant_id"]])
                       for h in hits)
            out["vectors back in _source, bit-equal"] = "ok" if same else "vectors differ"
            errors = [abs(h["_score"] - (1 + float(vectors[h["_source"]["variant_id"]] @ vectors[3])) / 2) for h in hits]
            out["int8_hnsw _score vs (1+cos)/2, max abs difference"] = f"{max(errors):.2e}" if errors else "-"
        attempt("msearch of knn", lambda: es.msearch(searches=[{"index": name}, {"knn": knn, "size": 5}]))
        attempt("_aliases add", lambda: es.indices.update_aliases(actions=[{"add": {"index": name, "alias": alias}}]))
        attempt("_aliases swap (remove + add)", lambda: es.indices.update_aliases(actions=[
            {"remove": {"index": name, "alias": alias}}, {"add": {"index": other, "alias": alias}}]))
        attempt("forcemerge", lambda: es.indices.forcemerge(index=name, max_num_segments=1))
        attempt("knn rescore_vector (8.18+)", lambda: es.search(
            index=name, knn={**knn, "rescore_vector": {"oversample": 2.0}}, size=5))
        attempt("script_score cosineSimilarity", lambda: es.search(index=name, size=5, query={"script_score": {
            "query": {"match_all": {}}, "script": {"source": "cosineSimilarity(params.q, 'vector') + 1.0",
                                                    "params": {"q": query}}}}))
    finally:
        es.options(ignore_status=404).indices.delete(index=f"{name},{other}", ignore_unavailable=True)
        es.close()
    return out


# -- the demo KB, built once -------------------------------------------------------------------------------
def demo_build(url: str, work: Path, encoder: Any, prefix: str, kb_file: Path = DEMO_KB) -> tuple[Any, Any, Any, dict]:
    """(settings, store, registry, manifest): the demo KB imported into a scratch store and built into
    Elasticsearch (and the build folder)."""
    from app.settings import Settings
    from app.release import build_current
    from index.elasticsearch.vectors import EsBuildRegistry, EsVectorStore
    from kb.files import read_kb
    from migrations.runner import migrated_store

    settings = Settings(data_dir=work, database_url=f"sqlite:///{(work / 'bench.db').as_posix()}", es_url=url,
                        es_index_prefix=prefix, vector_store="elasticsearch", es_timeout_s=10.0)
    store = migrated_store(settings)
    store.import_records(read_kb(kb_file))
    registry = EsBuildRegistry(settings.index_dir, EsVectorStore(url, prefix, settings.kb, timeout_s=10.0))
    manifest = build_current(store, encoder, registry, n_trees=settings.ann_n_trees, search_k=settings.ann_search_k,
                           batch_size=64, encoder_spec="minilm", lexical=False)
    return settings, store, registry, manifest


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _ms(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"p50": round(statistics.median(values), 3), "p99": round(values[min(len(values) - 1, int(0.99 * len(values)))], 3),
            "mean": round(statistics.fmean(values), 3)}


def equality(url: str, work: Path, encoder: Any, kb_file: Path = DEMO_KB, queries_file: Path = DEMO_QUERIES) -> dict:
    from app.match.assembly import build_pipeline
    from evaluation.match import EVAL_TOP_K, match_all
    from evaluation.measures import all_metrics, outcomes_from_results
    from index.artifacts import BuildRegistry
    from index.retriever import Retriever
    from kb.files import read_queries

    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    settings, store, registry, manifest = demo_build(url, work, encoder, prefix, kb_file)
    try:
        version = manifest["version"]
        snapshot = store.snapshot()
        ids_only = registry.vector_store.searcher(version, manifest["n_variants"], with_vectors=False)
        retrievers = {"in_process": Retriever.load(BuildRegistry(registry.index_dir).path(version)).with_kb(snapshot, encoder),
                      "elasticsearch": registry.load_retriever(version).with_kb(snapshot, encoder),
                      "elasticsearch_ids_only": Retriever.load(registry.path(version), backend=ids_only).with_kb(snapshot, encoder)}
        queries = read_queries(queries_file)
        texts, golds = [q.query for q in queries], [q.faq_id for q in queries]
        threshold = float(settings.default_threshold)
        results, report = {}, {}
        for name, retriever in retrievers.items():
            pipeline = build_pipeline(settings, encoder, retriever, cache_size=0)
            match_all(pipeline, retriever, texts[:8], threshold, EVAL_TOP_K, 64, "warm-up")
            res, secs = match_all(pipeline, retriever, texts, threshold, EVAL_TOP_K, 64, name)
            results[name] = res
            report[name] = {"metrics": all_metrics(outcomes_from_results(res, golds)), "match_s": round(secs, 3)}
        agreement = {}
        a = results["in_process"]
        for name in ("elasticsearch", "elasticsearch_ids_only"):
            b = results[name]
            agreement[name] = {
                "same_ranked_faqs": sum([m.faq_id for m in x.matches] == [m.faq_id for m in y.matches] for x, y in zip(a, b)),
                "same_answer_and_decision": sum((x.answer and x.answer.faq_id) == (y.answer and y.answer.faq_id)
                                                and x.decision == y.decision for x, y in zip(a, b)),
                "max_abs_score_difference": max((abs(mx.score - my.score) for x, y in zip(a, b)
                                                 for mx, my in zip(x.matches, y.matches)), default=0.0),
                "max_abs_cosine_difference": max((abs(mx.cosine - my.cosine) for x, y in zip(a, b)
                                                  for mx, my in zip(x.matches, y.matches)), default=0.0)}
        # the retrieval stage alone, one query at a time as a /match request runs it (k = the pipeline's depth)
        vecs = np.asarray(encoder.encode(texts), dtype=np.float32)
        latency = {}
        for name, retriever in retrievers.items():
            retriever.search(vecs[:4], 20)
            times = []
            for vec in vecs:
                t = time.perf_counter()
                retriever.search(vec[None, :], 20)
                times.append((time.perf_counter() - t) * 1000)
            latency[name] = _ms(times)
        return {
            "kb": _shown(kb_file), "queries": _shown(queries_file),
            "n_queries": len(queries), "n_phrasings": manifest["n_variants"], "n_faqs": manifest["n_faqs"],
            "encoder": encoder.id, "threshold": threshold, "top_k": EVAL_TOP_K,
            "index": manifest["vector_store"],
            "results": report,
            "agreement_with_in_process": agreement,
            "search_latency_ms_k20": latency,
        }
    finally:
        registry.vector_store.delete_all()
        store.close()


def swap_under_load(url: str, work: Path, encoder: Any, clients: int = 4) -> dict:
    """Searches without pause while versions are built, activated, rolled back and pruned."""
    from index.elasticsearch.vectors import VectorStoreUnavailable
    from kb.files import read_queries

    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    settings, store, registry, first = demo_build(url, work, encoder, prefix)
    es = registry.vector_store
    vecs = np.asarray(encoder.encode([q.query for q in read_queries(DEMO_QUERIES)][:50]), dtype=np.float32)
    holder = {"retriever": registry.load_retriever(first["version"]).with_kb(store.snapshot(), encoder)}
    stop = threading.Event()
    counts = {"served_ok": 0, "served_failed": 0, "alias_ok": 0, "alias_failed": 0, "alias_empty": 0}
    versions_seen: set[str] = set()
    errors: list[str] = []
    lock = threading.Lock()

    def served_client(seed: int) -> None:
        i = seed
        while not stop.is_set():
            retriever = holder["retriever"]  # read once, as a request pins its retriever
            try:
                hits = retriever.search(vecs[i % len(vecs)][None, :], 20)[0]
                ok = bool(hits)
            except (VectorStoreUnavailable, Exception) as exc:  # noqa: BLE001 - every failure counts
                ok = False
                with lock:
                    errors.append(f"served {retriever.version}: {exc}"[:300])
            with lock:
                counts["served_ok" if ok else "served_failed"] += 1
            i += 1

    def alias_client() -> None:
        i = 0
        while not stop.is_set():
            knn = {"field": "vector", "query_vector": vecs[i % len(vecs)].tolist(), "k": 20, "num_candidates": 100,
                   "filter": {"bool": {"filter": [{"term": {"kb": settings.kb}}, {"term": {"kind": "phrasing"}}]}}}
            try:
                hits = es.client.search(index=es.alias, knn=knn, size=20, _source=["version"]).body["hits"]["hits"]
                with lock:
                    counts["alias_ok" if hits else "alias_empty"] += 1
                    versions_seen.update(h["_source"]["version"] for h in hits)
                    if len({h["_source"]["version"] for h in hits}) > 1:
                        errors.append("one alias search saw two versions")
            except Exception as exc:  # noqa: BLE001 - every failure counts
                with lock:
                    counts["alias_failed"] += 1
                    errors.append(f"alias: {exc}"[:300])
            i += 1

    def swap_to_current(reason: str) -> None:
        # what the service does on its poll (app/api/state.py load_current_build): load, then one assignment
        holder["retriever"] = registry.load_retriever(registry.current()).with_kb(store.snapshot(), encoder)
        steps.append({"step": reason, "current": registry.current(), "alias": es.current_version(),
                      "at_s": round(time.perf_counter() - t0, 2)})

    from app.release import build_current

    def rebuild(keep: int | None = None) -> str:
        return build_current(store, encoder, registry, n_trees=settings.ann_n_trees, search_k=settings.ann_search_k,
                           batch_size=64, encoder_spec="minilm", lexical=False, keep_versions=keep)["version"]

    steps: list[dict] = []
    threads = [threading.Thread(target=served_client, args=(i * 7,), daemon=True) for i in range(clients)]
    threads.append(threading.Thread(target=alias_client, daemon=True))
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        store.create_faq("bench-extra", "An extra FAQ added between builds.", ["Is this the extra benchmark question?"])
        second = rebuild()
        swap_to_current(f"built and activated {second}")
        registry.activate(first["version"])
        swap_to_current(f"rolled back to {first['version']}")
        third = rebuild(keep=2)
        swap_to_current(f"built {third} with keep_versions=2 (prunes)")
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    elapsed = time.perf_counter() - t0
    result = {"clients": {"served": clients, "alias": 1}, "seconds": round(elapsed, 2), "counts": counts,
              "searches_per_s": round((counts["served_ok"] + counts["alias_ok"]) / elapsed, 1),
              "versions_seen_through_alias": sorted(versions_seen), "steps": steps,
              "versions_left": {"folders": registry.versions(), "indexes": es.versions()},
              "errors": errors[:10]}
    es.delete_all()
    store.close()
    return result


# -- report ---------------------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    lines = ["# Elasticsearch as the vector store (index/elasticsearch/vectors.py)", "",
             f"Server: {report['server']}. Machine: {report['machine']}, {report.get('cpus', '?')} CPUs, load average "
             f"{report.get('load_average', '?')} during the run (shared: timings are indicative). "
             "`python -m bench.es_vectors`.", ""]
    if "probe" in report:
        lines += ["## What the server accepts", "", "| feature | result |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in report["probe"].items()] + [""]
    if "equality" in report:
        eq = report["equality"]
        lines += ["## Demo KB: in process vs kNN in Elasticsearch, one build", "",
                  f"{eq['n_queries']} queries of {eq['queries']} against {eq['n_phrasings']} phrasings of "
                  f"{eq['n_faqs']} FAQs ({eq['kb']}), encoder {eq['encoder']}, the product pipeline at the default "
                  f"threshold {eq['threshold']}; index `{eq['index']['index_options']['type']}`.", "",
                  "| path | top-1 | MRR | recall@5 | answer precision | answer recall | answer F1 |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name, row in eq["results"].items():
            m = row["metrics"]
            lines.append(f"| {name} | {m['top1_accuracy']:.4f} | {m['mrr']:.4f} | {m['recall_at_5']:.4f} | "
                         f"{m['answer_precision']:.4f} | {m['answer_recall']:.4f} | {m['answer_f1']:.4f} |")
        lines.append("")
        for name, ag in eq["agreement_with_in_process"].items():
            lines.append(f"- {name} vs in_process, per query: identical ranked FAQs for {ag['same_ranked_faqs']}/"
                         f"{eq['n_queries']}, identical answer and decision for {ag['same_answer_and_decision']}/"
                         f"{eq['n_queries']}; largest score difference {ag['max_abs_score_difference']:.2e}, largest "
                         f"cosine difference {ag['max_abs_cosine_difference']:.2e}.")
        lines += ["", "`Retriever.search` of one query, k=20, one thread (ms; the emulator's kNN is not "
                  "Elasticsearch's: only the difference between the two Elasticsearch rows says something, the cost "
                  "of sending 40 vectors back):", "", "| path | p50 | p99 | mean |", "|---|---:|---:|---:|"]
        lines += [f"| {k} | {v['p50']} | {v['p99']} | {v['mean']} |" for k, v in eq["search_latency_ms_k20"].items()]
        lines.append("")
    if "swap" in report:
        sw = report["swap"]
        c = sw["counts"]
        lines += ["## Swap under load", "",
                  f"{sw['clients']['served']} threads searching through the served Retriever (swapped as the service "
                  f"swaps it) and 1 through the alias, without pause for {sw['seconds']} s "
                  f"({sw['searches_per_s']} searches/s) while:", ""]
        lines += [f"- {s['at_s']} s: {s['step']} (current {s['current']}, alias {s['alias']})" for s in sw["steps"]]
        lines += ["", f"Served searches: {c['served_ok']} ok, **{c['served_failed']} failed**. Alias searches: "
                  f"{c['alias_ok']} ok, **{c['alias_failed']} failed**, {c['alias_empty']} empty. Versions seen through "
                  f"the alias: {', '.join(sw['versions_seen_through_alias'])}. Left: folders "
                  f"{sw['versions_left']['folders']}, indexes {sw['versions_left']['indexes']}.", ""]
        if sw["errors"]:
            lines += ["Errors:", ""] + [f"- {e}" for e in sw["errors"]] + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--es-url", help="a running server; default: start the noida-db emulator")
    parser.add_argument("--parts", default="probe,equality,swap")
    parser.add_argument("--kb", type=Path, default=DEMO_KB, help="the KB of the equality part (default: the demo)")
    parser.add_argument("--queries", type=Path, default=DEMO_QUERIES, help="its labelled queries")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "es_vectors"))
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}

    import torch

    torch.set_num_threads(2)
    from evaluation.machine import cpu_info
    from models.encoders.pretrained import MiniLMEncoder

    proc = None
    with tempfile.TemporaryDirectory(prefix="es-vectors-") as tmp:
        work = Path(tmp)
        try:
            if args.es_url:
                url, server = args.es_url, "Elasticsearch at the given URL"
            else:
                (work / "noida").mkdir()
                proc, url = start_emulator(work / "noida")
                server = "the noida-db Elasticsearch-API emulator (not Elasticsearch)"
            encoder = MiniLMEncoder(device="cpu")
            report: dict[str, Any] = {"server": server, "machine": cpu_info()["cpu_model"]}
            if "probe" in parts:
                report["probe"] = probe(url)
                print(json.dumps(report["probe"], indent=2))
            if "equality" in parts:
                (work / "eq").mkdir()
                report["equality"] = equality(url, work / "eq", encoder, args.kb.resolve(), args.queries.resolve())
                print(json.dumps({k: report["equality"][k] for k in ("results", "agreement_with_in_process",
                                                                     "search_latency_ms_k20")},
                                 indent=2))
            if "swap" in parts:
                (work / "swap").mkdir()
                report["swap"] = swap_under_load(url, work / "swap", encoder)
                print(json.dumps({k: report["swap"][k] for k in ("counts", "steps", "versions_left", "errors")}, indent=2))
        finally:
            if proc is not None:
                stop_emulator(proc)
    report["cpus"] = os.cpu_count()
    report["load_average"] = round(os.getloadavg()[0], 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
