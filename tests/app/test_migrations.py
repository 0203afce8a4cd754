"""Alembic migrations up and down on SQLite and PostgreSQL, models == migrations, `faq db` commands."""
from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from cli.main import main
from app.db import Base, make_engine
from migrations import runner

TABLES = {"faqs", "question_variants", "index_builds", "query_log", "kb_meta"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_url(request) -> str:
    return request.getfixturevalue("db_url" if request.param == "sqlite" else "pg_url")


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_and_downgrade(any_url):
    assert runner.current(any_url) is None
    runner.upgrade(any_url)
    assert runner.current(any_url) == runner.head() == "0001"
    assert table_names(any_url) == TABLES
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT value FROM kb_meta WHERE key = 'revision'")).scalar() == 0
    finally:
        engine.dispose()
    runner.upgrade(any_url)  # idempotent
    runner.downgrade(any_url, "base")
    assert runner.current(any_url) is None
    assert table_names(any_url) == set()
    runner.upgrade(any_url)  # and back up again
    assert table_names(any_url) == TABLES


def test_models_match_migrations(any_url):
    runner.upgrade(any_url)
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_cascade_and_unique_constraints_exist(any_url):
    from kb.records import KbRecord
    from app.store import FaqStore

    runner.upgrade(any_url)
    with FaqStore(any_url) as store:
        store.import_records([KbRecord("a", "q1", "answer"), KbRecord("a", "q2")])
        with pytest.raises(Exception, match="(?i)unique"):
            with store.engine.begin() as conn:
                conn.execute(text("INSERT INTO question_variants (faq_id, question, created_at, updated_at) "
                                  "VALUES ('a', 'q1', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"))
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM faqs WHERE faq_id = 'a'"))
            assert conn.execute(text("SELECT count(*) FROM question_variants")).scalar() == 0


def test_db_cli(faq_env, capsys):
    assert main(["db", "current"]) == 0
    assert "empty, no migration applied (head is 0001)" in capsys.readouterr().out
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out.strip().endswith(": at 0001 (head)")
    assert main(["db", "downgrade", "base"]) == 0
    assert "empty" in capsys.readouterr().out
    assert table_names(faq_env.db_url) == set()
    assert main(["db", "upgrade", "0001"]) == 0
    assert main(["db", "current"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("at 0001 (head)")


def test_the_code_expects_the_latest_revision():
    """A new migration must move SCHEMA_REVISION with it, or every store would refuse the fresh schema."""
    from app.db.models import SCHEMA_REVISION
    from migrations import runner

    assert SCHEMA_REVISION == runner.head()
