"""`faq eval stress` (the fine-grained stress suite) and `faq eval reranker` (STS-B test correlation and
QQP test accuracy of a cross-encoder re-ranker)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def register(ev_sub: argparse._SubParsersAction) -> None:
    p = ev_sub.add_parser(
        "stress",
        help="fine-grained stress suite: accuracy per perturbation type for MSEM, MiniLM and the re-ranker",
        description="Scores the suite's pairs (evaluation/stress/pairs.tsv) with MSEM cosine, all-MiniLM-L6-v2 cosine "
        "and the cross-encoder; each model's threshold is chosen on the suite's dev part, accuracy is reported "
        "per type and overall on its test part.",
    )
    p.add_argument("--msem", help="MSEM model folder (default: models/default when shipped, else MSEM is n/a)")
    p.add_argument("--reranker", action="append", default=[],
                   help="re-ranker folder (default: FAQ_RERANKER); repeatable, NAME=DIR names a column")
    p.add_argument("--runtime", default="auto", help="re-ranker runtime: auto | onnx-int8 | onnx | torch")
    p.add_argument("--suite", help="another suite file of the same format (default: the packaged one)")
    p.add_argument("--json", required=True, dest="json_out", help="write the report (with every score) as JSON here")
    p.add_argument("--md", dest="md_out", help="also write the Markdown table here")
    p.set_defaults(func=cmd_stress)

    p = ev_sub.add_parser(
        "reranker",
        help="re-ranker quality: STS-B test Pearson/Spearman, QQP test accuracy",
        description="STS-B: Pearson/Spearman of sigmoid(logit) (the phase B regression output) against score/5 on "
        "sts-test.csv. QQP: accuracy and F1 on --qqp-test at a threshold tuned on the QQP part of the re-ranker's "
        "held-out pairs (heldout_pairs.tsv: QQP dev pairs that training never saw), or on --tune-pairs.",
    )
    p.add_argument("--reranker", required=True, help="re-ranker folder")
    p.add_argument("--runtime", default="auto", help="auto | onnx-int8 | onnx | torch")
    p.add_argument("--stsb", help="STS-B folder with sts-test.csv")
    p.add_argument("--qqp-test", help="QQP test pairs TSV (label<TAB>q1<TAB>q2), e.g. runs/data/qqp/pairs_test.tsv")
    p.add_argument("--tune-pairs", help="pairs TSV for the QQP threshold (default: the qqp rows of "
                   "<reranker>/heldout_pairs.tsv)")
    p.add_argument("--limit", type=int, help="use only the first N pairs of each set (quick checks)")
    p.add_argument("--json", required=True, dest="json_out", help="write the report as JSON here")
    p.add_argument("--md", dest="md_out", help="also write a Markdown summary here")
    p.set_defaults(func=cmd_reranker)


def _named(spec: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    return (name, path) if sep else (f"cross-encoder ({Path(spec).name})", spec)


def cmd_stress(args: argparse.Namespace) -> int:
    import numpy as np

    from app.settings import get_settings
    from evaluation.stress import STRESS_FILE, cosine_scorer, format_table, run_stress, write_report
    from models.encoders.load import default_msem_dir, load_encoder
    from models.matchers.cross_encoder import RerankerError, load_reranker

    scorers: dict = {}
    settings = get_settings()
    device, cache_dir = settings.device, settings.mpnet_cache  # FAQ_DEVICE, FAQ_MODEL_CACHE
    msem = args.msem or (str(default_msem_dir()) if (default_msem_dir() / "config.json").exists() else None)
    try:
        scorers["MSEM cosine"] = cosine_scorer(load_encoder(msem, device=device, cache_dir=cache_dir)) if msem else None
        scorers["all-MiniLM-L6-v2 cosine"] = cosine_scorer(load_encoder("minilm", device=device, cache_dir=cache_dir))
        rerankers = args.reranker or ([settings.reranker] if settings.reranker else [])
        if not rerankers:
            print("note: no --reranker and no FAQ_RERANKER: the cross-encoder column is n/a", file=sys.stderr)
            scorers["cross-encoder"] = None
        for spec in rerankers:
            name, path = _named(spec)
            model = load_reranker(path, runtime=args.runtime, device=device)
            scorers[name] = lambda pairs, m=model: np.asarray(m.score_pairs(pairs), dtype=np.float64)
        report = run_stress(scorers, args.suite or STRESS_FILE)
    except (RerankerError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report["msem_model"] = msem
    report["rerankers"] = [_named(s)[1] for s in rerankers]
    write_report(report, args.json_out, args.md_out)
    print(format_table(report))
    print(f"report written to {args.json_out}" + (f" and {args.md_out}" if args.md_out else ""))
    return 0


def cmd_reranker(args: argparse.Namespace) -> int:
    import numpy as np

    from app.settings import get_settings
    from training.pairs import PairFileError, read_pair_file
    from models.matchers.cross_encoder import RerankerError, load_reranker
    from models.scoring import best_threshold
    from training.cross_encoder import HELDOUT_FILE, pearson_spearman, read_stsb, read_written_pairs
    from training.loop import TrainError

    if not args.stsb and not args.qqp_test:
        print("error: give --stsb and/or --qqp-test", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 10:
        print("error: --limit must be >= 10", file=sys.stderr)
        return 2
    try:
        model = load_reranker(args.reranker, runtime=args.runtime, device=get_settings().device)  # FAQ_DEVICE
        report: dict = {"reranker": args.reranker, "runtime": model.runtime.name, "id": model.id}
        if args.stsb:
            pairs = read_stsb(Path(args.stsb) / "sts-test.csv")[: args.limit]
            t = time.perf_counter()
            sim = model.similarity([(p.q1, p.q2) for p in pairs], progress=True)
            secs = time.perf_counter() - t
            pearson, spearman = pearson_spearman(sim, np.array([p.label for p in pairs]))
            report["stsb_test"] = {"pearson": pearson, "spearman": spearman, "n": len(pairs),
                                   "pairs_per_s": len(pairs) / secs}
        if args.qqp_test:
            if args.tune_pairs:
                tune = [(p.q1, p.q2, p.label) for p in read_pair_file(args.tune_pairs)]
                tune_source = args.tune_pairs
            else:
                held = Path(args.reranker) / HELDOUT_FILE
                if not held.exists():
                    raise FileNotFoundError(f"{held} not found: give --tune-pairs")
                tune = [(p.q1, p.q2, int(p.label)) for p in read_written_pairs(held) if p.source == "qqp"]
                tune_source = f"{held} (qqp rows: QQP dev pairs held out of training)"
            tune = tune[: args.limit]
            if not tune:
                raise ValueError("no pairs to tune the QQP threshold on")
            tune_scores = model.score_pairs([(a, b) for a, b, _ in tune], progress=True)
            threshold, tune_acc = best_threshold(tune_scores, np.array([y for _, _, y in tune]) >= 0.5)
            test = read_pair_file(args.qqp_test)[: args.limit]
            scores = model.score_pairs([(p.q1, p.q2) for p in test], progress=True)
            labels = np.array([p.label for p in test])
            pred = (scores >= threshold).astype(int)
            tp = int(np.sum((pred == 1) & (labels == 1)))
            fp = int(np.sum((pred == 1) & (labels == 0)))
            fn = int(np.sum((pred == 0) & (labels == 1)))
            report["qqp_test"] = {
                "accuracy": float(np.mean(pred == labels)), "f1": 2 * tp / max(1, 2 * tp + fp + fn), "n": len(test),
                "threshold": threshold, "threshold_source": tune_source, "tune_accuracy": tune_acc,
                "tune_n": len(tune), "accuracy_at_0.5": float(np.mean((scores >= 0.5).astype(int) == labels)),
            }
    except (RerankerError, TrainError, PairFileError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Re-ranker {args.reranker} ({report['runtime']})", "", "| measure | value |", "|---|---|"]
    if "stsb_test" in report:
        s = report["stsb_test"]
        lines.append(f"| STS-B test Pearson / Spearman ({s['n']} pairs) | {s['pearson']:.4f} / {s['spearman']:.4f} |")
    if "qqp_test" in report:
        q = report["qqp_test"]
        lines.append(f"| QQP test accuracy / F1 ({q['n']} pairs, threshold {q['threshold']:.3f} tuned on {q['tune_n']} "
                     f"held-out pairs) | {q['accuracy']:.4f} / {q['f1']:.4f} |")
    md = "\n".join(lines) + "\n"
    if args.md_out:
        Path(args.md_out).write_text(md)
    print(md)
    print(f"report written to {args.json_out}" + (f" and {args.md_out}" if args.md_out else ""))
    return 0
