"""Filters through a real `faq serve`: does a filtered query ever get an FAQ outside its filter, what does
a filter cost per request, and is search inside a filter as good as exact search.

    python bench/filters.py --clinc ../shared/data/clinc150 [--encoder mpnet] [--queries 10000]
        [--out bench/results/filters]

The KB: CLINC150's train and val utterances (150 intents, 18,000 phrasings), each intent an FAQ with
metadata `domain` (its CLINC150 domain, 10 values) and `region` (eu / us / apac), 0-3 tags of web / app /
store and a source (manual-1..5.pdf), drawn once with a fixed seed. Built and served with the default
settings but the query cache off (a repeat would hide the cost being measured).

1. Latency, one client: --latency requests alternating the same query without and with a random filter
   (p50 / p99 of each and of the difference).
2. Correctness: --queries random filtered queries (CLINC150 test utterances, in scope and out of scope; a
   random filter of 1-3 conditions spread over all / any / none), 4 clients. Every match, clarify option
   and answer is checked against the filter on the KB as written (kb/filters.py), and an empty result is
   checked to be right (no FAQ passes) or counted.
3. Recall@10 inside the filter, in process on the served build: the retriever's filtered search on each of
   its paths (the matrix product it serves with, an Annoy build scoring the filter's stored vectors, an
   Annoy build asked deeper) against brute force over the filter's phrasings.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import Server, faq, free_port  # noqa: E402
from bench.reports import write_report  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402
from kb.filters import parse_filter  # noqa: E402

ADMIN = "filters-bench-admin-token-0123456789abcdef"
REGIONS = ("eu", "us", "apac")
TAGS = ("web", "app", "store")
SOURCES = tuple(f"manual-{i}.pdf" for i in range(1, 6))


def make_kb(clinc: Path, seed: int) -> tuple[list[dict], dict, list[str]]:
    """(KB rows, faq_id -> (metadata, tags, source), test queries)."""
    data = json.loads((clinc / "data_full.json").read_text())
    domain_of = {intent: domain for domain, intents in json.loads((clinc / "domains.json").read_text()).items()
                 for intent in intents}
    rng = random.Random(seed)
    fields: dict[str, tuple[dict, list, str]] = {}
    rows = []
    for text, intent in data["train"] + data["val"]:
        if intent not in fields:
            fields[intent] = ({"domain": domain_of[intent], "region": rng.choice(REGIONS)},
                              sorted(rng.sample(TAGS, rng.randint(0, 3))), rng.choice(SOURCES))
            metadata, tags, source = fields[intent]
            rows.append({"faq_id": intent, "question": text, "answer": f"[intent: {intent}]", "tags": tags,
                         "metadata": metadata, "source": source})
        else:
            rows.append({"faq_id": intent, "question": text})
    queries = [t for t, _ in data["test"]] + [t for t, _ in data["oos_test"]]
    return rows, fields, queries


def random_filter(rng: random.Random, domains: list[str]) -> dict:
    conditions = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("domain", "region", "tag", "source"))
        if kind == "domain":
            conditions.append({"key": "domain", "value": rng.choice(domains)})
        elif kind == "region":
            conditions.append({"key": "REGION", "value": rng.choice(REGIONS).upper()})
        elif kind == "tag":
            conditions.append({"tag": rng.choice(TAGS)})
        else:
            conditions.append({"source": rng.choice(SOURCES)})
    out: dict[str, list] = {}
    for c in conditions:
        out.setdefault(rng.choice(("all", "all", "any", "none")), []).append(c)
    return out


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clinc", required=True)
    ap.add_argument("--encoder", default="mpnet")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--latency", type=int, default=2_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir")
    ap.add_argument("--out", default="bench/results/filters")
    ap.add_argument("--recall-only", action="store_true", help="only part 3, on the build already in --workdir")
    args = ap.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="filters-bench-"))
    rows, fields, queries = make_kb(Path(args.clinc), args.seed)
    kb_file = workdir / "kb.jsonl"
    kb_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir), "FAQ_DATABASE_URL": f"sqlite:///{workdir / 'faq.db'}",
                "FAQ_ENCODER": args.encoder, "FAQ_ADMIN_TOKEN": ADMIN, "FAQ_KB_POLL_SECONDS": "0",
                "FAQ_QUERY_CACHE_SIZE": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if args.recall_only:  # the earlier run's report, its recall measured again
        report = json.loads(Path(args.out).with_suffix(".json").read_text())
        domains = sorted({m["domain"] for m, _, _ in fields.values()})
        report["recall_at_10_inside_filter"] = inside_recall(workdir, env, fields, queries, random.Random(args.seed),
                                                             domains)
        write_report(Path(args.out), report, markdown(report))
        return
    t0 = time.perf_counter()
    faq(env, "db", "upgrade")
    faq(env, "kb", "import", str(kb_file), "--sync")
    faq(env, "index", "build")
    build_s = time.perf_counter() - t0
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / "serve.log")
    rng = random.Random(args.seed)
    domains = sorted({m["domain"] for m, _, _ in fields.values()})
    try:
        server.wait_ready(url, 600)
        with httpx.Client(base_url=url, timeout=60) as http:
            for q in queries[:50]:  # warm-up
                http.post("/match", json={"query": q})
            plain, filtered = [], []
            for _ in range(args.latency):
                q = queries[rng.randrange(len(queries))]
                flt = random_filter(rng, domains)
                for body, sink in (({"query": q}, plain), ({"query": q, "filter": flt}, filtered)):
                    t = time.perf_counter()
                    r = http.post("/match", json=body)
                    sink.append((time.perf_counter() - t) * 1000.0)
                    assert r.status_code == 200, r.text
        work = [(queries[rng.randrange(len(queries))], random_filter(rng, domains)) for _ in range(args.queries)]

        def check(item: tuple[str, dict]) -> dict:
            q, raw = item
            allowed = parse_filter(raw).select(fields)
            with httpx.Client(base_url=url, timeout=60) as http:
                r = http.post("/match", json={"query": q, "filter": raw, "top_k": 10})
            body = r.json()
            returned = [m["faq_id"] for m in body.get("matches", [])] + [m["faq_id"] for m in body.get("options") or []]
            if body.get("answer"):
                returned.append(body["answer"]["faq_id"])
            flt = parse_filter(raw)
            outside = [f for f in returned if f not in allowed]
            wrong_fields = [m["faq_id"] for m in body.get("matches", [])
                            if not flt.matches(m["metadata"], m["tags"], m["source"])]
            return {"status": r.status_code, "outside": len(outside), "wrong_fields": len(wrong_fields),
                    "allowed": len(allowed), "n": len(body.get("matches", [])),
                    "short": len(body.get("matches", [])) < min(10, len(allowed))}

        t1 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            checked = list(pool.map(check, work))
        check_s = time.perf_counter() - t1
    finally:
        server.stop()
    recall = inside_recall(workdir, env, fields, queries, rng, domains)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
        "encoder": args.encoder, "phrasings": len(rows), "faqs": len(fields), "build_s": round(build_s, 1),
        "latency_ms": {"plain": {"p50": pct(plain, 50), "p99": pct(plain, 99)},
                       "filtered": {"p50": pct(filtered, 50), "p99": pct(filtered, 99)},
                       "difference_p50": statistics.median(f - p for f, p in zip(filtered, plain)),
                       "requests_each": len(plain)},
        "checked": {"queries": len(checked), "non_200": sum(c["status"] != 200 for c in checked),
                    "outside_filter": sum(c["outside"] for c in checked),
                    "fields_not_matching": sum(c["wrong_fields"] for c in checked),
                    "empty_filters": sum(c["allowed"] == 0 for c in checked),
                    "fewer_than_min_10_allowed": sum(c["short"] for c in checked),
                    "seconds": round(check_s, 1)},
        "recall_at_10_inside_filter": recall,
    }
    write_report(Path(args.out), report, markdown(report))


def markdown(report: dict) -> str:
    lat, checked, recall = report["latency_ms"], report["checked"], report["recall_at_10_inside_filter"]
    return "\n".join([
        f"# Filters through faq serve ({report['date']})", "",
        f"CPU: {report['cpu']}. KB: CLINC150 train+val, {report['phrasings']:,} phrasings, {report['faqs']} FAQs, "
        f"encoder {report['encoder']} (build {report['build_s']:.0f} s), query cache off.", "",
        "| measure | value |", "|---|---|",
        f"| p50 / p99 without a filter (ms) | {lat['plain']['p50']:.2f} / {lat['plain']['p99']:.2f} |",
        f"| p50 / p99 with a random filter (ms) | {lat['filtered']['p50']:.2f} / {lat['filtered']['p99']:.2f} |",
        f"| median of (filtered - plain), same query, back to back (ms) | {lat['difference_p50']:+.2f} |",
        f"| filtered queries checked | {checked['queries']:,} ({checked['empty_filters']:,} whose filter keeps no FAQ) |",
        f"| non-200 answers | {checked['non_200']} |",
        f"| FAQs returned outside the filter (matches, options, answers) | {checked['outside_filter']} |",
        f"| matches whose returned fields fail the filter | {checked['fields_not_matching']} |",
        f"| results with fewer than min(10, FAQs kept) matches | {checked['fewer_than_min_10_allowed']} |",
        "", "Recall@10 of phrasings inside the filter against brute force over the filter's phrasings:", "",
        "| search path | recall@10 | queries |", "|---|---|---|",
        *[f"| {k} | {v['recall']:.4f} | {v['queries']} |" for k, v in recall.items()], ""])


def inside_recall(workdir: Path, env: dict, fields: dict, queries: list[str], rng: random.Random,
                  domains: list[str], n: int = 500) -> dict:
    """Recall@10 of the retriever's filtered search on each path, in process on the served build."""
    os.environ.update({k: v for k, v in env.items() if k.startswith("FAQ_")})
    import index.retriever as retriever_module
    from app.settings import get_settings
    from index.artifacts import BuildRegistry
    from models.encoders.load import load_encoder

    settings = get_settings()
    build_dir = BuildRegistry(settings.index_dir).current_dir()
    encoder = load_encoder(env["FAQ_ENCODER"], runtime="auto", cache_dir=settings.model_cache)
    sample = [(queries[rng.randrange(len(queries))], parse_filter(random_filter(rng, domains))) for _ in range(n)]
    vecs = encoder.encode([q for q, _ in sample])
    out = {}
    paths = {"matrix product (served)": {}, "Annoy: the filter's stored vectors (asked deeper past 4M cells)": {
        "EXACT_MAX_CELLS": 0},
             "Annoy asked deeper": {"EXACT_MAX_CELLS": 0, "SELECTED_MAX_CELLS": 0},
             "Annoy, no filter (for reference)": {"EXACT_MAX_CELLS": 0}}
    saved = {k: getattr(retriever_module, k) for k in ("EXACT_MAX_CELLS", "SELECTED_MAX_CELLS")}
    for name, patch in paths.items():
        filtered = "no filter" not in name
        for k, v in {**saved, **patch}.items():
            setattr(retriever_module, k, v)
        retriever = retriever_module.Retriever.load(build_dir)
        vectors = retriever.ann.item_vectors(list(range(retriever.n_build_variants)))
        # the build alone, with the KB's fields as written: one FAQ table for every path
        retriever.answers = {f: ("", list(t)) for f, (_, t, _) in fields.items()}
        retriever.details = {f: _Details(m, s) for f, (m, _, s) in fields.items()}
        found = total = counted = 0
        for vec, (_, flt) in zip(vecs, sample):
            sel = retriever.select(flt)
            if not len(sel.items):
                continue
            got = {h.variant_id for h in (retriever.search(vec[None, :], 10, sel) if filtered
                                          else retriever.search(vec[None, :], 10))[0]}
            items = sel.items if filtered else np.arange(retriever.n_build_variants)
            scores = vectors[items] @ vec
            # ties (a phrasing repeated word for word) and float rounding: every item within 1e-5 of the
            # 10th best cosine counts as a right one
            kth = np.sort(scores)[::-1][min(10, len(scores)) - 1]
            truth = {int(retriever.build_variant_ids[i]) for i in items[scores >= kth - 1e-5]}
            found += len(got & truth)
            total += min(10, len(items))
            counted += 1
        out[name] = {"recall": found / max(total, 1), "queries": counted}
    for k, v in saved.items():
        setattr(retriever_module, k, v)
    return out


class _Details:
    def __init__(self, metadata: dict, source: str):
        self.metadata, self.source = metadata, source


if __name__ == "__main__":
    main()
