"""`faq kb ...`: import, export and summarise a knowledge base (file formats: kb/files.py), and manage the
KBs themselves: list, create, delete, their stored settings and their access tokens. Every command acts
on the KB `--kb NAME` names, else FAQ_KB (cli/scope.py)."""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kb.mining import DEFAULT_MIN_AGREE, DEFAULT_MIN_SCORE
from kb.records import DEFAULT_KB, KbValidationError
from kb.files import read_kb
from app.settings import get_settings
from app.curation.mining import mine_report, write_mined
from app.store import KbNotFound
from cli.kb_audit import register_audit
from cli.kb_files import register_files
from cli.kb_publish import register_publishing
from cli.scope import add_kb_option, kb_settings, open_kb

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    kb = subparsers.add_parser("kb", help="import/export a FAQ knowledge base, show stats; list, create, delete KBs",
                               description="Manage the FAQ knowledge bases (database from FAQ_DATABASE_URL). "
                                           "Each command acts on the KB --kb NAME names, else FAQ_KB, else 'default'.")
    kb.set_defaults(func=lambda args: _usage(kb))
    sub = kb.add_subparsers(dest="kb_command", metavar="COMMAND")

    register_files(sub)
    register_audit(sub)
    register_publishing(sub)

    p = sub.add_parser("stats", help="summarise the KB", description="Counts of FAQs, variants and tags, "
                                                                    "the KB revision and the last index build.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_kb_option(p)
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser(
        "lint", help="flag FAQs whose answer does not fit their phrasings (swapped, truncated, missing, duplicated)",
        description="Rank the KB's FAQs by how likely their answer is wrong: answer fit against the other FAQs' "
                    "answers (with the encoder), missing / truncated answers, answers or phrasings duplicated "
                    "across FAQs. Each flag carries its reasons and numbers (kb/lint.py).")
    p.add_argument("--file", metavar="FILE", help="lint this KB file (.jsonl or .csv) instead of the store's KB")
    add_kb_option(p, help="the KB to lint, and whose encoder setting applies (default: FAQ_KB, else 'default')")
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
    p.add_argument("--dismissed", action="store_true", help="also flag findings an owner dismissed (in the "
                   "console's review queue); they are left out by default")
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
    p.add_argument("--dismissed", action="store_true", help="also propose what an owner dismissed (in the "
                   "console's review queues); left out by default")
    add_kb_option(p)
    p.set_defaults(func=cmd_mine)

    _register_kbs(sub)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_BAD_INPUT


def cmd_stats(args: argparse.Namespace) -> int:
    with open_kb(args) as scope:
        stats = scope.store.stats()
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
        f"KB:                 {s['kb']}",
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
    settings = get_settings()
    if args.file:
        try:
            records = read_kb(args.file)
        except KbValidationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except OSError as exc:
            print(f"error: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if not args.file or args.kb is not None:  # a file alone needs no database
        with open_kb(args) as scope:
            settings = scope.settings
            if not args.file:
                records = list(scope.store.export_records())
    from app.match.assembly import load_configured_encoder

    try:
        encoder = load_configured_encoder(settings, spec=args.encoder)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = lint_kb(records, encoder, threshold=threshold, progress=not args.no_progress and sys.stderr.isatty(),
                     encode=encode_in_batches)
    if not args.file and not args.dismissed:  # dismissals belong to the store's KB, not to a file
        from app.curation.review import hide_dismissed_lint

        with open_kb(args) as scope:
            hidden = hide_dismissed_lint(scope.store, report)
        if hidden:
            report.notes.append(f"{hidden} finding(s) dismissed by an owner are not flagged (--dismissed flags them)")
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
    settings = kb_settings(args)  # before loading models: an unknown KB fails at once
    embed = None
    if args.cluster_cosine is not None:
        from app.match.assembly import load_configured_encoder

        try:
            encoder = load_configured_encoder(settings, spec=args.encoder)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        embed = encoder.encode
    siamese = None
    if args.siamese:
        from models.matchers.siamese import load_siamese

        try:
            siamese = load_siamese(args.siamese, device=settings.device)
        except (OSError, ValueError) as exc:
            print(f"error: --siamese {args.siamese}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    with open_kb(args) as scope:
        report = mine_report(scope.store, since=since, min_score=args.min_score, low_score=args.low_score,
                             min_cluster=args.min_cluster, embed=embed, cosine=args.cluster_cosine,
                             siamese=siamese, min_agree=args.min_agree, include_dismissed=args.dismissed)
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
    if s["dismissed_phrasings"] or s["dismissed_clusters"]:
        lines.append(f"  dismissed by an owner, left out: {s['dismissed_phrasings']} phrasing(s), "
                     f"{s['dismissed_clusters']} cluster(s) (--dismissed shows them)")
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


# ---------------------------------------------------------------- the KBs themselves

#: kb_tokens.label's column width (app/db/models.py KbToken)
MAX_TOKEN_LABEL_CHARS = 200


def _register_kbs(sub: argparse._SubParsersAction) -> None:
    from app.settings import KbSettings
    from app.store.catalog import READ_KIND, ROLES

    keys = ", ".join(KbSettings.model_fields)
    p = sub.add_parser("list", help="list the KBs: FAQs, phrasings, revision, current index version, settings",
                       description="Every KB with its size, revision, current index version (from its own "
                                   "index folder) and stored settings; * marks the KB commands act on without "
                                   "--kb (FAQ_KB).")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("create", help="create an empty KB", description="Create an empty KB NAME (`faq kb import "
                       "FILE --kb NAME` also creates one), optionally with its own settings.")
    p.add_argument("name", metavar="NAME", help="1-64 characters of a-z, 0-9, '-' and '_', starting with a letter "
                   "or digit")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=f"a setting of the KB ({keys})")
    p.set_defaults(func=cmd_create)

    p = sub.add_parser(
        "delete", help="delete a KB: its FAQs, phrasings, builds, tokens, query log and index folder",
        description="Delete KB NAME from the store (FAQs, phrasings, build records, tokens, query-log rows), "
                    "then its folder (index versions, decision model) and, with FAQ_ES_URL set, the "
                    "Elasticsearch indexes its builds name. The 'default' KB cannot be deleted. Asks to type "
                    "the name on a terminal; elsewhere --yes is required.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser(
        "settings", help="show or change a KB's own settings (threshold, precision, answer weight, encoder, keep)",
        description=f"A KB's stored settings ({keys}) override the FAQ_* variables of the same name for that "
                    f"KB alone; unset ones follow FAQ_*. Without --set/--unset: show them.")
    add_kb_option(p)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="store a setting (repeatable)")
    p.add_argument("--unset", action="append", default=[], metavar="KEY",
                   help="remove a stored setting: follow FAQ_* again (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_settings)

    p = sub.add_parser(
        "token", help="create, list or revoke a KB's access tokens",
        description="Create a token for one KB: the token alone goes to stdout (only its SHA-256 is stored, so it "
                    "cannot be shown again). A person's token has a role, each allowed what the one before it is "
                    "and more (docs/roles.md): viewer (the console and the admin API's reads), editor (FAQs, "
                    "imports, review), publisher (publish, builds), admin (tokens, settings). A read token "
                    "(--kind read) is a bot's key for /match and /feedback only (required with "
                    "FAQ_MATCH_REQUIRES_KEY). --list shows the KB's tokens (never the tokens themselves), "
                    "--revoke ID ends one.")
    add_kb_option(p)
    role = p.add_mutually_exclusive_group()
    role.add_argument("--role", choices=ROLES, default=None, help="the person's role (default admin)")
    role.add_argument("--kind", choices=("admin", READ_KIND), default=None,
                      help="read: the match-only key for bots; admin: as --role admin")
    p.add_argument("--name", default=None, help=f"who or what the token is for, as the audit log records it (at "
                   f"most {MAX_TOKEN_LABEL_CHARS} characters)")
    p.add_argument("--label", default=None, help="the same as --name")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="list the KB's tokens")
    what.add_argument("--revoke", type=int, default=None, metavar="ID", help="revoke the KB's token ID")
    p.add_argument("--json", action="store_true", help="with --list: machine-readable output")
    p.set_defaults(func=cmd_token)


def _bad(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _parse_settings(pairs: list[str], unset: list[str] | None = None) -> tuple[dict[str, str], list[str]] | str:
    """--set KEY=VALUE and --unset KEY as (values, keys), or the error to print."""
    from app.settings import KbSettings

    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            return f"--set {pair!r}: expected KEY=VALUE, e.g. --set default_threshold=0.6"
        if key in values:
            return f"--set {key}: given twice"
        values[key] = value.strip()
    for key in unset or []:
        if key not in KbSettings.model_fields:
            return f"--unset {key}: not a KB setting; a KB can set {', '.join(KbSettings.model_fields)}"
        if key in values:
            return f"{key}: both --set and --unset"
    return values, list(unset or [])


def _validated(settings: dict[str, Any]) -> dict[str, Any] | str:
    """The settings as KbSettings stores them, or the error to print (each bad field with its limit)."""
    from pydantic import ValidationError

    from app.settings import KbSettings
    from app.settings import settings_problems

    try:
        return KbSettings.model_validate(settings).model_dump(exclude_none=True)
    except ValidationError as exc:
        return "; ".join(settings_problems(exc))


def _shown(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "-"


def cmd_list(args: argparse.Namespace) -> int:
    from index.artifacts import BuildRegistry
    from migrations.runner import migrated_store
    from cli.scope import settings_for

    settings = get_settings()
    with migrated_store(settings) as store:
        kbs = store.catalog.list()
    rows = []
    for info in kbs:
        # the folder alone: a stored setting this version refuses must not hide the KB from the list
        registry = BuildRegistry(settings_for(info.name).index_dir)
        try:
            index = registry.current()
        except OSError:
            index = None
        rows.append({**info.as_dict(), "index": index})
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return EXIT_OK
    width = max([len("NAME")] + [len(r["name"]) for r in rows])
    print(f"  {'NAME':<{width}} {'FAQS':>7} {'PHRASINGS':>9} {'REVISION':>8}  {'INDEX':<24} SETTINGS")
    for r in rows:
        mark = "*" if r["name"] == settings.kb else " "
        print(f"{mark} {r['name']:<{width}} {r['faqs']:>7} {r['variants']:>9} {r['revision']:>8}  "
              f"{r['index'] or '-':<24} {_shown(r['settings'])}")
    return EXIT_OK


def cmd_create(args: argparse.Namespace) -> int:
    from app.store import KbExists
    from kb.records import kb_name_problem
    from migrations.runner import migrated_store

    problem = kb_name_problem(args.name)
    if problem:
        return _bad(f"NAME: {problem}")
    parsed = _parse_settings(args.set)
    if isinstance(parsed, str):
        return _bad(parsed)
    stored = _validated(parsed[0])
    if isinstance(stored, str):
        return _bad(stored)
    with migrated_store(get_settings()) as store:
        try:
            store.catalog.create(args.name, stored)
        except KbExists as exc:
            return _bad(f"{exc} (`faq kb list`; `faq kb settings --kb {args.name}` changes its settings)")
    print(f"Created KB {args.name!r} (settings: {_shown(stored)}); fill it with "
          f"`faq kb import FILE --kb {args.name}`")
    return EXIT_OK


def _confirm_delete(name: str, info: Any, folder: Path) -> bool:
    print(f"KB {name!r}: {info.faqs} FAQs, {info.variants} phrasings, revision {info.revision}; its index "
          f"versions, tokens and query log go with it ({folder}).", file=sys.stderr)
    try:
        typed = input(f"Type {name} to delete it: ")
    except EOFError:
        return False
    return typed.strip() == name


def cmd_delete(args: argparse.Namespace) -> int:
    from app.release.deletion import delete_kb, folder_problem
    from kb.records import kb_name_problem
    from migrations.runner import migrated_store
    from cli.scope import settings_for

    name = args.name
    problem = kb_name_problem(name)
    if problem:
        return _bad(f"NAME: {problem}")
    if name == DEFAULT_KB:
        return _bad(f"the {DEFAULT_KB!r} KB cannot be deleted (the routes without /kbs/ serve it); empty it with "
                    f"`faq kb import EMPTY_FILE --sync`")
    # without the KB's stored settings: a KB whose settings this version refuses must still be deletable,
    # and they move neither its folder nor FAQ_ES_URL
    settings = settings_for(name)
    folder = settings.kb_dir
    problem = folder_problem(settings)
    if problem:
        return _bad(f"KB {name!r}: {problem}; not deleted")
    with migrated_store(settings) as store:
        info = next((k for k in store.catalog.list() if k.name == name), None)
        if info is None:
            raise KbNotFound(name)
        if not args.yes:
            if not sys.stdin.isatty():
                return _bad(f"deleting KB {name!r} needs --yes when stdin is not a terminal to confirm on")
            if not _confirm_delete(name, info, folder):
                print(f"KB {name!r} not deleted", file=sys.stderr)
                return 1
        done = delete_kb(settings, store, name)
    counts = done.counts
    lines = [f"Deleted KB {name!r}: {counts['faqs']} FAQs, {counts['variants']} phrasings, {counts['builds']} "
             f"builds, {counts['tokens']} tokens, {counts['query_log']} query-log rows"
             + (f"; removed {folder}" if done.removed_folder else "")]
    if done.vector_error is not None:
        print(f"warning: could not delete the KB's vector indexes in Elasticsearch ({done.vector_error}); delete "
              f"{settings.es_index_prefix}-vec-{name}-* by hand", file=sys.stderr)
    elif done.vector_versions:
        lines.append(f"Deleted its vector indexes of versions {', '.join(done.vector_versions)}")
    if done.lexical_deleted:
        lines.append(f"Deleted Elasticsearch indexes: {', '.join(done.lexical_deleted)}")
    if done.lexical_left:
        print(f"warning: could not delete Elasticsearch indexes {', '.join(done.lexical_left)} (see the log); delete "
              f"them by hand", file=sys.stderr)
    print("\n".join(lines))
    return EXIT_OK


def cmd_settings(args: argparse.Namespace) -> int:
    from app.settings import KbSettings
    from cli.scope import settings_for

    parsed = _parse_settings(args.set, args.unset)
    if isinstance(parsed, str):
        return _bad(parsed)
    values, unset = parsed
    with open_kb(args) as scope:
        stored = scope.store.catalog.settings(scope.name)
        if values or unset:
            wanted = {k: v for k, v in stored.items() if k not in unset}
            wanted.update(values)
            new = _validated(wanted)
            if isinstance(new, str):
                return _bad(new)
            scope.store.catalog.set_settings(scope.name, new)
            if new.get("publishing") == "reviewed" and stored.get("publishing") != "reviewed":
                from app.release.publishing import start_reviewing

                first = start_reviewing(scope.store)  # production keeps answering what users get now
                if first is not None and not args.json:
                    print(f"KB {scope.name!r}: its content as served now is publication {first.id}; edits go to "
                          f"the draft until `faq kb publish`")
            changes = [f"{k} {stored.get(k, 'unset')} -> {new.get(k, 'unset')}"
                       for k in KbSettings.model_fields if stored.get(k) != new.get(k)]
            stored = new
            if not args.json:
                print(f"KB {scope.name!r}: " + ("; ".join(changes) if changes else "no change"))
    effective = settings_for(scope.name, stored)
    values_now = {k: getattr(effective, k) for k in KbSettings.model_fields}
    if args.json:
        print(json.dumps({"kb": scope.name, "stored": stored, "effective": values_now}, indent=2, default=str))
        return EXIT_OK
    print(f"KB {scope.name!r} settings (* = stored for this KB; the others follow FAQ_*):")
    width = max(len(k) for k in values_now)
    for key, value in values_now.items():
        print(f"{'*' if key in stored else ' '} {key:<{width}}  {'unset' if value is None else value}")
    return EXIT_OK


def cmd_token(args: argparse.Namespace) -> int:
    from kb.records import text_problem

    if (args.list or args.revoke is not None) and (args.role or args.kind or args.name is not None
                                                     or args.label is not None):
        return _bad("--role, --kind, --name and --label go with creating a token, not with --list or --revoke")
    if args.json and not args.list:
        return _bad("--json goes with --list (a new token is printed alone)")
    if args.name is not None and args.label is not None:
        return _bad("--name and --label are the same: give one of them")
    flag, label = ("--label", args.label) if args.label is not None else ("--name", args.name)
    if label is not None:
        problem = text_problem(label) or (
            f"at most {MAX_TOKEN_LABEL_CHARS} characters, got {len(label)}"
            if len(label) > MAX_TOKEN_LABEL_CHARS else None)
        if problem:
            return _bad(f"{flag}: {problem}")
    with open_kb(args) as scope:
        kbs, name = scope.store.catalog, scope.name
        if args.list:
            return _print_tokens(kbs.tokens(name), name, args.json)
        if args.revoke is not None:
            if not kbs.revoke_token(name, args.revoke):
                return _bad(f"KB {name!r} has no live token {args.revoke} (`faq kb token --kb {name} --list`)")
            print(f"revoked token {args.revoke} of KB {name!r}")
            return EXIT_OK
        kind = args.role or args.kind or "admin"
        token_id, token = kbs.issue_token(name, kind=kind, label=label)
    print(token)
    print(f"{kind} token {token_id} of KB {name!r}" + (f" ({label})" if label else "")
          + ": store it now, it cannot be shown again", file=sys.stderr)
    return EXIT_OK


def _print_tokens(tokens: list, kb: str, as_json: bool) -> int:
    if as_json:
        # kind and label as stored; role and name as `faq kb token` spells them
        print(json.dumps([{**t.as_dict(), "role": t.kind, "name": t.label} for t in tokens], indent=2,
                         ensure_ascii=False))
        return EXIT_OK
    if not tokens:
        print(f"KB {kb!r} has no tokens: `faq kb token --kb {kb}` creates one")
        return EXIT_OK
    print(f"  {'ID':>4}  {'ROLE':<9}  {'CREATED':<25}  {'REVOKED':<25}  NAME")
    for t in tokens:
        revoked = t.revoked_at.isoformat(timespec="seconds") if t.revoked_at else "-"
        print(f"  {t.id:>4}  {t.kind:<9}  {t.created_at.isoformat(timespec='seconds'):<25}  {revoked:<25}  "
              f"{t.label or '-'}")
    return EXIT_OK
