"""What the Siamese re-ranking stage (app/stages/siamese.py) adds to a `/match` call.

One call = one query against 20 candidate FAQs (the service's rerank_k): the stage encodes the query
(word vectors + the Siamese encoder), looks the candidates' phrasing vectors up, runs the MLP head over
the 20 pairs, calibrates and pools with the first-stage probability. Queries are a KB's test queries (each
new to the stage), candidates 20 FAQs drawn per call (seeded), each by one of its phrasings.

Two states per model, interleaved call by call so load that comes and goes hits both alike:
- stored: the phrasing vectors come from the build (what `faq index build` stores with FAQ_RERANKER set);
- cold: no stored vectors and an empty cache: the 20 phrasings are encoded in the call as well (a build
  made before the stage was configured, for its first requests).

    python bench/siamese_latency.py --model runs/siamese-clinc-glove/conv --model runs/siamese-clinc-minilm \
        --kb runs/data/clinc150/kb.jsonl --queries runs/data/clinc150/test.jsonl

Prints the table and writes bench/results/siamese_latency.json and .md (with the CPU model); torch threads
`--threads` (default 2, the service's FAQ_TORCH_THREADS).
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation.machine import cpu_info  # noqa: E402  (needs REPO on the path)

RESULTS = REPO / "bench" / "results"


class StoredBuild:
    """The part of a Retriever the stage reads: its build folder name and the stored phrasing vectors."""

    def __init__(self, name: str, key: str, texts: list[str], matrix: np.ndarray):
        self.build_dir = Path(name)
        self._key, self._texts, self._matrix = key, texts, matrix

    def stage_vectors(self, key: str):
        return (self._texts, self._matrix) if key == self._key else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="faq train siamese folder; repeatable")
    ap.add_argument("--kb", required=True, help="KB whose phrasings are the candidates")
    ap.add_argument("--queries", required=True, help="queries JSONL (query field)")
    ap.add_argument("--candidates", type=int, default=20, help="candidates per call (default 20 = rerank_k)")
    ap.add_argument("--requests", type=int, default=500, help="timed calls per model and state (default 500)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "siamese_latency"), help="output path without extension")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from app.stages import SiameseStage, load_siamese_stage
    from index.candidates import FaqMatch
    from kb.files import read_kb, read_queries

    by_faq: dict[str, list[str]] = {}
    for r in read_kb(args.kb):
        by_faq.setdefault(r.faq_id, []).append(r.question)
    faq_ids = sorted(by_faq)
    queries = [q.query for q in read_queries(args.queries)]
    rng = random.Random(args.seed)
    calls = []
    for i in range(args.requests + 20):  # the first 20 warm up
        chosen = rng.sample(faq_ids, min(args.candidates, len(faq_ids)))
        calls.append((queries[i % len(queries)],
                      [FaqMatch(f, rng.choice(by_faq[f]), "", rng.uniform(0.05, 0.95), 0.5) for f in chosen]))
    texts = [q for f in faq_ids for q in by_faq[f]]

    rows = []
    for folder in args.model:
        stored = load_siamese_stage(folder, weight=0.5)
        t = time.perf_counter()
        matrix = stored.sentence_vectors(texts).astype(np.float16)  # as the build stores them
        build_s = time.perf_counter() - t
        stored = stored.on_build(StoredBuild("bench-build", stored.vector_key, texts, matrix))
        cold = SiameseStage(stored.scorer, weight=0.5)
        times: dict[str, list[float]] = {"stored": [], "cold": []}
        for n, (query, cands) in enumerate(calls):
            for state, stage in (("stored", stored), ("cold", cold)):
                if state == "cold":
                    stage.encoded.clear()  # nothing kept between calls: every phrasing encoded in the call
                t = time.perf_counter()
                stage.rescore(query, cands)
                if n >= 20:
                    times[state].append((time.perf_counter() - t) * 1000.0)
        cfg = stored.scorer.config
        for state, ms in times.items():
            rows.append({"model": folder, "encoder": cfg.encoder, "words": cfg.word_repr, "mean_pool": cfg.mean_pool,
                         "dim": cfg.dim, "state": state, "requests": len(ms),
                         "p50_ms": round(float(np.percentile(ms, 50)), 3),
                         "p90_ms": round(float(np.percentile(ms, 90)), 3),
                         "p99_ms": round(float(np.percentile(ms, 99)), 3),
                         "mean_ms": round(float(np.mean(ms)), 3)})
        rows[-1]["kb_vectors_s"] = rows[-2]["kb_vectors_s"] = round(build_s, 2)
        print(f"{folder}: stored p50 {rows[-2]['p50_ms']} ms, cold p50 {rows[-1]['p50_ms']} ms", flush=True)

    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
              "python": platform.python_version(), "torch": torch.__version__, "threads": args.threads,
              "kb": args.kb, "kb_phrasings": len(texts), "queries": args.queries, "candidates": args.candidates,
              "command": "python bench/siamese_latency.py " + " ".join(sys.argv[1:]), "rows": rows}
    lines = [f"`{report['command']}`", "",
             f"CPU: {report['cpu']['cpu_model']} (int8 dot product: {', '.join(report['cpu']['int8_dot_product']) or 'none'}), "
             f"{args.threads} torch threads; {args.candidates} candidates per call, {args.requests} calls.", "",
             "| model | words | encoder | state | p50 ms | p90 ms | p99 ms | KB vectors s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        enc = r["encoder"] + (" + mean" if r["mean_pool"] else "")
        lines.append(f"| {Path(r['model']).name} | {r['words']} | {enc} | {r['state']} | {r['p50_ms']:.2f} | "
                     f"{r['p90_ms']:.2f} | {r['p99_ms']:.2f} | {r['kb_vectors_s']} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
