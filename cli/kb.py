"""`faq kb ...`: import, export and summarise the FAQ knowledge base (file formats: kb/records.py)."""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kb.mining import DEFAULT_MIN_AGREE, DEFAULT_MIN_SCORE
from kb.records import KbValidationError, read_kb, write_kb
from app.settings import get_settings
from app.mining import mine_report, write_mined
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
                    "across FAQs. Each flag carries its reasons and numbers (kb/lint.py).")
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

    p = sub.add_parser(
        "mine", help="propose new phrasings and new FAQs from the query log (never writes the KB)",
        description="Read the query log of the configured store and propose (1) new phrasings for existing "
                    "FAQs: queries answered with score >= --min-score whose bag-of-words key (stop words and "
                    "numbers dropped, negations kept) equals that of one of the FAQ's phrasings (or, with "
                    "--siamese, that a Siamese matcher accepts), or that feedback confirmed; (2) clusters of unanswered queries that may need a new FAQ. "
                    "--out FILE gets the phrasings as a KB file `faq kb import FILE` accepts (each row carries "
                    "the FAQ's answer and tags as they are now, because import sets both: drop rows of FAQs "
                    "edited since). Clusters go to --clusters-out (default FILE with .clusters.jsonl), one "
                    "row per query with a placeholder faq_id new-<n> and no answer: import refuses them until "
                    "an editor sets a real faq_id and writes an answer. Review fields (count, evidence, "
                    "score_*, matched_phrasing, cluster_size) are ignored by import.")
    p.add_argument("--since", metavar="DATE", help="only queries logged from DATE on (ISO date or date-time, UTC)")
    p.add_argument("--out", metavar="FILE", help="write proposed phrasings here (.jsonl, importable after review)")
    p.add_argument("--clusters-out", metavar="FILE", help="write clusters of unanswered queries here (.jsonl)")
    p.add_argument("--min-score", type=float, default=None, metavar="P",
                   help="score a match needs for its query to be proposed without feedback (default "
                        f"{DEFAULT_MIN_SCORE:g}, measured in docs/results.md)")
    p.add_argument("--low-score", type=float, default=None, metavar="P",
                   help="also count answered queries below this score as unanswered (default: only no answer "
                        "or an answer the user rejected)")
    p.add_argument("--min-cluster", type=int, default=2, metavar="N", help="smallest cluster reported (default 2)")
    p.add_argument("--cluster-cosine", type=float, default=None, metavar="C",
                   help="also merge clusters whose most frequent queries have encoder cosine >= C "
                        "(loads the encoder; default: bag-of-words keys only)")
    p.add_argument("--encoder", metavar="SPEC", help="encoder for --cluster-cosine (default: the configured one)")
    p.add_argument("--siamese", metavar="DIR", help="a Siamese matcher folder (faq train siamese): a confident match "
                   "whose key differs is also proposed when the matcher gives the query against the FAQ's best "
                   "phrasing a probability >= --min-agree")
    p.add_argument("--min-agree", type=float, default=None, metavar="P",
                   help=f"the Siamese probability that confirms a match (default {DEFAULT_MIN_AGREE:g})")
    p.add_argument("--top", type=int, default=20, metavar="N", help="show at most N of each in the text output")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.set_defaults(func=cmd_mine)


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
    from index.build import encode_in_batches
    from kb.lint import DEFAULT_THRESHOLD, format_report, lint_kb

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
    from app.assembly import load_configured_encoder

    settings = get_settings()
    try:
        encoder = load_configured_encoder(settings, spec=args.encoder)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = lint_kb(records, encoder, threshold=threshold, progress=not args.no_progress and sys.stderr.isatty(),
                     encode=encode_in_batches)
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


def _parse_since(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _clusters_path(out: str) -> str:
    path = Path(out)
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    return str(path.with_name(stem + ".clusters.jsonl"))


def cmd_mine(args: argparse.Namespace) -> int:
    try:
        since = _parse_since(args.since) if args.since else None
    except ValueError:
        print(f"error: --since {args.since!r} is not an ISO date (YYYY-MM-DD[THH:MM])", file=sys.stderr)
        return EXIT_BAD_INPUT
    for name in ("min_score", "low_score", "cluster_cosine", "min_agree"):
        value = getattr(args, name)
        if value is not None and not -1.0 <= value <= 1.0:
            print(f"error: --{name.replace('_', '-')} must be between -1 and 1", file=sys.stderr)
            return EXIT_BAD_INPUT
    for path in (args.out, args.clusters_out):
        if path and Path(path).suffix.lower() not in (".jsonl", ".ndjson"):
            print(f"error: {path}: write .jsonl files", file=sys.stderr)
            return EXIT_BAD_INPUT
    embed = None
    if args.cluster_cosine is not None:
        from app.assembly import load_configured_encoder

        try:
            encoder = load_configured_encoder(get_settings(), spec=args.encoder)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        embed = encoder.encode
    siamese = None
    if args.siamese:
        from models.matchers.siamese import load_siamese

        try:
            siamese = load_siamese(args.siamese, device=get_settings().device)
        except (OSError, ValueError) as exc:
            print(f"error: --siamese {args.siamese}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    with _open_store() as store:
        report = mine_report(store, since=since, min_score=args.min_score, low_score=args.low_score,
                             min_cluster=args.min_cluster, embed=embed, cosine=args.cluster_cosine,
                             siamese=siamese, min_agree=args.min_agree)
    clusters_out = args.clusters_out or (_clusters_path(args.out) if args.out else None)
    try:
        write_mined(report, args.out, clusters_out)
    except OSError as exc:
        print(f"error: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return EXIT_OK
    top = None if args.top <= 0 else args.top
    s = report["stats"]
    lines = [f"Query log: {s['logged']} queries. {len(report['phrasings'])} new phrasing(s) for existing FAQs "
             f"(min score {report['min_score']:g}); {len(report['clusters'])} cluster(s) of unanswered queries "
             f"({s['unanswered_in_clusters']} queries).",
             f"  skipped: {s['already_phrasing']} already a phrasing, {s['phrasing_of_other_faq']} a phrasing of "
             f"another FAQ, {s['rejected_by_feedback']} rejected by feedback, {s['conflicting']} proposed for "
             f"several FAQs"]
    if report["phrasings"]:
        lines.append("New phrasings (count, evidence):")
        for p in report["phrasings"][:top]:
            ev = ", ".join(f"{k} {n}" for k, n in p["evidence"].items())
            lines.append(f"  {p['faq_id']}: {p['question']!r}  x{p['count']} ({ev})")
    if report["clusters"]:
        lines.append("Unanswered clusters (size: queries):")
        for c in report["clusters"][:top]:
            shown = "; ".join(q["query"] for q in c["queries"][:3]) + (" ..." if len(c["queries"]) > 3 else "")
            lines.append(f"  {c['faq_id']} ({c['size']}): {shown}")
    if args.out:
        lines.append(f"Wrote {args.out} (review, then `faq kb import {args.out}`)")
    if clusters_out:
        lines.append(f"Wrote {clusters_out} (set faq_id and an answer before importing)")
    print("\n".join(lines))
    return EXIT_OK
