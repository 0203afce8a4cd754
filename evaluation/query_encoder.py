"""The three modes on the realistic FAQ sets: accurate (mpnet both sides), balanced (mpnet FAQ side, a query
encoder for the queries) and fast (MiniLM both sides), each through `faq eval match` (answers as evidence,
the threshold tuned on the set's dev queries where it has them).

    faq eval query-encoder --query-encoder runs/query-encoder/ridge --out bench/results/query_encoder

Writes `report.json` and `report.md` (top-1, MRR, answer F1 per set and mode, and balanced minus accurate /
minus fast in points; the top match's ECE and answer precision / F1 at the service's default decision) and
prints the table.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETS = {
    "demo": ("app/demo/faq.jsonl", "app/demo/queries.jsonl", None),
    **{name: (f"evaluation/data/{name}/faq.jsonl", f"evaluation/data/{name}/test.jsonl",
              f"evaluation/data/{name}/dev.jsonl") for name in ("energy", "council", "grocery", "campus_it")},
}
# the intent datasets, after `faq data prepare clinc150|banking77 --src ../shared/data/NAME --out runs/data/NAME`
# (their train splits are in the query encoder's corpus, their test queries never are); --sets names them
PREPARED = {name: (f"runs/data/{name}/kb.jsonl", f"runs/data/{name}/test.jsonl", f"runs/data/{name}/dev.jsonl")
            for name in ("clinc150", "banking77")}
METRICS = ("top1_accuracy", "mrr", "answer_f1")


def run(query_encoder: str, sets: list[str], teacher: str = "mpnet", fast: str = "minilm") -> dict:
    from evaluation.match import run_eval_match

    rows = []
    for name in sets:
        kb, queries, dev = (str(REPO / p) if p else None for p in {**SETS, **PREPARED}[name])
        row: dict = {"set": name}
        for mode, kwargs in (("accurate", {"model": teacher}), ("balanced", {"model": teacher, "query_encoder": query_encoder}),
                             ("fast", {"model": fast})):
            t = time.perf_counter()
            report = run_eval_match(kb, queries, dev, progress=False, **kwargs)
            row[mode] = {m: report["metrics"][m] for m in METRICS}
            # how honest the score is: the top match's calibration error, and the service's default decision
            # (threshold 0.5 on the decision model's probability), not the threshold tuned on dev
            default = report["metrics_at_default_threshold"]
            row[mode].update(ece_top1=report["ece_top1"], default_precision=default.get("answer_precision"),
                             default_f1=default.get("answer_f1"), seconds=round(time.perf_counter() - t, 1))
            print(f"{name:10s} {mode:9s} " + "  ".join(f"{m} {row[mode][m]:.3f}" for m in METRICS), flush=True)
        row["balanced_minus_accurate_pts"] = {m: round(100 * (row["balanced"][m] - row["accurate"][m]), 1) for m in METRICS}
        row["balanced_minus_fast_pts"] = {m: round(100 * (row["balanced"][m] - row["fast"][m]), 1) for m in METRICS}
        rows.append(row)
    return {"query_encoder": query_encoder, "teacher": teacher, "fast": fast, "rows": rows,
            "machine": {"platform": platform.platform(), "processor": _cpu()}}


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def markdown(report: dict) -> str:
    out = [f"# Modes on the realistic sets: query encoder `{report['query_encoder']}`", "",
           f"CPU: {report['machine']['processor']}. Answers as evidence; threshold tuned on dev where the set has one.", "",
           "| set | accurate top-1 / F1 | balanced top-1 / F1 | fast top-1 / F1 | balanced - accurate (pts) | balanced - fast (pts) |",
           "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        cell = lambda m, r=r: f"{r[m]['top1_accuracy']:.3f} / {r[m]['answer_f1']:.3f}"  # noqa: E731
        da, df = r["balanced_minus_accurate_pts"], r["balanced_minus_fast_pts"]
        out.append(f"| {r['set']} | {cell('accurate')} | {cell('balanced')} | {cell('fast')} | "
                   f"{da['top1_accuracy']:+.1f} / {da['answer_f1']:+.1f} | {df['top1_accuracy']:+.1f} / {df['answer_f1']:+.1f} |")
    out += ["", "At the service's default decision (threshold 0.5), answer precision / F1, and the top match's ECE:", "",
            "| set | accurate | balanced | fast |", "|---|---|---|---|"]
    for r in report["rows"]:
        honest = lambda m, r=r: (f"{_num(r[m].get('default_precision'))} / {_num(r[m].get('default_f1'))}, "  # noqa: E731
                                 f"ECE {_num(r[m].get('ece_top1'))}")
        out.append(f"| {r['set']} | {honest('accurate')} | {honest('balanced')} | {honest('fast')} |")
    return "\n".join(out) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--query-encoder", required=True, help="a faq train query-encoder folder")
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join([*SETS, *PREPARED])} (default: the first five)")
    p.add_argument("--out", required=True, help="folder for report.json and report.md")
    args = p.parse_args(argv)
    report = run(args.query_encoder, parse_sets(p, args.sets))
    write_report(args.out, report, markdown(report))
    return 0


def parse_sets(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """`--sets`: known names, the intent datasets only once `faq data prepare` has written them."""
    sets = [s for s in text.split(",") if s]
    unknown = sorted(set(sets) - set(SETS) - set(PREPARED))
    if unknown:
        parser.error(f"unknown sets {unknown}")
    missing = [s for s in sets if s in PREPARED and not (REPO / PREPARED[s][0]).exists()]
    if missing:
        parser.error(f"{', '.join(missing)}: run `faq data prepare NAME --src ../shared/data/NAME --out "
                     f"runs/data/NAME` first")
    return sets


def write_report(out: str | Path, report: dict, text: str) -> None:
    """`report.json` and `report.md` in `out`, and the Markdown printed."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    raise SystemExit(main())
