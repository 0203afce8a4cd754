"""`faq eval ...`: offline evaluation (`faq eval match`), through the same store/index/matcher as serving."""
from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    ev = subparsers.add_parser("eval", help="evaluate matching quality")
    ev_sub = ev.add_subparsers(dest="eval_command", metavar="SUBCOMMAND")
    p = ev_sub.add_parser(
        "match",
        help="import a KB into a fresh store, build the index, match labelled queries, report metrics",
        description="Runs the product's own path (FaqStore -> build_index -> Matcher) on a scratch SQLite "
        "store. The answer threshold is tuned on --dev (max answer F1), else the default threshold is used.",
    )
    p.add_argument("--kb", required=True, help="KB file (JSONL/CSV)")
    p.add_argument("--queries", required=True, help="test queries JSONL {query, faq_id|null}")
    p.add_argument("--dev", help="dev queries for threshold tuning")
    p.add_argument("--model", help="encoder: 'minilm', 'msem' or an MSEM model folder (default: FAQ_ENCODER, else minilm)")
    p.add_argument("--json", required=True, dest="json_out", help="write the full report as JSON here")
    p.add_argument("--md", dest="md_out", help="also write a Markdown summary here")
    p.add_argument("--workdir", help="keep the scratch store and index here (default: a temp folder, removed)")
    p.add_argument("--top-k", type=int, default=10, help="FAQs per query (MRR depth), default 10")
    p.add_argument("--batch-size", type=int, default=256, help="queries per matcher call, default 256")
    p.add_argument("--n-trees", type=int, help="Annoy trees (default: settings.ann_n_trees)")
    p.add_argument("--search-k", type=int, help="Annoy search_k (default: settings.ann_search_k)")
    p.add_argument("--variants-per-faq", type=int, help="keep only each FAQ's first N phrasings of the KB "
                   "(1 = a KB with a single question per FAQ)")
    p.set_defaults(func=cmd_match)

    p = ev_sub.add_parser(
        "pairs",
        help="paraphrase-pair accuracy of an encoder's cosine (e.g. QQP, MRPC)",
        description="Encodes both sides of labelled pairs (`label<TAB>q1<TAB>q2`) and reports accuracy at MSEM's "
        "matching-layer threshold (cos >= alpha), at a threshold tuned on --dev-pairs, and ROC AUC.",
    )
    p.add_argument("--pairs", required=True, help="test pairs TSV")
    p.add_argument("--dev-pairs", help="pairs for threshold tuning")
    p.add_argument("--model", help="encoder: 'minilm', 'msem' or an MSEM model folder")
    p.add_argument("--json", required=True, dest="json_out", help="write the report as JSON here")
    p.set_defaults(func=cmd_pairs)
    ev.set_defaults(func=lambda args: (ev.print_help(), 2)[1])


def cmd_match(args: argparse.Namespace) -> int:
    from app.evaluate import format_table, run_eval_match, write_report
    from app.kb_io import KbValidationError
    from index.artifacts import IndexVerificationError
    from index.build import BuildError

    if args.top_k < 5:
        print("error: --top-k must be >= 5 (recall@5 is reported)", file=sys.stderr)
        return 2
    if args.batch_size < 1:
        print("error: --batch-size must be >= 1", file=sys.stderr)
        return 2
    if args.variants_per_faq is not None and args.variants_per_faq < 1:
        print("error: --variants-per-faq must be >= 1", file=sys.stderr)
        return 2
    try:
        report = run_eval_match(args.kb, args.queries, args.dev, args.model, args.workdir,
                                top_k=args.top_k, batch_size=args.batch_size,
                                n_trees=args.n_trees, search_k=args.search_k,
                                variants_per_faq=args.variants_per_faq)
    except IndexVerificationError as exc:
        # e.g. a barely trained encoder whose vectors crowd together: Annoy needs more trees / search_k
        print(f"error: {exc} (try --n-trees / --search-k)", file=sys.stderr)
        return 2
    except (KbValidationError, BuildError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_report(report, args.json_out, args.md_out)
    print(format_table(report))
    print(f"report written to {args.json_out}" + (f" and {args.md_out}" if args.md_out else ""))
    return 0


def cmd_pairs(args: argparse.Namespace) -> int:
    from app.pair_eval import format_pairs_report, run_eval_pairs, write_pairs_report
    from models.pairs import PairFileError

    try:
        report = run_eval_pairs(args.pairs, args.model, args.dev_pairs)
    except (PairFileError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_pairs_report(report, args.json_out)
    print(format_pairs_report(report))
    return 0
