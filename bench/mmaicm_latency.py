"""What the MMAICM re-ranking stage (app/stages/mmaicm.py) adds to a `/match` call.

One call = one query against 20 candidate FAQs (the service's rerank_k): MMAICM scores the query
against each candidate's answer and best phrasing in one forward pass, calibrates, and pools with the
first-stage probability. Queries are the Brightwater FAQ's 300 dev + test queries (each one new to the
stage), candidates 20 of its 93 FAQs drawn per call (seeded), as the service would pass them.

Two cache states per model:
- warm: every FAQ's answer and phrasing has its word vectors cached (the service after its first
  requests: candidates repeat, queries do not), so a call computes the query's word vectors and the
  network;
- cold: no cache at all: the word vectors of all 41 texts are computed in every call.

    python bench/mmaicm_latency.py --model runs/mmaicm/wikiqa-glove --model runs/mmaicm/wikiqa-minilm
    python bench/mmaicm_latency.py --untrained glove,minilm      # latency only (it does not depend on the weights)

Prints the table and writes bench/results/mmaicm_latency.json (with the CPU model); one torch thread
unless --threads says otherwise.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation.machine import cpu_info  # noqa: E402  (needs REPO on the path)

RESULTS = REPO / "bench" / "results"
ENERGY = REPO / "evaluation" / "data" / "energy"


def load_requests(n_candidates: int, seed: int):
    """(query, candidates) per call from the Brightwater FAQ, and every FAQ's texts."""
    from index.candidates import FaqMatch
    from kb.records import group_records
    from kb.files import read_kb, read_queries

    specs, _ = group_records([(str(i), r) for i, r in enumerate(read_kb(ENERGY / "faq.jsonl"))])
    faqs = [(f, s.questions[0], s.answer) for f, s in specs.items()]
    queries = [q.query for name in ("dev.jsonl", "test.jsonl") for q in read_queries(ENERGY / name)]
    rng = random.Random(seed)
    calls = []
    for query in dict.fromkeys(queries):  # distinct, in file order
        picked = rng.sample(faqs, min(n_candidates, len(faqs)))
        calls.append((query, [FaqMatch(f, q, a, rng.uniform(0.2, 0.9), 0.5) for f, q, a in picked]))
    return calls, faqs


def time_stage(stage, calls, warmup: int) -> dict:
    for query, candidates in calls[:warmup]:
        stage.rescore(query, candidates)
    times = []
    for query, candidates in calls[warmup:]:
        t0 = time.perf_counter()
        stage.rescore(query, candidates)
        times.append((time.perf_counter() - t0) * 1000.0)
    t = np.array(times)
    return {"calls": len(t), "p50_ms": round(float(np.percentile(t, 50)), 2), "p90_ms": round(float(np.percentile(t, 90)), 2),
            "p99_ms": round(float(np.percentile(t, 99)), 2), "mean_ms": round(float(t.mean()), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=[], help="an MMAICM folder (faq train mmaicm); repeatable")
    parser.add_argument("--untrained", help="comma-separated word representations to time with random weights "
                        "(glove, minilm): latency does not depend on the weights")
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=20, help="calls before timing (default 20)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--runtime", default="torch", help="how MiniLM's states run: torch, onnx, onnx-int8, or "
                        "several comma-separated (models/encoders/runtime.py; GloVe rows ignore it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "mmaicm_latency.json"))
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from app.stages import MmaicmStage
    from models.encoders.words import make_words
    from models.matchers.mmaicm import MMAICM, MmaicmConfig, MmaicmScorer, load_mmaicm

    calls, faqs = load_requests(args.candidates, args.seed)
    texts = [a for _, _, a in faqs] + [q for _, q, _ in faqs]
    runtimes = [r for r in args.runtime.split(",") if r]
    targets = [(str(m), None, rt) for m in args.model for rt in runtimes]
    targets += [(f"untrained {w}", w, rt) for w in (args.untrained.split(",") if args.untrained else []) if w
                for rt in (runtimes if w == "minilm" else runtimes[:1])]
    if not targets:
        parser.error("give --model FOLDER and/or --untrained glove,minilm")
    rows = []
    words_by_kind: dict = {}
    for name, untrained, runtime in targets:
        for cache in ("warm", "cold"):
            size = 4096 if cache == "warm" else 0
            if untrained is None:
                kind = json.loads((Path(name) / "config.json").read_text())["word_repr"]
                scorer = load_mmaicm(name, device="cpu", cache_size=size, runtime=runtime,
                                     words=words_by_kind.get((kind, runtime)))
            else:
                torch.manual_seed(0)
                words = words_by_kind.get((untrained, runtime)) or make_words(untrained, runtime=runtime)
                scorer = MmaicmScorer(MMAICM(MmaicmConfig(word_repr=untrained)).eval(), words, cache_size=size, device="cpu")
            words_by_kind[(scorer.words.kind, runtime)] = scorer.words
            if cache == "warm":
                scorer.fill_cache(texts, scorer.config.max_a_len)
            stage = MmaicmStage(scorer)
            result = time_stage(stage, calls, args.warmup)
            row = {"model": name, "word_repr": scorer.config.word_repr, "runtime": runtime if untrained != "glove" else "-",
                   "matcher": scorer.config.matcher,
                   "use_attention": scorer.config.use_attention, "cache": cache, **result}
            rows.append(row)
            print(f"{name:<40} {row['word_repr']:<7} {row['runtime']:<9} {cache:<5} p50 {row['p50_ms']:7.2f} ms  p90 {row['p90_ms']:7.2f}  "
                  f"p99 {row['p99_ms']:7.2f}  ({row['calls']} calls)", flush=True)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python " + " ".join(sys.argv),
        "host": {**cpu_info(), "python": platform.python_version(), "torch": torch.__version__,
                 "torch_threads": torch.get_num_threads()},
        "what": f"MmaicmStage.rescore: one query x {args.candidates} candidates (answer + best phrasing each, one "
                "forward pass), Brightwater FAQ queries, each new to the stage",
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, suffix=".tmp", delete=False) as fh:
        fh.write(json.dumps(report, indent=2) + "\n")
    Path(fh.name).replace(out)
    print(f"CPU: {report['host']['cpu_model']}, {report['host']['torch_threads']} torch thread(s); wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
