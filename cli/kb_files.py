"""`faq kb import` and `faq kb export`: the KB to and from files, ours (JSONL, CSV: kb/files.py) and other
products' (QnA Maker, Azure question answering, QnABot, Rasa, Dialogflow, schema.org FAQPage: kb/formats/).

An import reads and checks the whole file first: any bad row prints `file:line: reason` and nothing is
written. Then the FAQs go in (one transaction), and what the file keeps beside them: its synonyms and default
answer (KB settings) and its suggested phrasings (proposals in the review queue). Re-importing a file
changes nothing; `export` then `import` of the result reproduces the KB.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.curation.imports import export_contents, file_sha256, keep_beside, settings_problem
from app.store import ImportReport, KbNotFound
from app.store.audit import importing
from cli.scope import KbScope, add_kb_option, open_kb
from kb.formats import EXPORT_FORMATS, FORMATS, Imported, read_any, write_any
from kb.records import DEFAULT_KB, KbRecord, KbValidationError, follow_up_problems, group_records

EXIT_OK = 0
EXIT_BAD_INPUT = 2
#: the export format a file's extension implies when --format is not given
_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "qnamaker", ".xlsx": "qnamaker",
              ".json": "azure", ".zip": "azure"}


def register_files(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import", help="upsert FAQs from a file: JSONL, CSV, QnA Maker, Azure, QnABot, Rasa, Dialogflow, FAQPage",
        description="Upsert FAQs and question variants from FILE ('-' reads JSONL from stdin). The format is "
                    "detected from the file, or named with --format: jsonl, csv; qnamaker (QnA Maker TSV, XLSX, "
                    "ZIP or JSON export), azure (Azure question answering JSON, ZIP, XLSX or TSV export; its "
                    "synonyms and default answer become the KB's), qnabot (QnABot JSON export), rasa (a Rasa YAML file or folder with "
                    "faq/... retrieval intents and utter_faq/... responses), dialogflow (FAQ CSV: question, "
                    "answer), faqpage (an HTML page with schema.org FAQPage markup). Suggested questions go to "
                    "the review queue, never in as phrasings. Re-importing the same file changes nothing. Any "
                    "invalid row aborts the whole import.")
    p.add_argument("file", help="KB file (a folder for rasa), or - for JSONL on stdin")
    p.add_argument("--format", choices=FORMATS, help="the file's format (default: detected)")
    add_kb_option(p, help="the KB to import into, created when it does not exist (default: FAQ_KB, else 'default')")
    p.add_argument("--sync", action="store_true",
                   help="also delete FAQs not in the file and variants of listed FAQs that are not in the file; "
                        "the file's synonyms replace the KB's")
    p.add_argument("--dry-run", action="store_true", help="report what would change without writing anything")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser(
        "export", help="write the KB to a file: JSONL, CSV, QnA Maker or Azure",
        description="Write every FAQ and question variant to FILE ('-' for JSONL on stdout). --format qnamaker "
                    "writes QnA Maker's TSV (.tsv), XLSX (.xlsx), KB replica (.zip) or JSON (.json); azure "
                    "writes an Azure question answering project (.json; .zip and .xlsx also hold the KB's "
                    "synonyms and default answer, .tsv only the pairs). Default: by extension (.tsv/.xlsx qnamaker, .json azure). FAQ ids that are "
                    "numbers are kept as QnA ids; others get stable numbers. `faq kb import` of the result "
                    "reproduces the KB.")
    p.add_argument("file", help="output file, or - for JSONL on stdout")
    p.add_argument("--format", choices=EXPORT_FORMATS, help="the format to write (default: by extension)")
    add_kb_option(p)
    p.set_defaults(func=cmd_export)


def cmd_import(args: argparse.Namespace) -> int:
    name = "<stdin>" if args.file == "-" else args.file
    try:
        imported = read_any(args.file, args.format)
    except KbValidationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("nothing was imported", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"error: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    records = imported.records
    problem = settings_problem(imported)
    if problem:
        print(f"error: {name}: {problem}\nnothing was imported", file=sys.stderr)
        return EXIT_BAD_INPUT
    extras: dict[str, Any] = {}
    # read first, then check against no KB before making one: a file that fails must not leave a new, empty KB
    # behind (follow-ups naming FAQs of neither the file nor the KB are only found once the file is read)
    scope: KbScope | None = None
    try:
        scope = open_kb(args)
    except KbNotFound as exc:
        try:
            report = _report_for_new_kb(records, args.sync)
        except KbValidationError as problems:
            print(f"error: {problems}\nnothing was imported", file=sys.stderr)
            return EXIT_BAD_INPUT
        kb, created = exc.kb, True
        extras = {"synonyms_added": len(imported.synonyms), "suggestions_added": len(imported.suggestions),
                  "default_answer": imported.default_answer is not None}
        if not args.dry_run:
            scope = open_kb(args, create=True)
    if scope is not None:
        kb, created = scope.name, scope.created
        with scope:
            try:
                digest = None if args.dry_run else file_sha256(args.file)
                with importing(name, digest, format=imported.format):
                    report = scope.store.import_records(records, sync=args.sync, dry_run=args.dry_run)
                extras = keep_beside(scope.store, scope.name, imported, args.sync, args.dry_run)
            except BaseException as exc:
                if created:
                    _forget_new_kb(scope)
                if not isinstance(exc, KbValidationError):
                    raise
                # what only the store can tell (read_any and the check above apply the rules they can)
                print(f"error: {exc}\nnothing was imported", file=sys.stderr)
                return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps({"file": name, "format": imported.format, "kb": kb,
                          "kb_created": created and not args.dry_run, "rows": len(records), **report.as_dict(),
                          **extras, "notes": imported.notes}, indent=2))
    else:
        if created:
            print(f"KB {kb!r} does not exist: the import would create it." if args.dry_run else
                  f"Created KB {kb!r}.")
        print(format_report(name, len(records), report, kb, imported, extras))
    return EXIT_OK


def _forget_new_kb(scope: KbScope) -> None:
    """Delete the KB this import created, when its import failed and nothing else filled it meanwhile."""
    if scope.name == DEFAULT_KB:  # the routes without /kbs/ serve it: it stays, as `faq kb delete` leaves it
        return
    try:
        if scope.store.count_faqs() == 0:
            scope.store.catalog.delete(scope.name)
    except Exception as exc:  # the import's own error is the one to report; this one only leaves a KB behind
        print(f"warning: KB {scope.name!r} was created and is left empty: {exc}", file=sys.stderr)


def _report_for_new_kb(records: list[KbRecord], sync: bool) -> ImportReport:
    """What a dry run would do to a KB that does not exist yet: everything is new (and follow-ups can only
    name FAQs of the file: KbValidationError)."""
    specs, _ = group_records((r.loc or f"record {i}", r) for i, r in enumerate(records, start=1))
    dangling = follow_up_problems(specs)
    if dangling:
        raise KbValidationError([f"{loc}: {reason}" for loc, reason in dangling])
    return ImportReport(faqs_created=len(specs), variants_added=sum(len(s.questions) for s in specs.values()),
                        sync=sync, dry_run=True)


def format_report(name: str, n_rows: int, r: ImportReport, kb: str = DEFAULT_KB, imported: Imported | None = None,
                  extras: dict[str, Any] | None = None) -> str:
    n_faqs = r.faqs_created + r.faqs_updated + r.faqs_unchanged
    mode = " (dry run, --sync)" if r.dry_run and r.sync else " (dry run)" if r.dry_run else " (--sync)" if r.sync else ""
    into = "" if kb == DEFAULT_KB else f" into KB {kb!r}"
    fmt = "" if imported is None or imported.format in ("jsonl", "csv") else f" ({imported.format})"
    lines = [
        f"Imported {name}{fmt}{into}{mode}: {n_rows} row{'' if n_rows == 1 else 's'}, "
        f"{n_faqs} FAQ{'' if n_faqs == 1 else 's'}",
        f"  FAQs:      {r.faqs_created} created, {r.faqs_updated} updated, {r.faqs_unchanged} unchanged"
        + (f", {r.faqs_deleted} deleted" if r.sync else ""),
        f"  Variants:  {r.variants_added} added, {r.variants_removed} removed, {r.variants_unchanged} unchanged",
    ]
    extras = extras or {}
    if imported is not None and (imported.synonyms or extras.get("synonym_groups")):
        lines.append(f"  Synonyms:  {extras.get('synonyms_added', 0)} new groups "
                     f"({extras.get('synonym_groups', len(imported.synonyms))} in the KB)")
    if imported is not None and imported.suggestions:
        lines.append(f"  Suggested phrasings: {extras.get('suggestions_added', 0)} new in the review queue "
                     f"(of {len(imported.suggestions)} in the file; never added as phrasings)")
    if imported is not None and imported.default_answer is not None:
        lines.append(f"  Default answer: {imported.default_answer[:60]!r}")
    if r.changes == 0:
        lines.append(f"No changes; KB revision stays {r.revision_before}.")
    elif r.dry_run:
        lines.append(f"Dry run: nothing was written (KB revision stays {r.revision_before}).")
    else:
        lines.append(f"KB revision {r.revision_before} -> {r.revision}.")
    for note in (imported.notes if imported is not None else []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    fmt = args.format or ("jsonl" if args.file == "-" else _BY_SUFFIX.get(Path(args.file).suffix.lower()))
    if fmt is None:
        print(f"error: cannot tell the format from {args.file!r}; use .jsonl, .csv, .tsv, .xlsx or .json, or "
              f"--format ({', '.join(EXPORT_FORMATS)})", file=sys.stderr)
        return EXIT_BAD_INPUT
    with open_kb(args) as scope:
        try:
            n_faqs, n_variants = write_any(args.file, fmt, export_contents(scope.store, scope.name))
        except KbValidationError as exc:  # an extension the format does not write
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except OSError as exc:
            print(f"error: cannot write {args.file}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    # keep stdout clean when the export itself goes there
    out = sys.stderr if args.file == "-" else sys.stdout
    into = "" if scope.name == DEFAULT_KB else f" of KB {scope.name!r}"
    print(f"Exported {n_faqs} FAQs{into} ({n_variants} question variants) to {args.file}"
          + ("" if fmt in ("jsonl", "csv") else f" as {fmt}"), file=out)
    return EXIT_OK
