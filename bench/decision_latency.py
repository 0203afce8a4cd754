"""What the decision model adds per /match query: features + model over the first stage's candidates.

    python bench/decision_latency.py --cache var/decision --out bench/results/decision_latency

Reads the candidates `faq eval decision collect` kept (as the pipeline builds them, FAQ word
sets included) and times `index.decision.decide` per query, one thread; prints and writes JSON + Markdown.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evaluation.machine import cpu_info  # noqa: E402
from training.decision import load_kbs  # noqa: E402
from index.decision import decide, load_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default="var/decision")
    ap.add_argument("--out", default="bench/results/decision_latency")
    ap.add_argument("--model", default="mpnet")
    args = ap.parse_args()
    model = load_model()
    rows = {}
    names = [p.name.split(".")[0] for p in sorted(Path(args.cache).glob(f"*.{args.model}.pkl"))]
    for kb in load_kbs(Path(args.cache), names, args.model):
        ms = []
        for text, cands, *_ in kb.queries[:1000]:
            t = time.perf_counter()
            decide(model, text, cands, kb.reference)
            ms.append((time.perf_counter() - t) * 1000.0)
        rows[kb.name] = {"n": len(ms), "p50_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99))}
    report = {"cpu": cpu_info(), "per_kb": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    lines = ["| KB | queries | p50 ms | p99 ms |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['n']} | {v['p50_ms']:.3f} | {v['p99_ms']:.3f} |" for k, v in rows.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
