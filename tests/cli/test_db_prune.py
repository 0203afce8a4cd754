"""`faq db prune [--days N] [--dry-run]`: query-log retention from the command line."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cli.main import main


@pytest.fixture
def logged(faq_env):
    from migrations.runner import migrated_store

    store = migrated_store(faq_env)
    now = datetime.now(timezone.utc)
    store.log_queries([{"request_id": f"r{age}", "query": "q", "created_at": now - timedelta(days=age)}
                       for age in (365, 100, 45, 10, 0)])
    yield store
    store.close()


def remaining(store) -> list[str]:
    from sqlalchemy import text

    with store.engine.connect() as conn:
        return sorted(r[0] for r in conn.execute(text("SELECT request_id FROM query_log")))


def test_dry_run_changes_nothing(logged, capsys):
    assert main(["db", "prune", "--dry-run"]) == 0  # default retention: 90 days
    assert "dry run: 2 query-log rows older than 90 days" in capsys.readouterr().out
    assert main(["db", "prune", "--days", "30", "--dry-run"]) == 0
    assert "dry run: 3 query-log rows older than 30 days" in capsys.readouterr().out
    assert remaining(logged) == ["r0", "r10", "r100", "r365", "r45"]


def test_prune_deletes_the_old_rows(logged, capsys):
    assert main(["db", "prune", "--days", "30"]) == 0
    assert "deleted 3 query-log rows older than 30 days" in capsys.readouterr().out
    assert remaining(logged) == ["r0", "r10"]
    assert main(["db", "prune", "--days", "30"]) == 0
    assert "no query-log rows older than 30 days" in capsys.readouterr().out


def test_retention_zero_keeps_everything(logged, capsys, monkeypatch):
    from app.settings import get_settings

    monkeypatch.setenv("FAQ_QUERY_LOG_RETENTION_DAYS", "0")
    get_settings.cache_clear()
    if getattr(get_settings(), "query_log_retention_days", None) != 0:
        pytest.skip("settings have no query_log_retention_days field yet")
    assert main(["db", "prune"]) == 0
    assert "kept forever" in capsys.readouterr().out
    assert len(remaining(logged)) == 5


def test_days_must_be_positive(logged, capsys):
    with pytest.raises(SystemExit):
        main(["db", "prune", "--days", "0"])
    assert "--days must be >= 1" in capsys.readouterr().err
