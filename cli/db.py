"""`faq db ...`: schema migrations of the configured database (FAQ_DATABASE_URL or data_dir/faq.db)."""
from __future__ import annotations

import argparse

from sqlalchemy.engine import make_url

from app.settings import get_settings
from migrations import runner


def register(subparsers: argparse._SubParsersAction) -> None:
    db = subparsers.add_parser("db", help="database migrations (upgrade, downgrade, current)",
                               description="Alembic schema migrations of the configured database.")
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
