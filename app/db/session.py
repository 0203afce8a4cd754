"""Engine creation for the two supported backends.

SQLite (the embedded default) is configured so that the API server and a CLI process can share one
file: WAL journal (readers never block the writer), a busy timeout (a second writer waits instead of
failing at once), foreign keys ON (needed for ON DELETE CASCADE) and real transactions for SELECTs
too (sqlite3's legacy mode only BEGINs before DML, so two SELECTs of one "transaction" could see
different data). PostgreSQL goes through psycopg2 (`postgresql://...` means `postgresql+psycopg2://`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

SQLITE_BUSY_TIMEOUT_MS = 30_000


def is_sqlite(url_or_engine: str | Engine) -> bool:
    if isinstance(url_or_engine, Engine):
        return url_or_engine.dialect.name == "sqlite"
    return make_url(url_or_engine).get_backend_name() == "sqlite"


def _sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL, or None for in-memory databases."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine for `url` with the settings described in the module docstring."""
    if not is_sqlite(url):
        parsed = make_url(url)
        if parsed.drivername == "postgresql":
            # SQLAlchemy 2.1 defaults to psycopg 3; the project depends on psycopg2
            url = parsed.set(drivername="postgresql+psycopg2")
        kwargs.setdefault("pool_pre_ping", True)
        if make_url(url).get_driver_name() == "psycopg2":
            # batch the executemany UPDATE/DELETEs of KB imports instead of one round trip per row
            kwargs.setdefault("executemany_mode", "values_plus_batch")
        return create_engine(url, **kwargs)

    db_file = _sqlite_file(url)
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from sqlite3 (see module docstring); BEGIN is emitted below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            if db_file is not None:
                cursor.execute("PRAGMA journal_mode=WAL")
                # NORMAL is durable across application crashes in WAL mode and much faster than FULL.
                cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine
