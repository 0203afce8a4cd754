"""A first-stage study: a ridge-mapped query (MiniLM's vector mapped into mpnet's space) fused with MiniLM's own
score, both from one MiniLM pass; the FAQ side would hold both mpnet's and MiniLM's vectors.

    faq eval query-encoder-fusion --query-encoder runs/query-encoder/ridge \
        --out bench/results/query_encoder_fusion

Every set's test queries (in scope) are ranked the way the service first scores a FAQ (its best phrasing's
cosine mixed with its answer's, weight 0.6; training/query_encoder/dev.py) by: mpnet both sides
(accurate), MiniLM both sides (fast), the mapped query against mpnet's side (balanced) and
`alpha * balanced + (1 - alpha) * fast` for each `--alpha`. No decision model, no threshold: top-1 only,
to see whether fusion is worth building. Writes `report.json` and `report.md`.
"""
from __future__ import annotations

import argparse
import platform


from evaluation.query_encoder import PREPARED, REPO, SETS, parse_sets, write_report


def run(query_encoder: str, sets: list[str], alphas: list[float], cache_dir: str | None = None,
        teacher: str = "mpnet", runtime: str = "onnx-int8") -> dict:
    from models.encoders.load import load_encoder
    from models.encoders.query import read_config
    from training.query_encoder.dev import read_dev_set

    if read_config(query_encoder).get("train_layers"):
        raise SystemExit(f"{query_encoder}: its base's layers were trained, so its pass is not MiniLM's own: give a "
                         "ridge-only folder")
    kw = {"runtime": runtime, "cache_dir": cache_dir}
    mpnet, minilm, mapped = (load_encoder(s, **kw) for s in (teacher, "minilm", query_encoder))
    rows = []
    for name in sets:
        kb, queries, _ = (str(REPO / p) if p else None for p in {**SETS, **PREPARED}[name])
        accurate, fast = read_dev_set(kb, queries).attach(mpnet.encode), read_dev_set(kb, queries).attach(minilm.encode)
        s_acc = accurate.scores(mpnet.encode(accurate.queries))
        s_fast = fast.scores(minilm.encode(fast.queries))
        s_bal = accurate.scores(mapped.encode(accurate.queries))
        labels = accurate.labels
        row = {"set": name, "queries": len(labels)}
        for mode, s in (("accurate", s_acc), ("fast", s_fast), ("balanced", s_bal),
                        *((f"fused {a:g}", a * s_bal + (1 - a) * s_fast) for a in alphas)):
            row[mode] = round(float((s.argmax(1) == labels).mean()), 4)
        rows.append(row)
        print(name, {k: v for k, v in row.items() if k != "set"}, flush=True)
    return {"query_encoder": query_encoder, "cpu": platform.processor() or platform.machine(), "rows": rows}


def markdown(report: dict) -> str:
    modes = [k for k in report["rows"][0] if k not in ("set", "queries")]
    lines = [f"# Fusion study, first stage only: `{report['query_encoder']}`", "",
             "Top-1 of in-scope test queries; no decision model. `fused a` = a * balanced + (1 - a) * fast.", "",
             "| set | queries | " + " | ".join(modes) + " |", "|---|---|" + "---|" * len(modes)]
    for r in report["rows"]:
        lines.append(f"| {r['set']} | {r['queries']} | " + " | ".join(f"{r[m]:.3f}" for m in modes) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--query-encoder", required=True, help="a ridge-only `faq train query-encoder` folder")
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join([*SETS, *PREPARED])} (default: the first five)")
    p.add_argument("--alpha", default="0.3,0.5,0.7", help="fusion weights of the balanced score")
    p.add_argument("--model-cache", default=None, help="where mpnet and the ONNX exports are (default var/models)")
    p.add_argument("--out", required=True, help="folder for report.json and report.md")
    args = p.parse_args(argv)
    report = run(args.query_encoder, parse_sets(p, args.sets), [float(a) for a in args.alpha.split(",") if a],
                 args.model_cache)
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
