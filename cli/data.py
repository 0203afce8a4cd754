"""`faq data ...`: dataset preparation (`faq data prepare NAME --src DIR --out DIR`)."""
from __future__ import annotations

import argparse
import sys

from evaluation.datasets import DATASETS, DatasetError, prepare


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="prepare benchmark datasets")
    data_sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    p = data_sub.add_parser(
        "prepare",
        help="convert a benchmark dataset into kb.jsonl / dev.jsonl / test.jsonl or pairs_*.tsv",
        description="Convert a public dataset into the exchange formats (KB JSONL, query JSONL, pair TSV). "
        "Intent datasets have no answers: each intent becomes a FAQ whose answer is '[intent: NAME]'.",
    )
    p.add_argument("name", choices=DATASETS, help="dataset")
    p.add_argument("--src", required=True, help="folder holding the original files (e.g. ../shared/data/clinc150)")
    p.add_argument("--out", required=True, help="output folder (files are overwritten atomically)")
    p.add_argument("--seed", type=int, default=0, help="seed for held-out splits (BANKING77 dev)")
    p.add_argument("--domains", help="clinc150: keep only these domains (comma-separated, from domains.json)")
    p.add_argument("--exclude-domains", help="clinc150: drop these domains (comma-separated)")
    p.set_defaults(func=cmd_prepare)
    data.set_defaults(func=lambda args: (data.print_help(), 2)[1])


def _names(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def cmd_prepare(args: argparse.Namespace) -> int:
    try:
        report = prepare(
            args.name, args.src, args.out, seed=args.seed,
            domains=_names(args.domains), exclude_domains=_names(args.exclude_domains),
        )
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.format())
    return 0
