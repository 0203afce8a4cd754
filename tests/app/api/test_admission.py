"""Admission control and scheduling of the match queue, with the real app, MiniLM and an Annoy build.

The encoder is made busy by holding its gate from the test (what a long encode does), so what waits,
what is refused and in which order work runs is deterministic. Disconnects and half-sent bodies are
driven through the raw ASGI interface, as uvicorn would deliver them.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from contextlib import contextmanager

import httpx
import pytest

from app.api.main import create_app
from app.api.workers import BATCH_SLICE
from tests.helpers.api import build, make_settings, make_store

QUERIES = ["how do I reset my password", "cancel my order", "when will my parcel arrive", "refund please",
           "change my email", "are you open on sunday", "can I pay by card", "delete my account"]


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("admission"))
    store = make_store(settings)
    build(store, encoder, settings)
    return settings, store


def app_for(built, encoder, **overrides):  # noqa: F811
    settings, store = built
    settings = settings.model_copy(update={"query_cache_size": 0, "query_log": False, **overrides})
    return create_app(settings, store=store, encoder=encoder)


@contextmanager
def encoder_busy(app):
    """Hold the shared encoder's gate (as a long encode would) until the block ends."""
    gate = app.state.service.encoder._gate
    held, release = threading.Event(), threading.Event()

    def hold():
        with gate.hold(0):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(5), "the gate was not taken"
        yield
    finally:
        release.set()
        thread.join(10)


def run(coro):
    return asyncio.run(coro)


async def started(app):
    """The app's lifespan, entered by hand (httpx's ASGI transport does not run it)."""
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    return ctx


