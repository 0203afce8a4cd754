"""Hot index swap under load against a live uvicorn server on a free loopback port.

32 client threads fire /match while a second build is made and `POST /admin/index/reload` swaps it
in: no request may fail, the served version must change, and once the reload has answered every new
request must see the new version. Also: a server started before any build becomes ready by itself
when the first build appears (the poller), and concurrent single queries are micro-batched.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import httpx

from app.api.main import create_app
from app.match import MatchQuery
from tests.helpers.api import build, make_settings, make_store
from tests.helpers.server import LiveServer
from tests.helpers.waiting import until

TOKEN = "swap-admin-token-of-32-characters"
CLIENTS = 32


def test_reload_under_concurrent_load(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path, admin_token=TOKEN, kb_poll_seconds=0)  # only the explicit reload swaps
    store = make_store(settings)
    v1 = build(store, encoder, settings)["version"]
    app = create_app(settings, store=store, encoder=encoder)

    stop = threading.Event()
    reloaded_at: list[float] = []
    lock = threading.Lock()
    outcomes: list[tuple[float, int, str | None]] = []  # (start time, status, index_version)
    failures: list[str] = []
    queries = ["how do I reset my password", "when will my parcel arrive", "refund please", "opening hours"]

    def client_loop(n: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            i = 0
            while not stop.is_set():
                started = time.monotonic()
                try:
                    r = client.post("/match", json={"query": queries[(n + i) % len(queries)], "top_k": 3})
                    version = r.json().get("index_version") if r.status_code == 200 else None
                    with lock:
                        outcomes.append((started, r.status_code, version))
                        if r.status_code != 200:
                            failures.append(f"{r.status_code}: {r.text[:200]}")
                except Exception as exc:  # connection errors count as failures too
                    with lock:
                        failures.append(repr(exc))
                i += 1

    with LiveServer(app) as server:
        threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        # the swap comes once the load is on: some requests must have been answered by the old index
        def loaded() -> bool:
            with lock:
                return len(outcomes) >= CLIENTS or bool(failures)
        until(loaded, 60, "answers to every client")
        store.create_faq("pets", "Pets are welcome in our stores.", ["Can I bring my dog into the shop?"])
        # build with the service's encoder: its lock keeps the tokenizer from being used by two threads at once
        v2 = build(store, app.state.service.encoder, settings)["version"]  # activates `current`; not served yet
        assert v2 != v1
        with httpx.Client(base_url=server.url, timeout=60) as admin:
            r = admin.post("/admin/index/reload", headers={"Authorization": f"Bearer {TOKEN}"})
            reloaded_at.append(time.monotonic())
            assert r.status_code == 200, r.text
            assert r.json() == {"previous_version": v1, "version": v2, "swapped": True}
            # wait (bounded) for requests that started after the swap: a loaded machine may need a while
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with lock:
                    if sum(1 for started, _, _ in outcomes if started > reloaded_at[0]) >= CLIENTS:
                        break
                time.sleep(0.2)
            stop.set()
            for t in threads:
                t.join(60)
            assert admin.get("/readyz").json()["index_version"] == v2
            after = admin.post("/match", json={"query": "may I bring my dog?", "top_k": 1}).json()
            assert after["index_version"] == v2 and after["matches"][0]["faq_id"] == "pets"
            metrics = admin.get("/metrics").text

    assert not failures, failures[:5]
    versions = Counter(v for _, _, v in outcomes)
    assert versions[v1] > 0 and versions[v2] > 0, versions
    assert len(outcomes) >= CLIENTS * 2
    late = [v for started, _, v in outcomes if started > reloaded_at[0]]
    assert late and all(v == v2 for v in late), "requests started after the swap must use the new index"
    # 32 concurrent clients on one encode worker: single queries were merged into shared encoder calls
    count = _metric(metrics, "faq_encode_batch_size_count")
    assert _metric(metrics, "faq_encode_batch_size_sum") > count > 0
    assert 'faq_index_swaps_total{reason="admin reload"} 1.0' in metrics


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in exposition")


def test_first_build_is_picked_up_without_restart(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path, kb_poll_seconds=0.1)
    store = make_store(settings)
    app = create_app(settings, store=store, encoder=encoder)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        r = client.post("/match", json={"query": "refund"})
        assert r.status_code == 503 and r.json()["error"] == "no index built: run `faq index build`"
        assert client.get("/readyz").status_code == 503
        version = build(store, app.state.service.encoder, settings)["version"]
        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the poller did not load the first build"
            time.sleep(0.1)
        body = client.post("/match", json={"query": "I want my money back"}).json()
        assert body["index_version"] == version and body["matches"][0]["faq_id"] == "refund"


def test_in_flight_jobs_keep_their_pinned_retriever(tmp_path, encoder):  # noqa: F811
    """A job pinned to the old retriever is answered by it even if the swap happens before it runs."""
    import asyncio

    from fastapi.testclient import TestClient

    settings = make_settings(tmp_path, admin_token=TOKEN)
    store = make_store(settings)
    v1 = build(store, encoder, settings)["version"]
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        state = client.app.state.service
        pinned = state.require_retriever()
        v2 = build(store, encoder, settings)["version"]
        assert state.load_current_build()[1] == v2 and state.retriever.version == v2

        async def run_both():
            return await asyncio.gather(
                state.batcher.submit([MatchQuery("refund", 3, 0.5)], pinned),
                state.batcher.submit([MatchQuery("refund", 3, 0.5)], state.retriever),
            )

        old, new = client.portal.call(run_both)
        assert old[0].index_version == v1 and new[0].index_version == v2
