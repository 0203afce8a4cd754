"""The exact query cache on a replay with repeats: hit rate and per-query latency, cache on vs off.

    python bench/cache_replay.py --kb runs/data/clinc150/kb.jsonl --queries runs/data/clinc150/test.jsonl \
        --encoder minilm --requests 5000 --zipf 1.1

Chatbot traffic is head-heavy: a few questions ("opening hours?") make up much of it. The replay
draws `--requests` queries from the query file with Zipf(`--zipf`) popularity over a shuffled order
(rank r is drawn with probability ~ 1/r^s), and re-spells a share of the repeats (`--respell`: other
case, doubled spaces) the way users retype them. The same sequence is then matched one query at a
time through the product's pipeline (evaluation/scratch.py: one built index) twice: with the cache of
`--cache-size` entries and with none. Reports hit rate, latency p50 / p90 / p99 / mean of each pass,
and checks that every cached answer equals the uncached one. Writes bench/results/cache_replay.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
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

from evaluation.machine import cpu_info  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "cache_replay.json"


def zipf_replay(queries: list[str], n: int, s: float, respell: float, seed: int) -> list[str]:
    """`n` draws from `queries` with Zipf(s) popularity; a `respell` share of repeats re-spelled."""
    rng = random.Random(seed)
    order = queries[:]
    rng.shuffle(order)
    weights = np.array([1.0 / (r + 1) ** s for r in range(len(order))])
    picks = np.random.default_rng(seed).choice(len(order), size=n, p=weights / weights.sum())
    seen: set[int] = set()
    out = []
    for i in picks:
        text = order[i]
        if i in seen and rng.random() < respell:
            text = rng.choice([text.upper(), text.capitalize(), "  " + text.replace(" ", "  ") + " "])
        seen.add(int(i))
        out.append(text)
    return out


def stats(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p90_ms": round(float(np.percentile(a, 90)), 3),
            "p99_ms": round(float(np.percentile(a, 99)), 3), "mean_ms": round(float(a.mean()), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kb", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--runtime", default="auto", help="FAQ_ENCODER_RUNTIME of the run (default auto)")
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--zipf", type=float, default=1.1, help="popularity exponent s (1.0-1.2 is typical of search logs)")
    ap.add_argument("--respell", type=float, default=0.3, help="share of repeats typed in another case / spacing")
    ap.add_argument("--cache-size", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)

    from app.match import MatchQuery
    from app.settings import Settings
    from evaluation.scratch import scratch_pipeline
    from kb.files import read_queries

    texts = [q.query for q in read_queries(args.queries)]
    replay = zipf_replay(texts, args.requests, args.zipf, args.respell, args.seed)
    with tempfile.TemporaryDirectory(prefix="faq-cache-replay-") as tmp:
        settings = Settings(data_dir=Path(tmp), encoder=args.encoder, encoder_runtime=args.runtime,
                            model_cache=Settings().model_cache or REPO / "var" / "models")
        scratch = scratch_pipeline(args.kb, workdir=tmp, settings=settings, cache_size=0)
        manifest = scratch.manifest
        passes = {}
        answers = {}
        for name, size in (("cache off", 0), (f"cache {args.cache_size}", args.cache_size)):
            pipeline = scratch.pipeline_with(cache_size=size)
            pipeline.match_many([MatchQuery(replay[0])])  # warm-up (first-call costs), then a clean cache
            pipeline.cache.clear()
            ms, got = [], []
            for text in replay:
                t0 = time.perf_counter()
                [result] = pipeline.match_many([MatchQuery(text)])
                ms.append((time.perf_counter() - t0) * 1000.0)
                got.append((result.answer.faq_id if result.answer else None, [m.faq_id for m in result.matches]))
            passes[name] = {**stats(ms), "hit_rate": round(pipeline.cache.hits / len(replay), 4) if size else 0.0}
            answers[name] = got
            print(f"{name}: {passes[name]}", flush=True)
        on, off = answers[f"cache {args.cache_size}"], answers["cache off"]
        same = sum(a == b for a, b in zip(on, off)) / len(replay)
        scratch.close()
    result = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), **cpu_info()},
        "command": " ".join(sys.argv), "encoder": manifest["encoder_id"], "runtime": manifest.get("encoder_runtime"),
        "kb": args.kb, "n_variants": manifest["n_variants"], "queries": args.queries,
        "requests": len(replay), "distinct_texts": len(set(replay)),
        "distinct_normalised": len({" ".join(t.split()).lower() for t in replay}),
        "zipf": args.zipf, "respell": args.respell, "passes": passes, "same_ranking_share": round(same, 4),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    md = [f"# Query cache replay ({result['created_at']}, {result['machine']['cpu_model']}, "
          f"{result['encoder']} on {result['runtime']})", "",
          f"`{result['command']}`", "",
          f"{len(replay)} requests, {result['distinct_texts']} distinct texts ({result['distinct_normalised']} after "
          f"case/space normalisation), Zipf s = {args.zipf}, {args.respell:.0%} of repeats re-spelled; "
          f"KB {args.kb} ({result['n_variants']} phrasings). Rankings equal with and without the cache: "
          f"{same:.2%}.", "",
          "| pass | hit rate | p50 ms | p90 ms | p99 ms | mean ms |", "|---|---|---|---|---|---|"]
    for name, p in passes.items():
        md.append(f"| {name} | {p['hit_rate']:.1%} | {p['p50_ms']:.2f} | {p['p90_ms']:.2f} | {p['p99_ms']:.2f} | "
                  f"{p['mean_ms']:.2f} |")
    out.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