async def until(predicate, timeout_s: float = 20.0) -> None:
    """Wait for the app to reach a state (a loaded CI machine may be slow to get there)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the queue"
        await asyncio.sleep(0.01)


def dispatcher_idle(batcher) -> bool:
    """The dispatcher has run what it had taken and waits for new work (it clears its wake-up only then)."""
    return not batcher._wakeup.is_set()


def batch(n: int, offset: int = 0) -> dict:
    return {"queries": [{"query": f"{QUERIES[(offset + i) % len(QUERIES)]} #{offset + i}"} for i in range(n)]}


def test_batches_get_429_when_their_share_is_full_while_singles_are_still_admitted(built, encoder):  # noqa: F811
    app = app_for(built, encoder, max_queued_queries=128)  # batches may queue 64 queries

    async def scenario():
        ctx = await started(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            with encoder_busy(app):
                batcher = app.state.service.batcher
                first = asyncio.create_task(client.post("/match/batch", json=batch(64)))
                await until(lambda: batcher.queued == 64 - BATCH_SLICE)  # its first slice waits for the encoder
                refused = await client.post("/match/batch", json=batch(16, offset=100))
                single = asyncio.create_task(client.post("/match", json={"query": "reset my password"}))
                await until(lambda: batcher.queued == 64 - BATCH_SLICE + 1)
                queued = batcher.queued
            answers = await asyncio.gather(first, single)
        await ctx.__aexit__(None, None, None)
        return refused, answers, queued

    refused, (first, single), queued = run(scenario())
    assert refused.status_code == 429, refused.text
    assert "FAQ_MAX_QUEUED_QUERIES" in refused.json()["error"]
    assert int(refused.headers["Retry-After"]) >= 1
    assert queued == 64 - BATCH_SLICE + 1, "the first slice is running; the rest of the batch and the single wait"
    assert first.status_code == 200 and len(first.json()["results"]) == 64
    assert single.status_code == 200 and single.json()["answer"]["faq_id"] == "reset_password"


def test_a_full_queue_refuses_singles_with_503(built, encoder):  # noqa: F811
    app = app_for(built, encoder, max_queued_queries=128)

    async def scenario():
        ctx = await started(app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            with encoder_busy(app):
                batcher = app.state.service.batcher
                first = asyncio.create_task(client.post("/match", json={"query": "cancel my order"}))
                gate = app.state.service.encoder._gate
                await until(lambda: len(gate._waiting) == 1)  # the dispatcher took it and waits for the encoder
                singles = [asyncio.create_task(client.post("/match", json={"query": f"refund {i}"})) for i in range(128)]
                await until(lambda: batcher.queued == 128)
                refused = await client.post("/match", json={"query": "one too many"})
            done = await asyncio.gather(first, *singles)
        await ctx.__aexit__(None, None, None)
        return refused, done

    refused, done = run(scenario())
    assert refused.status_code == 503 and "Retry-After" in refused.headers
    assert "128 queries are queued" in refused.json()["error"]
    assert all(r.status_code == 200 for r in done)


def test_single_queries_run_before_the_remaining_batch_slices(built, encoder):  # noqa: F811
    app = app_for(built, encoder)
    calls: list[list[str]] = []

    async def scenario():
        ctx = await started(app)
        matcher = app.state.service.pipeline
        encode = matcher.encode
        matcher.encode = lambda texts, *languages: (calls.append(list(texts)), encode(texts, *languages))[1]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            with encoder_busy(app):
                batcher = app.state.service.batcher
                big = asyncio.create_task(client.post("/match/batch", json=batch(64)))
                await until(lambda: batcher.queued == 64 - BATCH_SLICE)
                singles = [asyncio.create_task(client.post("/match", json={"query": q})) for q in QUERIES[:3]]
                await until(lambda: batcher.queued == 64 - BATCH_SLICE + 3)
            answers = await asyncio.gather(big, *singles)
        await ctx.__aexit__(None, None, None)
        return answers

    answers = run(scenario())
    assert all(r.status_code == 200 for r in answers)
    sizes = [len(c) for c in calls]
    assert sizes[0] == BATCH_SLICE, "the first slice had started before the singles came"
    assert sorted(calls[1]) == sorted(QUERIES[:3]), "the singles ran next, merged into one encoder call"
    assert sizes[2:] == [BATCH_SLICE] * (64 // BATCH_SLICE - 1)


def test_deadline_answers_503_and_drops_the_queued_work(built, encoder):  # noqa: F811
    app = app_for(built, encoder, request_timeout_ms=300)
    calls: list[int] = []

    async def scenario():
        ctx = await started(app)
        matcher = app.state.service.pipeline
        encode = matcher.encode
        matcher.encode = lambda texts, *languages: (calls.append(len(texts)), encode(texts, *languages))[1]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            with encoder_busy(app):
                t0 = time.perf_counter()
                late = await client.post("/match/batch", json=batch(64))
                waited = time.perf_counter() - t0
                queued = app.state.service.batcher.queued
            # the slice that was waiting for the encoder runs now; a request sent before it ends would wait
            # behind it and, on a slow machine, miss its own 300 ms deadline
            await until(lambda: dispatcher_idle(app.state.service.batcher))
            after = await client.post("/match", json={"query": "cancel my order"})
            metrics = (await client.get("/metrics")).text
        await ctx.__aexit__(None, None, None)
        return late, waited, queued, after, metrics

    late, waited, queued, after, metrics = run(scenario())
    assert late.status_code == 503 and "FAQ_REQUEST_TIMEOUT_MS" in late.json()["error"]
    assert late.headers["Retry-After"] == "1"
    assert 0.25 < waited < 2.0
    assert queued == 0, "the request's slices left the queue with it"
    assert calls == [BATCH_SLICE, 1], "only the slice already waiting for the encoder ran; the rest was dropped"
    assert after.status_code == 200
    assert "faq_match_deadline_exceeded_total 1.0" in metrics
    assert "faq_match_queued_queries 0.0" in metrics


class RawClient:
    """Drives the ASGI app as uvicorn does: `receive` hands out the body messages, then blocks until
    `disconnect()`; sent messages are collected."""

    def __init__(self, app, path: str, messages: list[dict]):
        self.app, self.path = app, path
        self.messages = list(messages)
        self.sent: list[dict] = []
        self.gone = asyncio.Event()
        self.drained = asyncio.Event()  # the app has read every message and waits for more

    async def receive(self) -> dict:
        if self.messages:
            return self.messages.pop(0)
        self.drained.set()
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    def disconnect(self) -> None:
        self.gone.set()

    async def call(self):
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": self.path, "raw_path": self.path.encode(), "query_string": b"",
                 "root_path": "", "headers": [(b"content-type", b"application/json"), (b"host", b"t")],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
        await self.app(scope, self.receive, self.send)

    @property
    def status(self) -> int | None:
        start = [m for m in self.sent if m["type"] == "http.response.start"]
        return start[0]["status"] if start else None


def test_a_client_that_disconnects_while_queued_costs_nothing(built, encoder):  # noqa: F811
    app = app_for(built, encoder)
    calls: list[int] = []

    async def scenario():
        ctx = await started(app)
        matcher = app.state.service.pipeline
        encode = matcher.encode
        matcher.encode = lambda texts, *languages: (calls.append(len(texts)), encode(texts, *languages))[1]
        body = json.dumps(batch(64)).encode()
        clients = [RawClient(app, "/match/batch", [{"type": "http.request", "body": body, "more_body": False}])
                   for _ in range(4)]
        with encoder_busy(app):
            tasks = [asyncio.create_task(c.call()) for c in clients]
            batcher = app.state.service.batcher
            await until(lambda: batcher.queued == 4 * 64 - BATCH_SLICE)
            queued_before = batcher.queued
            for c in clients:
                c.disconnect()
            await asyncio.gather(*tasks)
            queued_after = app.state.service.batcher.queued
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            after = await client.post("/match", json={"query": "cancel my order"})
            metrics = (await client.get("/metrics")).text
        await ctx.__aexit__(None, None, None)
        return clients, queued_before, queued_after, after, metrics

    clients, before, after_gone, after, metrics = run(scenario())
    assert before == 4 * 64 - BATCH_SLICE
    assert after_gone == 0
    assert all(c.status is None for c in clients), "nobody to answer"
    assert calls == [BATCH_SLICE, 1], "of 256 abandoned queries only the slice already running was encoded"
    assert after.status_code == 200
    assert "faq_http_client_gone_total 4.0" in metrics
    assert 'route="/match/batch",status="499"' in metrics and 'status="500"' not in metrics


def test_a_half_sent_body_gets_408_and_connection_close(built, encoder):  # noqa: F811
    app = app_for(built, encoder, body_timeout_s=0.3)

    async def scenario():
        ctx = await started(app)
        client = RawClient(app, "/match", [{"type": "http.request", "body": b'{"query": "res', "more_body": True}])
        t0 = time.perf_counter()
        await client.call()
        waited = time.perf_counter() - t0
        await ctx.__aexit__(None, None, None)
        return client, waited

    client, waited = run(scenario())
    assert client.status == 408
    start = next(m for m in client.sent if m["type"] == "http.response.start")
    assert (b"connection", b"close") in [(k.lower(), v) for k, v in start["headers"]]
    body = json.loads(b"".join(m.get("body", b"") for m in client.sent if m["type"] == "http.response.body"))
    assert "FAQ_BODY_TIMEOUT_S" in body["error"]
    assert 0.25 < waited < 2.0


def test_a_half_sent_body_whose_client_leaves_is_counted_as_499(built, encoder):  # noqa: F811
    app = app_for(built, encoder)

    async def scenario():
        ctx = await started(app)
        client = RawClient(app, "/match", [{"type": "http.request", "body": b'{"query"', "more_body": True}])
        task = asyncio.create_task(client.call())
        await asyncio.wait_for(client.drained.wait(), 20)  # leave while the app waits for the rest of the body
        client.disconnect()
        await task
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            metrics = (await http.get("/metrics")).text
        await ctx.__aexit__(None, None, None)
        return client, metrics

    client, metrics = run(scenario())
    assert client.status is None
    assert 'route="/match",status="499"' in metrics and 'status="500"' not in metrics


def test_a_bulk_kb_change_is_encoded_in_small_chunks_that_queries_overtake(tmp_path, encoder):  # noqa: F811
    from app.store import KbRecord
    from models.encoders.base import BACKGROUND_CHUNK

    settings = make_settings(tmp_path, query_cache_size=0, query_log=False)
    store = make_store(settings)
    build(store, encoder, settings)
    app = create_app(settings, store=store, encoder=encoder)
    calls: list[tuple[str, int]] = []

    async def scenario():
        ctx = await started(app)
        state = app.state.service
        inner = state.encoder.inner
        encode = inner.encode
        loop, encoding = asyncio.get_running_loop(), asyncio.Event()

        def counted(texts, **kw):
            calls.append((threading.current_thread().name, len(texts)))
            loop.call_soon_threadsafe(encoding.set)
            return encode(texts, **kw)

        inner.encode = counted  # the session's shared encoder: put back below, whatever happens
        try:
            store.import_records([KbRecord("bulk", f"bulk question number {i} about parcels", "An answer.", [])
                                  for i in range(120)])
            refresh = loop.run_in_executor(None, state.refresh_kb)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
                await asyncio.wait_for(encoding.wait(), 20)  # the queries are sent while the refresh encodes
                answers = [await client.post("/match", json={"query": q}) for q in QUERIES[:3]]
                assert await refresh
                bulk = await client.post("/match", json={"query": "bulk question number 7 about parcels"})
        finally:
            inner.encode = encode
        await ctx.__aexit__(None, None, None)
        return answers, bulk

    answers, bulk = run(scenario())
    assert all(r.status_code == 200 for r in answers)
    assert bulk.json()["matches"][0]["faq_id"] == "bulk", "the refresh was applied"
    background = [i for i, (thread, _) in enumerate(calls) if not thread.startswith("faq-encode")]
    queries = [i for i, (thread, _) in enumerate(calls) if thread.startswith("faq-encode")]
    assert sum(calls[i][1] for i in background) >= 120
    assert max(calls[i][1] for i in background) <= BACKGROUND_CHUNK
    assert queries[0] < background[-1], "the queries did not wait for the whole refresh"
