"""`faq kb ...`: import, export and summarise the FAQ knowledge base (file formats: kb/records.py)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kb.records import KbValidationError, read_kb, write_kb
from app.settings import get_settings
from app.store import FaqStore, ImportReport

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    kb = subparsers.add_parser("kb", help="import/export the FAQ knowledge base, show stats",
                               description="Manage the FAQ knowledge base (database from FAQ_DATABASE_URL).")
    kb.set_defaults(func=lambda args: _usage(kb))
    sub = kb.add_subparsers(dest="kb_command", metavar="COMMAND")

    p = sub.add_parser(
        "import", help="upsert FAQs from a JSONL or CSV file",
        description="Upsert FAQs and question variants from FILE (.jsonl or .csv; '-' reads JSONL from stdin). "
                    "Re-importing the same file changes nothing. Any invalid row aborts the whole import.",
    )
    p.add_argument("file", help="KB file: .jsonl, .csv, or - for JSONL on stdin")
    p.add_argument("--sync", action="store_true",
                   help="also delete FAQs not in the file and variants of listed FAQs that are not in the file")
    p.add_argument("--dry-run", action="store_true", help="report what would change without writing anything")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", help="write the KB to a JSONL or CSV file",
                       description="Write every FAQ and question variant to FILE (.jsonl or .csv; '-' for JSONL "
                                   "on stdout). `faq kb import` of the result reproduces the KB.")
    p.add_argument("file", help="output file: .jsonl, .csv, or - for stdout")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("stats", help="summarise the KB", description="Counts of FAQs, variants and tags, "
                                                                    "the KB revision and the last index build.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser(
        "lint", help="flag FAQs whose answer does not fit their phrasings (swapped, truncated, missing, duplicated)",
        description="Rank the KB's FAQs by how likely their answer is wrong: answer fit against the other FAQs' "
                    "answers (with the encoder), missing / truncated answers, answers or phrasings duplicated "
                    "across FAQs. Each flag carries its reasons and numbers (index/lint.py).")
    p.add_argument("--kb", metavar="FILE", help="lint this KB file (.jsonl or .csv) instead of the configured store")
    p.add_argument("--encoder", metavar="SPEC",
                   help="encoder spec (minilm, mpnet, msem or a model folder); default: the product's configured "
                        "encoder (FAQ_ENCODER, else mpnet when installed, else minilm)")
    p.add_argument("--threshold", type=float, default=None,
                   help="flag FAQs whose score (0..1) reaches this (default 0.5)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="show at most N flagged FAQs in the text "
                   "output, and N FAQs in the JSON output (0 = all; default 20)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", metavar="FILE", help="also write the full JSON report (every FAQ) to FILE")
    p.add_argument("--no-progress", action="store_true", help="no encoding progress bar on stderr")
    p.set_defaults(func=cmd_lint)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_BAD_INPUT


def _open_store() -> FaqStore:
    from migrations.runner import migrated_store

    return migrated_store(get_settings())


def cmd_import(args: argparse.Namespace) -> int:
    name = "<stdin>" if args.file == "-" else args.file
    try:
        records = read_kb(args.file)
    except KbValidationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("nothing was imported", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"error: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with _open_store() as store:
        try:
            report = store.import_records(records, sync=args.sync, dry_run=args.dry_run)
        except KbValidationError as exc:  # read_kb already checks the same rules; kept for safety
            print(f"error: {exc}\nnothing was imported", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps({"file": name, "rows": len(records), **report.as_dict()}, indent=2))
    else:
        print(format_report(name, len(records), report))
    return EXIT_OK


def format_report(name: str, n_rows: int, r: ImportReport) -> str:
    n_faqs = r.faqs_created + r.faqs_updated + r.faqs_unchanged
    mode = " (dry run, --sync)" if r.dry_run and r.sync else " (dry run)" if r.dry_run else " (--sync)" if r.sync else ""
    lines = [
        f"Imported {name}{mode}: {n_rows} row{'' if n_rows == 1 else 's'}, {n_faqs} FAQ{'' if n_faqs == 1 else 's'}",
        f"  FAQs:      {r.faqs_created} created, {r.faqs_updated} updated, {r.faqs_unchanged} unchanged"
        + (f", {r.faqs_deleted} deleted" if r.sync else ""),
        f"  Variants:  {r.variants_added} added, {r.variants_removed} removed, {r.variants_unchanged} unchanged",
    ]
    if r.changes == 0:
        lines.append(f"No changes; KB revision stays {r.revision_before}.")
    elif r.dry_run:
        lines.append(f"Dry run: nothing was written (KB revision stays {r.revision_before}).")
    else:
        lines.append(f"KB revision {r.revision_before} -> {r.revision}.")
    return "\n".join(lines)


def cmd_export(args: argparse.Namespace) -> int:
    with _open_store() as store:
        try:
            n_faqs, n_variants = write_kb(args.file, store.export_records())
        except KbValidationError as exc:  # unknown extension
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except OSError as exc:
            print(f"error: cannot write {args.file}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    # keep stdout clean when the export itself goes there
    out = sys.stderr if args.file == "-" else sys.stdout
    print(f"Exported {n_faqs} FAQs ({n_variants} question variants) to {args.file}", file=out)
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with _open_store() as store:
        stats = store.stats()
    if args.json:
        print(json.dumps(stats, indent=2, default=str))
    else:
        print(format_stats(stats))
    return EXIT_OK


def format_stats(s: dict[str, Any]) -> str:
    per = s["variants_per_faq"]
    per_text = f" (per FAQ: min {per['min']}, median {per['median']:g}, max {per['max']})" if per else ""
    top = ", ".join(f"{tag} {n}" for tag, n in s["top_tags"])
    lines = [
        f"FAQs:               {s['faqs']}",
        f"Question variants:  {s['variants']}{per_text}",
        f"Tags:               {s['tags']} distinct" + (f" (most used: {top})" if top else ""),
        f"KB revision:        {s['revision']}",
    ]
    if s["faqs_without_variants"]:
        lines.append(f"FAQs without any question (never matched): {s['faqs_without_variants']}")
    build = s["last_build"]
    if build is None:
        lines.append("Last index build:   none")
    else:
        counts = (f", {build['n_faqs']} FAQs / {build['n_variants']} variants"
                  if build.get("n_faqs") is not None else "")
        when = build.get("finished_at") or build.get("started_at")
        lines.append(f"Last index build:   {build['version']} ({build['status']}, encoder {build['encoder_id']}"
                     f"{counts}, {when})")
    return "\n".join(lines)


def cmd_lint(args: argparse.Namespace) -> int:
    from index.lint import DEFAULT_THRESHOLD, format_report, lint_kb

    threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    if not 0.0 <= threshold <= 1.0:
        print("error: --threshold must be between 0 and 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.kb:
        try:
            records = read_kb(args.kb)
        except KbValidationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except OSError as exc:
            print(f"error: cannot read {args.kb}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    else:
        with _open_store() as store:
            records = list(store.export_records())
    from app.pipeline import load_configured_encoder

    settings = get_settings()
    try:
        encoder = load_configured_encoder(settings, spec=args.encoder)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = lint_kb(records, encoder, threshold=threshold, progress=not args.no_progress and sys.stderr.isatty())
    top = None if args.top <= 0 else args.top
    if args.out:
        try:
            with open(args.out, "w") as fh:
                json.dump(report.as_dict(), fh, indent=2, ensure_ascii=False)
                fh.write("\n")
        except OSError as exc:
            print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(report.as_dict(top), indent=2, ensure_ascii=False))
    else:
        print(format_report(report, top))
    return EXIT_OK
