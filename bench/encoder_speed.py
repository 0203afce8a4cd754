"""Encoder speed: sentences/s at batch 1 and batch 256, and single-query latency, side by side.

    python bench/encoder_speed.py --encoders minilm,models/default,runs/msem-glove \
        --texts app/demo/queries.jsonl --threads 2

For each encoder spec (`minilm`, `mpnet`, `msem` = the shipped model, or an MSEM model folder), optionally
with `@runtime` (`minilm@onnx-int8`; models/encoders/runtime.py; without it: `torch`, eager PyTorch):
- batch 256: `encode(texts, batch_size=256)` over `--n-batch` sentences, repeated `--repeats` times;
  sentences/s from the median run;
- batch 1: `encode([t], batch_size=1)` over `--n-single` sentences one at a time; sentences/s = n / total
  time, and the per-call latency distribution (p50 / p90 / p99 / max) = the encode part of a `/match`.

Encoders are measured in interleaved rounds (A, B, C, A, B, C, ...) so that load from other processes
on the shared machine hits every encoder alike; compare the numbers of one run with each other (ratios),
not with runs on another day. Texts come from a query or KB file (`query` or `question` fields), cycled
when the file is shorter than asked. Writes JSON (default bench/results/encoder_speed.json) and a
Markdown table next to it. When a spec is also measured `@torch`, each other runtime of it reports the
cosine of its vectors to the torch ones (mean and minimum over the batch texts).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation.machine import cpu_info  # noqa: E402  (needs REPO on the path)

DEFAULT_OUT = REPO / "bench" / "results" / "encoder_speed.json"


def read_texts(path: Path) -> list[str]:
    texts = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                texts.append(row.get("query") or row.get("question"))
    return [t for t in texts if t]


def cycle(texts: list[str], n: int) -> list[str]:
    return [texts[i % len(texts)] for i in range(n)]


def percentiles(values_ms: list[float]) -> dict:
    a = np.asarray(values_ms)
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 2),
        "p90_ms": round(float(np.percentile(a, 90)), 2),
        "p99_ms": round(float(np.percentile(a, 99)), 2),
        "max_ms": round(float(a.max()), 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encoders", default="minilm,msem", help="comma-separated encoder specs")
    ap.add_argument("--texts", default=str(REPO / "app" / "demo" / "queries.jsonl"), help="query or KB JSONL")
    ap.add_argument("--n-batch", type=int, default=2048, help="sentences per batch-256 run")
    ap.add_argument("--n-single", type=int, default=300, help="single-sentence calls per round")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (batch-256 runs and single-call rounds)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (the machine has 2 cores)")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="results JSON (a .md table is written beside it)")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from models.encoders.load import load_encoder

    texts = read_texts(Path(args.texts))
    if not texts:
        ap.error(f"--texts {args.texts}: no query/question rows")
    specs = [s.strip() for s in args.encoders.split(",") if s.strip()]
    encoders = {}
    for spec in specs:
        t0 = time.perf_counter()
        name, _, runtime = spec.partition("@")
        enc = load_encoder(name, runtime=runtime or "torch", threads=args.threads)
        encoders[spec] = enc
        print(f"loaded {spec} ({enc.id}, dim {enc.dim}) in {time.perf_counter() - t0:.1f}s", flush=True)
        enc.encode(cycle(texts, 64), batch_size=64)  # warm-up: allocator, lazy init, first-call costs

    batch_texts = cycle(texts, args.n_batch)
    single_texts = cycle(texts, args.n_single)
    batch_runs: dict[str, list[float]] = {s: [] for s in specs}
    vectors = {spec: enc.encode(batch_texts, batch_size=256) for spec, enc in encoders.items()}
    single_ms: dict[str, list[float]] = {s: [] for s in specs}
    for r in range(args.repeats):
        for spec, enc in encoders.items():
            t0 = time.perf_counter()
            enc.encode(batch_texts, batch_size=256)
            batch_runs[spec].append(time.perf_counter() - t0)
            for t in single_texts:
                t1 = time.perf_counter()
                enc.encode([t], batch_size=1)
                single_ms[spec].append((time.perf_counter() - t1) * 1000)
            print(f"round {r + 1}/{args.repeats} {spec}: batch-256 {len(batch_texts) / batch_runs[spec][-1]:.0f} "
                  f"sentences/s, batch-1 median {statistics.median(single_ms[spec][-len(single_texts):]):.1f} ms",
                  flush=True)

    rows = []
    for spec, enc in encoders.items():
        lat = single_ms[spec]
        rows.append({
            "encoder": spec,
            "encoder_id": enc.id,
            "dim": enc.dim,
            "batch256_sentences_per_s": round(len(batch_texts) / statistics.median(batch_runs[spec]), 1),
            "batch1_sentences_per_s": round(1000 * len(lat) / sum(lat), 1),
            "single_query_latency": percentiles(lat),
            "single_calls": len(lat),
            "runtime": getattr(enc, "runtime", "torch"),
        })
        reference = vectors.get(spec.partition("@")[0] + "@torch", vectors.get(spec.partition("@")[0]))
        if reference is not None and reference is not vectors[spec]:
            cos = (vectors[spec] * reference).sum(1)
            rows[-1]["cosine_to_torch"] = {"mean": round(float(cos.mean()), 4), "min": round(float(cos.min()), 4)}
    base = rows[0]
    for row in rows:
        row["batch256_ratio_to_first"] = round(row["batch256_sentences_per_s"] / base["batch256_sentences_per_s"], 3)
        row["latency_p50_ratio_to_first"] = round(
            row["single_query_latency"]["p50_ms"] / base["single_query_latency"]["p50_ms"], 3)
    result = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), **cpu_info(), "torch_threads": args.threads,
                    "device": "cpu" if not torch.cuda.is_available() else torch.cuda.get_device_name(0),
                    "loadavg_after": os.getloadavg()},
        "texts": args.texts,
        "text_words_mean": round(float(np.mean([len(t.split()) for t in texts])), 1),
        "n_batch": args.n_batch, "n_single": args.n_single, "repeats": args.repeats,
        "results": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    md = [
        f"# Encoder speed ({result['created_at']}, {result['machine']['cpu_model']}, "
        f"int8 dot product: {', '.join(result['machine']['int8_dot_product']) or 'none'}, {result['machine']['cpus']} CPUs, "
        f"{args.threads} torch threads, load average after {result['machine']['loadavg_after'][0]:.1f})",
        "",
        f"Texts: `{args.texts}` (mean {result['text_words_mean']} words). Batch 256: median of {args.repeats} runs "
        f"over {args.n_batch} sentences; batch 1: {len(single_ms[specs[0]])} single-sentence calls.",
        "",
        "| encoder | dim | batch 256 sent/s | batch 1 sent/s | 1 query p50 ms | p99 ms | p50 vs first | cosine to torch mean / min |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lat = row["single_query_latency"]
        md.append(f"| `{row['encoder']}` | {row['dim']} | {row['batch256_sentences_per_s']:.0f} | "
                  f"{row['batch1_sentences_per_s']:.1f} | {lat['p50_ms']:.1f} | {lat['p99_ms']:.1f} | "
                  f"{row['latency_p50_ratio_to_first']:.2f}x | "
                  + (f"{row['cosine_to_torch']['mean']:.4f} / {row['cosine_to_torch']['min']:.4f} |"
                     if "cosine_to_torch" in row else "- |"))
    out.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
