"""MSEM ablation (the paper's Table VI) with the product's own commands.

    python bench/msem_ablation.py --data runs/data/banking77 --out runs/ablation --epochs 1

For each variant: `faq train msem --kb DATA/kb.jsonl --dev DATA/dev.jsonl --config BASE+SWITCH
--epochs N --out OUT/<variant>` (same seed, same data, same number of pairs), then
`faq eval match --kb DATA/kb.jsonl --queries DATA/test.jsonl --dev DATA/dev.jsonl --model OUT/<variant>`.
A variant whose folder already holds `eval.json` is not run again, so an interrupted run is resumed by
running the same command. Prints and writes bench/results/msem_ablation.{json,md}.

Variants (paper, Table VI): full model; w/o multi-task (matching loss only); w/o ARU; ARU replaced by
multi-head attention; attentive pooling replaced by max pooling; w/o highway; w/o char embedding.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation.match import keep_first_variants  # noqa: E402
from kb.files import read_kb, write_kb  # noqa: E402
DEFAULT_OUT = REPO / "bench" / "results" / "msem_ablation.json"
#: the paper-faithful word representation (GloVe ++ char-CNN) at compact sizes, so 7 runs fit on a CPU
BASE = {"word_repr": "glove_char", "hidden": 150, "ffn_dim": 600, "pool_da": 150, "out_dim": 300}
VARIANTS = {
    "full": {},
    "no_multitask": {"use_multitask": False},
    "no_aru": {"use_aru": False},
    "aru_as_mha": {"aru_as_mha": True},
    "max_pooling": {"pooling": "max"},
    "no_highway": {"use_highway": False},
    "no_char": {"use_char": False},
}


def faq(*args: str) -> None:
    cmd = [sys.executable, "-m", "cli.main", *args]  # `faq` of this interpreter
    print("$ faq " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="prepared dataset folder with kb.jsonl, dev.jsonl, test.jsonl")
    ap.add_argument("--out", required=True, help="folder for the variants' models and evaluations")
    ap.add_argument("--epochs", type=int, default=1, help="training epochs per variant (same for all)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    ap.add_argument("--base", default=json.dumps(BASE), help="MsemConfig JSON shared by all variants")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-faq", type=int, help="train on each FAQ's first N KB phrasings only (a smaller run; "
                    "the evaluation KB stays the full kb.jsonl)")
    ap.add_argument("--results", default=str(DEFAULT_OUT), help="results JSON (.md written beside it)")
    args = ap.parse_args(argv)

    data, out = Path(args.data), Path(args.out)
    base = json.loads(args.base)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    train_kb = data / "kb.jsonl"
    if args.per_faq:
        train_kb = out / f"kb_first{args.per_faq}.jsonl"
        out.mkdir(parents=True, exist_ok=True)
        write_kb(train_kb, keep_first_variants(read_kb(data / "kb.jsonl"), args.per_faq))
    rows = []
    for name in names:
        vdir = out / name
        eval_path = vdir / "eval.json"
        if not eval_path.exists():
            t0 = time.perf_counter()
            faq("train", "msem", "--kb", str(train_kb), "--dev", str(data / "dev.jsonl"),
                "--config", json.dumps({**base, **VARIANTS[name]}), "--epochs", str(args.epochs),
                "--seed", str(args.seed), "--out", str(vdir / "model"), "--from-scratch")
            train_s = time.perf_counter() - t0
            faq("eval", "match", "--kb", str(data / "kb.jsonl"), "--queries", str(data / "test.jsonl"),
                "--dev", str(data / "dev.jsonl"), "--model", str(vdir / "model"), "--json", str(vdir / "eval.tmp.json"))
            report = json.loads((vdir / "eval.tmp.json").read_text())
            report["train_seconds"] = round(train_s, 1)
            eval_path.write_text(json.dumps(report, indent=2) + "\n")
            os.remove(vdir / "eval.tmp.json")
        report = json.loads(eval_path.read_text())
        training = json.loads((vdir / "model" / "training.json").read_text())
        test = report["metrics"]
        rows.append({
            "variant": name,
            "switch": VARIANTS[name],
            "dev_top1_best": training["best_metric"],
            "test_top1": test["top1_accuracy"],
            "test_mrr": test["mrr"],
            "test_answer_f1": test["answer_f1"],
            "epochs": training["epochs_done"],
            "train_seconds": report.get("train_seconds"),
        })
        print(f"{name}: test top-1 {rows[-1]['test_top1']:.4f}, answer F1 {rows[-1]['test_answer_f1']:.4f}", flush=True)

    result = {"created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "data": str(data),
              "train_kb": str(train_kb),
              "epochs": args.epochs, "seed": args.seed, "base_config": base, "rows": rows}
    path = Path(args.results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    full = next((r for r in rows if r["variant"] == "full"), None)
    md = [f"# MSEM ablation on `{data}` ({args.epochs} epoch(s) each, seed {args.seed}, base `{json.dumps(base)}`)", "",
          f"Trained on `{train_kb}`; evaluated by `faq eval match` with the full KB, test queries, threshold from dev.", "",
          "| variant | dev top-1 | test top-1 | Δ vs full | test MRR | answer F1 | train s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        delta = f"{(r['test_top1'] - full['test_top1']) * 100:+.2f}" if full else ""
        md.append(f"| {r['variant']} | {r['dev_top1_best']:.4f} | {r['test_top1']:.4f} | {delta} | {r['test_mrr']:.4f} | "
                  f"{r['test_answer_f1']:.4f} | {r['train_seconds'] or 0:.0f} |")
    path.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
