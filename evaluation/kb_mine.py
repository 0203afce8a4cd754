"""Measure `faq kb mine` on a replayed query log: CLINC150 test queries (or a realistic set's) as traffic.

In a scratch data dir (never the configured one): import the KB, build the index as `faq index build
--encoder minilm` does and answer every test query through the real pipeline (evaluation/scratch.py), log it as
the service does (faq_id = the answer, score = the best match's score), then run the miner over the
store. Gold labels are the test file's faq_id (null = out of scope). Reports, per --min-score:
how many phrasings are proposed and their precision (proposed FAQ == gold), and how the out-of-scope
queries fall into unanswered clusters. With --siamese, the same with the Siamese matcher as a second
opinion beside the key (per --agree), and how precise its own proposals are.

    faq eval kb-mine --data runs/data/clinc150 --out bench/results/kb_mine [--siamese DIR]
    faq eval kb-mine --data evaluation/data/energy --kb-file faq.jsonl --queries dev.jsonl,test.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_SCORES = (0.5, 0.7, 0.9, 0.95, 0.99)
CLUSTER_COSINES = (0.7, 0.75, 0.8, 0.85, 0.9)


def replay(data: Path, workdir: Path, threshold: float, kb_file: str = "kb.jsonl",
           query_files: tuple[str, ...] = ("test.jsonl",)) -> tuple[Any, list[tuple[str, str | None]], dict, Any]:
    """Store with the KB and the logged queries; returns (store, [(query, gold)], timings, encoder)."""
    from app.settings import get_settings
    from evaluation.scratch import scratch_pipeline

    # the configured settings with MiniLM, in the work folder (its own store, build and decision model)
    settings = get_settings().model_copy(update={"data_dir": workdir, "encoder": "minilm"})
    scratch = scratch_pipeline(data / kb_file, workdir=workdir, settings=settings, spec="minilm", cache_size=0)
    store, pipeline, encoder = scratch.store, scratch.pipeline, scratch.encoder
    t_build = scratch.timings["import_s"] + scratch.timings["index_build_s"]
    gold = [(r["query"], r["faq_id"]) for name in query_files
            for r in map(json.loads, open(data / name, encoding="utf-8"))]
    t0 = time.perf_counter()
    results = pipeline.match([q for q, _ in gold], top_k=5, threshold=threshold)
    t_match = time.perf_counter() - t0
    rows = []
    for (q, _), res in zip(gold, results):
        best = res.matches[0] if res.matches else None
        rows.append({"request_id": uuid.uuid4().hex, "arm": "replay", "query": q,
                     "faq_id": res.answer.faq_id if res.answer else None,
                     "score": best.score if best else None})
    store.log_queries(rows)
    return store, gold, {"import_build_s": round(t_build, 1), "match_s": round(t_match, 1)}, encoder


def _cluster_stats(clusters: list[dict], by_query: dict[str, set]) -> dict[str, Any]:
    from kb.mining import phrasing_form

    in_clusters = sum(c["size"] for c in clusters)
    oos_in = sum(q["count"] for c in clusters for q in c["queries"]
                 if None in by_query.get(phrasing_form(q["query"]), set()))
    # a cluster is "pure" when all its queries share one gold label (one FAQ, or all out of scope)
    pure = sum(len({frozenset(by_query.get(phrasing_form(q["query"]), set())) for q in c["queries"]}) == 1
               for c in clusters)
    return {"n": len(clusters), "queries_in_clusters": in_clusters, "out_of_scope_in_clusters": oos_in,
            "out_of_scope_share_of_clustered": round(oos_in / in_clusters, 4) if in_clusters else None,
            "pure_clusters": pure, "mixed_clusters": len(clusters) - pure,
            "in_scope_in_clusters": in_clusters - oos_in,
            "biggest": [{"size": c["size"], "key": c["key"], "queries": [q["query"] for q in c["queries"][:3]]}
                        for c in clusters[:5]]}


def evaluate(store: Any, gold: list[tuple[str, str | None]], scores: tuple[float, ...],
             embed: Any = None, siamese: Any = None, agrees: tuple[float, ...] = ()) -> dict[str, Any]:
    from app.curation.mining import mine_report
    from kb.mining import bow_key, phrasing_form

    by_query: dict[str, set] = {}
    for q, g in gold:
        by_query.setdefault(phrasing_form(q), set()).add(g)
    n_oos = sum(g is None for _, g in gold)
    log = store.read_query_log()
    served = sum(r["faq_id"] is not None for r in log)
    served_right = sum(r["faq_id"] is not None and r["faq_id"] in by_query[phrasing_form(r["query"])] for r in log)
    def correct(p: dict) -> bool:
        return p["faq_id"] in by_query.get(phrasing_form(p["question"]), set())

    rows = []
    runs = [(s, None) for s in scores] + [(s, a) for s in scores for a in (agrees if siamese is not None else ())]
    for s, a in runs:
        rep = mine_report(store, min_score=s) if a is None else mine_report(store, min_score=s, siamese=siamese,
                                                                            min_agree=a)
        props = rep["phrasings"]
        right = sum(correct(p) for p in props)
        oos_props = sum(None in by_query.get(phrasing_form(p["question"]), set()) for p in props)
        by_siamese = [p for p in props if "siamese" in p["evidence"]]
        rows.append({"min_score": s, "second_opinion": "key" if a is None else f"key or Siamese >= {a:g}",
                     "min_agree": a, "proposed": len(props), "correct": right,
                     "precision": round(right / len(props), 4) if props else None,
                     "siamese_only": len(by_siamese),
                     "siamese_only_precision": round(sum(correct(p) for p in by_siamese) / len(by_siamese), 4)
                     if by_siamese else None,
                     "from_oos_queries": oos_props, "faqs_touched": len({p["faq_id"] for p in props}),
                     "stats": rep["stats"]})
    clusters = {"key": _cluster_stats(mine_report(store)["clusters"], by_query)}
    for c in CLUSTER_COSINES if embed is not None else ():
        clusters[f"cosine {c:g}"] = _cluster_stats(mine_report(store, embed=embed, cosine=c)["clusters"], by_query)
    kb_keys = {bow_key(r.question) for r in store.export_records()} - {""}
    key_hits = [g for q, g in gold if bow_key(q) in kb_keys]
    unanswered = sum(r["faq_id"] is None for r in log)
    oos_unanswered = sum(r["faq_id"] is None and None in by_query[phrasing_form(r["query"])] for r in log)
    return {
        "queries": len(gold), "out_of_scope": n_oos, "answered": served,
        "answered_correct": served_right, "unanswered": unanswered, "unanswered_out_of_scope": oos_unanswered,
        "phrasings": rows,
        "clusters": clusters,
        "key_equals_a_kb_key": {"queries": len(key_hits), "share": round(len(key_hits) / len(gold), 4),
                                "out_of_scope": sum(g is None for g in key_hits)},
        "key_examples": [{"query": q, "key": bow_key(q)} for q, _ in gold[:3]],
    }


def to_markdown(res: dict[str, Any], command: str) -> str:
    lines = [f"`{command}`", "",
             f"{res['queries']} test queries ({res['out_of_scope']} out of scope) replayed through MiniLM: "
             f"{res['answered']} answered ({res['answered_correct']} correctly), {res['unanswered']} unanswered "
             f"({res['unanswered_out_of_scope']} of them out of scope).", "",
             "| --min-score | second opinion | proposed | precision | by the Siamese matcher alone (precision) | "
             "from OOS queries | FAQs | already a phrasing |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["phrasings"]:
        prec = "-" if r["precision"] is None else f"{r['precision']:.3f}"
        alone = "-" if r.get("min_agree") is None else (
            f"{r['siamese_only']} ({r['siamese_only_precision']:.3f})" if r["siamese_only"] else "0")
        lines.append(f"| {r['min_score']:g} | {r.get('second_opinion', 'key')} | {r['proposed']} | {prec} | {alone} | "
                     f"{r['from_oos_queries']} | {r['faqs_touched']} | {r['stats']['already_phrasing']} |")
    k = res["key_equals_a_kb_key"]
    lines += ["", f"Test queries whose key equals a KB phrasing's key: {k['queries']} ({k['share']:.1%}), "
                  f"{k['out_of_scope']} of them out of scope.", "",
              "| unanswered clusters (min size 2) | clusters | queries in them | of them OOS | pure clusters "
              "| mixed clusters |",
              "|---|---|---|---|---|---|"]
    for name, c in res["clusters"].items():
        lines.append(f"| {name} | {c['n']} | {c['queries_in_clusters']} | {c['out_of_scope_in_clusters']} | "
                     f"{c['pure_clusters']} | {c['mixed_clusters']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="runs/data/clinc150", help="folder with kb.jsonl and test.jsonl")
    ap.add_argument("--out", default="bench/results/kb_mine", help="writes OUT.json and OUT.md")
    ap.add_argument("--kb-file", default="kb.jsonl", help="the KB's file name in --data (faq.jsonl for the realistic "
                    "sets of evaluation/data)")
    ap.add_argument("--queries", default="test.jsonl", help="comma-separated query files in --data replayed as the log")
    ap.add_argument("--threshold", type=float, default=0.5, help="the service's answer threshold for the replay")
    ap.add_argument("--scores", default=",".join(map(str, DEFAULT_SCORES)), help="--min-score values to report")
    ap.add_argument("--siamese", help="a Siamese matcher folder: also report it as the second opinion (faq kb mine "
                    "--siamese), at each --agree")
    ap.add_argument("--agree", default="0.9,0.95,0.99", help="--min-agree values to report with --siamese")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="kb-mine-") as tmp:
        store, gold, timings, encoder = replay(Path(args.data), Path(tmp), args.threshold, args.kb_file,
                                               tuple(args.queries.split(",")))
        try:
            siamese = None
            if args.siamese:
                from app.settings import get_settings
                from models.matchers.siamese import load_siamese

                settings = get_settings()
                siamese = load_siamese(args.siamese, device=settings.device, cache_dir=settings.mpnet_cache)
            res = evaluate(store, gold, tuple(float(s) for s in args.scores.split(",")), embed=encoder.encode,
                           siamese=siamese, agrees=tuple(float(a) for a in args.agree.split(",")))
        finally:
            store.close()
    res["timings"] = timings
    command = "faq eval kb-mine " + " ".join(argv if argv is not None else sys.argv[1:])
    res["command"] = command.strip()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n")
    out.with_suffix(".md").write_text(to_markdown(res, res["command"]))
    print(to_markdown(res, res["command"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
