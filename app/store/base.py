"""What every part of the store shares: the tables, the transactions and a few value helpers.

Every part is scoped to one KB (`kb`, a row of `kbs`): it reads and writes only that KB's rows.

Concurrency: every KB mutation runs in one transaction that starts by touching its KB's row in `kbs`
(`StorePart.locked_write`), which takes SQLite's write lock (waiting up to busy_timeout) / PostgreSQL's
row lock. Writers of one KB are therefore serialised (on PostgreSQL, writers of different KBs are
not), and the KB's revision is bumped in the same transaction as the change it marks. Readers that need a consistent view (snapshot, export, stats) run in one snapshot
transaction (`StorePart._read`).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from sqlalchemy import Connection, Engine, select, update

from app.db.models import Faq, IndexBuild, Kb, KbToken, QueryLog, QuestionVariant, ReviewDismissal, SuggestedPhrasing
from kb.records import DEFAULT_KB, text_problem

# bound parameters per IN (...) list: stays under SQLite's variable limit
_CHUNK = 500

faqs_t = Faq.__table__
variants_t = QuestionVariant.__table__
builds_t = IndexBuild.__table__
qlog_t = QueryLog.__table__
kbs_t = Kb.__table__
tokens_t = KbToken.__table__
dismissals_t = ReviewDismissal.__table__
suggestions_t = SuggestedPhrasing.__table__


class SchemaNotReady(RuntimeError):
    """The database is not at the schema revision this code needs (run `faq db upgrade`)."""


class KbNotFound(LookupError):
    """No KB of that name (`faq kb import --kb NAME` creates one)."""

    def __init__(self, kb: str):
        super().__init__(f"no KB named {kb!r}: create it with `faq kb import FILE --kb {kb}` (or `faq kb list`)")
        self.kb = kb


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


def read_revision(conn: Connection, kb: str) -> int:
    value = conn.execute(select(kbs_t.c.revision).where(kbs_t.c.name == kb)).scalar()
    return int(value or 0)


def bump_revision(conn: Connection, kb: str) -> int:
    conn.execute(update(kbs_t).where(kbs_t.c.name == kb).values(revision=kbs_t.c.revision + 1))
    return read_revision(conn, kb)


class StorePart:
    """One concern's data access for one KB, on the engine the store shares among its parts."""

    def __init__(self, engine: Engine, kb: str = DEFAULT_KB):
        self.engine = engine
        self.kb = kb

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read transaction seeing one consistent state of the database."""
        with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def locked_write(self) -> Iterator[Connection]:
        """A KB write transaction, serialised against other KB writers (see module docstring).

        Commits on normal exit unless the body already rolled back; rolls back on an exception.
        Raises KbNotFound when the KB does not exist (a write never creates one by the way).
        """
        with self.engine.connect() as conn:
            # A no-op write as the first statement: takes the lock before anything is read.
            locked = conn.execute(update(kbs_t).where(kbs_t.c.name == self.kb).values(revision=kbs_t.c.revision))
            if locked.rowcount == 0:
                conn.rollback()
                raise KbNotFound(self.kb)
            yield conn
            if conn.in_transaction():
                conn.commit()
