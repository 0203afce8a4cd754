"""Query-log retention: FaqStore.prune_query_log on SQLite and PostgreSQL, and the service's hourly pass
(app/api/housekeeping.py)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from app.store import FaqStore

NOW = datetime.now(timezone.utc)


def log_rows(store: FaqStore, ages_days: list[float], prefix: str = "r") -> list[str]:
    ids = [f"{prefix}{i}" for i in range(len(ages_days))]
    store.log_queries([{"request_id": rid, "query": f"q {rid}", "created_at": NOW - timedelta(days=age)}
                       for rid, age in zip(ids, ages_days)])
    return ids


def request_ids(store: FaqStore) -> set[str]:
    from sqlalchemy import text

    with store.engine.connect() as conn:
        return {r[0] for r in conn.execute(text("SELECT request_id FROM query_log"))}


def test_prune_deletes_exactly_the_old_rows_in_chunks(any_store):
    ages = [400, 120, 91, 90.01, 89.99, 30, 1, 0]
    ids = log_rows(any_store, ages)
    cutoff = NOW - timedelta(days=90)
    expected_old = {rid for rid, age in zip(ids, ages) if age > 90}
    assert any_store.count_query_log_before(cutoff) == len(expected_old) == 4
    seen = []
    result = any_store.prune_query_log(cutoff, chunk_size=3, progress=seen.append)
    assert result.deleted == 4 and result.done and result.chunks == 2 and seen == [3, 4]
    assert request_ids(any_store) == set(ids) - expected_old
    assert any_store.prune_query_log(cutoff).deleted == 0  # nothing left


def test_prune_stops_at_its_time_budget_and_goes_on_later(any_store):
    log_rows(any_store, [100] * 7 + [1])
    cutoff = NOW - timedelta(days=90)
    first = any_store.prune_query_log(cutoff, chunk_size=2, max_seconds=0)
    assert (first.deleted, first.chunks, first.done) == (2, 1, False)
    rest = any_store.prune_query_log(cutoff, chunk_size=2)
    assert rest.deleted == 5 and rest.done
    assert len(request_ids(any_store)) == 1
    with pytest.raises(ValueError, match="chunk_size"):
        any_store.prune_query_log(cutoff, chunk_size=0)


def test_prune_takes_aware_cutoffs_in_any_zone(store):
    log_rows(store, [2, 0.5])
    cutoff = (NOW - timedelta(days=1)).astimezone(timezone(timedelta(hours=-7)))  # the same instant
    assert store.prune_query_log(cutoff).deleted == 1


def test_service_prunes_at_most_once_an_hour(store):
    from app.api.housekeeping import Housekeeping
    from app.api.resources import ProcessResources
    from app.api.state import KbState

    def housekeeping(days: int, store=store) -> Housekeeping:
        settings = SimpleNamespace(query_log_retention_days=days, kb="default")
        return Housekeeping(KbState(ProcessResources(settings, store=store), store=store))

    log_rows(store, [100, 10, 1])
    hourly = housekeeping(30)
    assert hourly.prune_query_log(now=1000.0) == 1
    log_rows(store, [200], prefix="later")
    assert hourly.prune_query_log(now=1000.0 + 60) is None  # not due yet
    assert hourly.prune_query_log(now=1000.0 + hourly.PRUNE_EVERY_S) == 1
    assert len(request_ids(store)) == 2

    keep = housekeeping(0)
    log_rows(store, [500], prefix="kept")
    assert keep.prune_query_log(now=0.0) is None and "kept0" in request_ids(store)

    class BrokenStore:
        def prune_query_log(self, *args, **kwargs):
            raise RuntimeError("database down")

    broken = housekeeping(30, store=BrokenStore())
    assert broken.prune_query_log(now=0.0) is None  # logged, never raised into the poller
