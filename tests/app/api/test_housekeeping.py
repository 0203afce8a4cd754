"""The jobs beside the requests (app/api/housekeeping.py) through a running app: the KB poller's thread
prunes the query log when its pass is due, and a traffic refresh gives the decider the served build's
logged scores; a real MiniLM build and a temporary SQLite store."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from fastapi.testclient import TestClient
from sqlalchemy import text

from app.api.housekeeping import Housekeeping
from app.api.main import create_app
from tests.helpers.api import build, make_settings, make_store


def _request_ids(store) -> set[str]:
    with store.engine.connect() as conn:
        return {r[0] for r in conn.execute(text("SELECT request_id FROM query_log"))}


def test_the_running_app_prunes_the_log_and_refreshes_the_traffic_table(tmp_path, encoder):  # noqa: F811
    from index.decision import MIN_TRAFFIC

    settings = make_settings(tmp_path, kb_poll_seconds=0.05, query_log_retention_days=30)
    store = make_store(settings)
    manifest = build(store, encoder, settings)
    now = datetime.now(timezone.utc)
    store.log_queries([{"request_id": f"old-{i}", "query": "q", "created_at": now - timedelta(days=31 + i)}
                       for i in range(3)] + [{"request_id": "recent", "query": "q", "created_at": now}])
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        housekeeping = client.app.state.housekeeping
        assert isinstance(housekeeping, Housekeeping) and housekeeping.state is client.app.state.service
        deadline = time.monotonic() + 30
        while _request_ids(store) != {"recent"} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _request_ids(store) == {"recent"}  # pruned by the poller's first pass, the recent row kept
        assert client.get("/readyz").json()["decision"]["traffic_queries"] is None  # too few logged yet

        store.log_queries([{"request_id": f"t{i}", "query": f"q{i}", "score": 0.9, "arm": "ann",
                            "index_version": manifest["version"]} for i in range(MIN_TRAFFIC)])
        assert housekeeping.refresh_traffic() is None  # the start-up refresh made the next one wait
        assert housekeeping.refresh_traffic(now=time.monotonic() + Housekeeping.TRAFFIC_EVERY_S) == MIN_TRAFFIC
        assert client.get("/readyz").json()["decision"]["traffic_queries"] == MIN_TRAFFIC
    assert not housekeeping._poller.is_alive()  # stopped with the app
