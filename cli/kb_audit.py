"""`faq kb audit`: a KB's audit log (app/store/audit.py), newest first: who changed what, through what, when.

It reads the log of a KB that was deleted too (its rows outlive it until `faq db prune --audit-days N`), so
the KB is named but not opened.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from app.settings import get_settings
from app.store import KbNotFound
from app.store.audit import change_summary
from cli.scope import add_kb_option, kb_name
from kb.records import MAX_FAQ_ID_CHARS, field_problem

EXIT_OK = 0
EXIT_BAD_INPUT = 2
#: most rows one command prints (the API's bound, app/api/routes/admin.py MAX_AUDIT_LIMIT)
MAX_LIMIT = 1000


def register_audit(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "audit", help="show the KB's audit log: every change, who made it, through what, before and after",
        description="The KB's changes, newest first: FAQ edits, imports, settings, tokens, builds and activations, "
                    "review decisions, made through the API, the console, the CLI or the compatibility routes. "
                    "A deleted KB's log stays readable until `faq db prune --audit-days N` removes it.")
    add_kb_option(p)
    p.add_argument("--since", metavar="DATE", help="only changes from DATE on (ISO date or date-time; no zone: UTC)")
    p.add_argument("--faq", metavar="ID", help="only the changes of this FAQ")
    p.add_argument("--actor", metavar="NAME", help="only the changes this actor made (a token's name, a user)")
    p.add_argument("--limit", type=int, default=100, metavar="N", help=f"at most N rows, the newest (1-{MAX_LIMIT}; "
                   "default 100)")
    p.add_argument("--json", action="store_true", help='print {"entries": [...]}, as the API answers')
    p.set_defaults(func=cmd_audit)


def _bad(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _since(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def cmd_audit(args: argparse.Namespace) -> int:
    from migrations.runner import migrated_store

    try:
        since = _since(args.since) if args.since else None
    except ValueError:
        return _bad(f"--since {args.since!r} is not an ISO date (YYYY-MM-DD[THH:MM])")
    if not 1 <= args.limit <= MAX_LIMIT:
        return _bad(f"--limit must be from 1 to {MAX_LIMIT}, got {args.limit}")
    for option, value, width in (("--faq", args.faq, MAX_FAQ_ID_CHARS), ("--actor", args.actor, 200)):
        problem = field_problem(value, width) if value is not None else None
        if problem:
            return _bad(f"{option}: {problem}")
    name = kb_name(args)
    with migrated_store(get_settings()) as base:
        store = base.for_kb(name)
        rows = store.audit.read(since=since, faq_id=args.faq, actor=args.actor, limit=args.limit)
        if not rows and not store.kb_exists() and not store.audit.read(limit=1):
            raise KbNotFound(name)
    if args.json:
        print(json.dumps({"entries": [r.as_dict() for r in rows]}, indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print(f"KB {name!r}: no changes recorded" + (" that match" if since or args.faq or args.actor else ""))
        return EXIT_OK
    print(f"  {'WHEN (UTC)':<19}  {'WHO':<24}  {'SOURCE':<7}  {'ACTION':<17}  SUBJECT: BEFORE → AFTER")
    for r in rows:
        who = f"{r.actor} ({r.role})"
        print(f"  {r.created_at:%Y-%m-%d %H:%M:%S}  {who:<24}  {r.source:<7}  {r.action:<17}  "
              f"{r.subject or '-'}: {change_summary(r.before, r.after)}")
    return EXIT_OK
