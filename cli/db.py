"""`faq db ...`: schema migrations of the configured database (FAQ_DATABASE_URL or data_dir/faq.db), and
query-log and audit-log retention (`faq db prune [--days N] [--audit-days N] [--dry-run]`). The audit log is
kept forever unless --audit-days says otherwise: nothing else removes its rows."""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timedelta, timezone

from sqlalchemy.engine import make_url

from app.settings import get_settings
from migrations import runner


def register(subparsers: argparse._SubParsersAction) -> None:
    db = subparsers.add_parser("db", help="database migrations (upgrade, downgrade, current) and query-log retention (prune)",
                               description="Alembic schema migrations of the configured database, and "
                               "deleting query-log rows older than the retention period.")
    db.set_defaults(func=lambda args: (db.print_help(), 2)[1])
    sub = db.add_subparsers(dest="db_command", metavar="COMMAND")

    p = sub.add_parser("upgrade", help="migrate up to REV (default: head)")
    p.add_argument("rev", nargs="?", default="head", help="target revision (default: head)")
    p.set_defaults(func=cmd_upgrade)

    p = sub.add_parser("downgrade", help="migrate down to REV ('base' removes every table)")
    p.add_argument("rev", help="target revision, e.g. base or -1")
    p.set_defaults(func=cmd_downgrade)

    p = sub.add_parser("current", help="show the database's revision")
    p.set_defaults(func=cmd_current)

    p = sub.add_parser(
        "prune", help="delete query-log rows older than N days (default FAQ_QUERY_LOG_RETENTION_DAYS)",
        description="Deletes query_log rows created more than N days ago, 5,000 per transaction so the running "
        "service's log writer is never blocked for long. The service also prunes by itself, at most once an "
        "hour, with FAQ_QUERY_LOG_RETENTION_DAYS (0 = keep forever).",
    )
    p.add_argument("--days", type=_days, default=None,
                   help="keep the last N days (>= 1; default: FAQ_QUERY_LOG_RETENTION_DAYS)")
    p.add_argument("--audit-days", type=_audit_days, default=None, metavar="N",
                   help="also delete audit-log rows older than N days (>= 1), of every KB, deleted ones included; "
                        "without it the audit log is kept whole")
    p.add_argument("--dry-run", action="store_true", help="only count the rows that would be deleted")
    p.set_defaults(func=cmd_prune)


def _days(value: str, option: str = "--days") -> int:
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{option} must be a whole number, got {value!r}") from None
    if days < 1:
        raise argparse.ArgumentTypeError(f"{option} must be >= 1, got {days}")
    return days


def _audit_days(value: str) -> int:
    return _days(value, "--audit-days")


def _url() -> str:
    settings = get_settings()
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    return settings.db_url


def _describe(url: str) -> str:
    rev, head = runner.current(url), runner.head()
    shown_url = make_url(url).render_as_string(hide_password=True)
    if rev is None:
        return f"{shown_url}: empty, no migration applied (head is {head})"
    return f"{shown_url}: at {rev}" + (" (head)" if rev == head else f" (head is {head})")


def cmd_upgrade(args: argparse.Namespace) -> int:
    url = _url()
    runner.upgrade(url, args.rev)
    print(_describe(url))
    return 0


def cmd_downgrade(args: argparse.Namespace) -> int:
    url = _url()
    runner.downgrade(url, args.rev)
    print(_describe(url))
    return 0


def cmd_current(args: argparse.Namespace) -> int:
    print(_describe(_url()))
    return 0


def _open(settings, dry_run: bool):
    """The store, or the error to print; a dry run checks the schema without migrating (it changes nothing)."""
    from app.store import FaqStore, SchemaNotReady
    from migrations.runner import migrated_store

    if not dry_run:
        return migrated_store(settings)
    try:
        return FaqStore.from_settings(settings)
    except SchemaNotReady as exc:
        return str(exc)


def _prune_audit(settings, days: int, dry_run: bool) -> int:
    from app.store.audit import prune_every_kb

    store = _open(settings, dry_run)
    if isinstance(store, str):
        print(f"error: {store}", file=sys.stderr)
        return 1
    cutoff = datetime.now(timezone.utc) - timedelta(days=days)
    what = f"audit-log rows older than {days} days (created before {cutoff:%Y-%m-%d %H:%M:%S} UTC)"
    try:
        count = prune_every_kb(store.engine, cutoff, dry_run=dry_run)
    finally:
        store.close()
    print(f"dry run: {count} {what} would be deleted" if dry_run else f"deleted {count} {what}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from migrations.runner import migrated_store

    settings = get_settings()
    if args.audit_days is not None and _prune_audit(settings, args.audit_days, args.dry_run):
        return 1
    days = args.days if args.days is not None else int(getattr(settings, "query_log_retention_days", 90))
    if days <= 0:
        print("query-log retention is 0 (FAQ_QUERY_LOG_RETENTION_DAYS): logs are kept forever, nothing to prune; "
              "pass --days N to prune anyway")
        return 0
    cutoff = datetime.now(timezone.utc) - timedelta(days=days)
    if args.dry_run:  # not even a migration: a dry run changes nothing
        from app.store import FaqStore, SchemaNotReady

        try:
            store = FaqStore.from_settings(settings)
        except SchemaNotReady as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    else:
        store = migrated_store(settings)
    try:
        total = store.count_query_log_before(cutoff)
        what = f"query-log rows older than {days} days (created before {cutoff:%Y-%m-%d %H:%M:%S} UTC)"
        if args.dry_run:
            print(f"dry run: {total} {what} would be deleted")
            return 0
        if total == 0:
            print(f"no {what}")
            return 0
        started = time.monotonic()
        last_report = started

        def progress(deleted: int) -> None:
            nonlocal last_report
            now = time.monotonic()
            if now - last_report >= 2.0:
                last_report = now
                print(f"  deleted {deleted}/{total} ({deleted / total:.0%}) in {now - started:.0f}s", file=sys.stderr)

        result = store.prune_query_log(cutoff, progress=progress)
        print(f"deleted {result.deleted} {what} in {result.chunks} transaction(s), {time.monotonic() - started:.1f}s")
        return 0
    finally:
        store.close()
