"""Run the Alembic migrations programmatically (no alembic.ini needed at runtime).

    upgrade(url)               # to head; a no-op (one cheap query) when already there
    downgrade(url, "base")
    current(url) -> "0001" | None;  head() -> "0001"
"""
from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.pool import NullPool

from app.db.session import make_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent
log = logging.getLogger(__name__)


def make_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation: a literal % (e.g. in a URL-encoded password) must be doubled
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head() -> str:
    heads = ScriptDirectory(str(MIGRATIONS_DIR)).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"expected one migration head, found {heads}")
    return heads[0]


def current(url: str) -> str | None:
    """The revision the database is at; None for an empty (never migrated) database."""
    engine = make_engine(url, poolclass=NullPool)
    # MigrationContext logs "Context impl ..." at INFO on every call; this check runs on every start
    migration_log = logging.getLogger("alembic.runtime.migration")
    level = migration_log.level
    migration_log.setLevel(logging.WARNING)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        migration_log.setLevel(level)
        engine.dispose()


def upgrade(url: str, rev: str = "head") -> None:
    if rev == "head" and current(url) == head():
        return
    try:
        command.upgrade(make_config(url), rev)
    except Exception:
        # Two processes (server + CLI) may upgrade the same fresh database at once; the loser's
        # failure is harmless if the winner got it to head.
        if rev == "head" and current(url) == head():
            log.info("database was upgraded concurrently by another process")
            return
        raise


def downgrade(url: str, rev: str) -> None:
    command.downgrade(make_config(url), rev)


def migrated_store(settings):
    """The configured store, its database migrated to head first (creating data_dir): what entry
    points open (the `faq` commands, `faq serve` before its workers start, evaluations on their scratch
    databases). Library code opens `FaqStore.from_settings`, which only checks the schema."""
    from app.store import FaqStore

    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_url)
    return FaqStore.from_settings(settings)
