"""What every part of the store shares: the tables, the transactions and a few value helpers.

Concurrency: every KB mutation runs in one transaction that starts by touching the kb_meta revision
row (`StorePart._write`), which takes SQLite's write lock (waiting up to busy_timeout) / PostgreSQL's
row lock. KB writers are therefore serialised, and the revision is bumped in the same transaction as
the change it marks. Readers that need a consistent view (snapshot, export, stats) run in one snapshot
transaction (`StorePart._read`).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from sqlalchemy import Connection, Engine, insert, select, update

from app.db.models import Faq, IndexBuild, KbMeta, QueryLog, QuestionVariant
from kb.records import text_problem

REVISION_KEY = "revision"
# bound parameters per IN (...) list: stays under SQLite's variable limit
_CHUNK = 500

faqs_t = Faq.__table__
variants_t = QuestionVariant.__table__
builds_t = IndexBuild.__table__
qlog_t = QueryLog.__table__
meta_t = KbMeta.__table__


class SchemaNotReady(RuntimeError):
    """The database is not at the schema revision this code needs (run `faq db upgrade`)."""


def utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything stored is UTC, so make that explicit."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def chunks(items: list, size: int = _CHUNK) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def storable(*texts: str | None) -> bool:
    return all(t is None or text_problem(t) is None for t in texts)


def read_revision(conn: Connection) -> int:
    value = conn.execute(select(meta_t.c.value).where(meta_t.c.key == REVISION_KEY)).scalar()
    return int(value or 0)


def bump_revision(conn: Connection) -> int:
    result = conn.execute(
        update(meta_t).where(meta_t.c.key == REVISION_KEY).values(value=meta_t.c.value + 1)
    )
    if result.rowcount == 0:  # database created without the migration's seed row
        conn.execute(insert(meta_t).values(key=REVISION_KEY, value=1))
    return read_revision(conn)


class StorePart:
    """One concern's data access on the engine the store shares among its parts."""

    def __init__(self, engine: Engine):
        self.engine = engine

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read transaction seeing one consistent state of the database."""
        with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A KB write transaction, serialised against other KB writers (see module docstring).

        Commits on normal exit unless the body already rolled back; rolls back on an exception.
        """
        with self.engine.connect() as conn:
            # A no-op write as the first statement: takes the lock before anything is read.
            conn.execute(update(meta_t).where(meta_t.c.key == REVISION_KEY).values(value=meta_t.c.value))
            yield conn
            if conn.in_transaction():
                conn.commit()
