"""The running service's state: store, encoder, the served Retriever, and the background workers.

- `ServiceState.retriever` is THE served retriever. It is never mutated: a reload, a new build or a
  KB change builds a new Retriever off the request path and then replaces this one attribute (an
  atomic reference assignment). A request reads it once when it starts and keeps that object, so
  in-flight requests finish on the index they started with.
- All replacements go through `_swap_lock`, so a slow KB refresh can never overwrite a newer build
  (each replacement reads "what is served now" and the store under the lock).
- `MatchBatcher` runs encode+search in a bounded ThreadPoolExecutor (`settings.encode_workers`
  threads), never on the event loop, and micro-batches concurrent requests into one encoder call.
- `QueryLogWriter` writes the query log from a background thread in batches.
- `KbPoller` refreshes the retriever when `store.revision()` changes (e.g. `faq kb import` in another
  process) and loads a new `current` build when its manifest version changes.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app.api.metrics import ServiceMetrics
from app.pipeline import (
    MatchQuery, MatchResult, NoIndexError, Pipeline, build_pipeline, encoder_spec, lexical_engine, load_rerank_stages,
)
from app.settings import Settings
from models.encoder import shared

log = logging.getLogger(__name__)

NO_INDEX_REASON = "no index built: run `faq index build`"
#: a micro-batch never grows past this many queries (one /match/batch request may alone be 64)
MAX_ENCODE_BATCH = 64
#: queued match jobs before new requests get 503 (keeps memory and latency bounded under overload)
MAX_PENDING_JOBS = 2048


class Overloaded(RuntimeError):
    """Too many queued match jobs: the client should retry later."""


class QueryLogDisabled(RuntimeError):
    """Feedback needs the query log, which `FAQ_QUERY_LOG=false` turned off."""


# -- query log -------------------------------------------------------------------------------------
class QueryLogWriter:
    """Buffers query-log rows and writes them with `store.log_queries` from one background thread.

    `submit` never blocks the request path; rows are written every `flush_seconds` or `max_batch`
    rows. `flush()` waits until everything submitted so far is written (used before recording
    feedback for a request that may still be buffered, and at shutdown).
    """

    def __init__(self, store: Any, metrics: ServiceMetrics | None = None, flush_seconds: float = 0.5, max_batch: int = 500,
                 max_buffer: int = 100_000):
        self.store = store
        self.metrics = metrics
        self.flush_seconds = flush_seconds
        self.max_batch = max_batch
        self.max_buffer = max_buffer
        self._rows: list[dict] = []
        self._cond = threading.Condition()
        self._submitted = 0
        self._done = 0  # written or dropped
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="faq-query-log", daemon=True)
        self._thread.start()

    def submit(self, rows: list[dict]) -> None:
        with self._cond:
            if len(self._rows) + len(rows) > self.max_buffer:  # the database is stuck: drop, don't grow forever
                if self.metrics:
                    self.metrics.query_log_dropped.inc(len(rows))
                return
            self._rows.extend(rows)
            self._submitted += len(rows)
            if len(self._rows) >= self.max_batch:
                self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until every row submitted before this call is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._submitted
            self._cond.notify_all()
            while self._done < target:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return self._done >= target
                self._cond.wait(left)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._rows and not self._stopping:
                    self._cond.wait(self.flush_seconds)
                if not self._rows:
                    if self._stopping:
                        return
                    continue
                batch, self._rows = self._rows[: self.max_batch], self._rows[self.max_batch:]
            try:
                self.store.log_queries(batch)
            except Exception:  # a logging failure must never take the service down
                log.exception("query log: could not write %d rows", len(batch))
                if self.metrics:
                    self.metrics.query_log_dropped.inc(len(batch))
            with self._cond:
                self._done += len(batch)
                self._cond.notify_all()


# -- micro-batching executor -------------------------------------------------------------------------
@dataclass
class _Job:
    queries: list[MatchQuery]
    retriever: Any
    future: asyncio.Future
    submitted: float = field(default_factory=time.perf_counter)


class MatchBatcher:
    """Runs match jobs on a bounded thread pool, merging jobs that queue up into one encoder call.

    One dispatcher task per worker thread takes the next job plus whatever else is already waiting
    (up to MAX_ENCODE_BATCH queries) and runs them as one `encode` call in the pool. Under no load a
    job runs alone at once; under load concurrent single queries share an encoder call, which is far
    cheaper than one call each. Jobs pinned to different retrievers (a swap happened between them)
    share the encoding but are searched on their own retriever.
    """

    def __init__(self, matcher: Pipeline, workers: int, metrics: ServiceMetrics | None = None):
        self.matcher = matcher
        self.workers = max(1, int(workers))
        self.metrics = metrics
        self.executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="faq-encode")
        self._queue: asyncio.Queue[_Job] | None = None
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._dispatch(), name=f"faq-dispatch-{i}") for i in range(self.workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks = []
        if self._queue is not None:
            while not self._queue.empty():
                job = self._queue.get_nowait()
                if not job.future.done():
                    job.future.set_exception(RuntimeError("service shutting down"))
        self.executor.shutdown(wait=True, cancel_futures=True)

    async def submit(self, queries: list[MatchQuery], retriever: Any) -> list[MatchResult]:
        """Match `queries` (one job, never split: a batch request is encoded in one call) on `retriever`."""
        if self._queue is None:
            raise RuntimeError("MatchBatcher not started")
        if self._queue.qsize() >= MAX_PENDING_JOBS:
            raise Overloaded(f"more than {MAX_PENDING_JOBS} match requests queued; retry later")
        job = _Job(queries, retriever, asyncio.get_running_loop().create_future())
        await self._queue.put(job)
        return await job.future

    async def _dispatch(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self._queue.get()]
            size = len(jobs[0].queries)
            while size < MAX_ENCODE_BATCH and not self._queue.empty():
                job = self._queue.get_nowait()
                jobs.append(job)
                size += len(job.queries)
            jobs = [j for j in jobs if not j.future.done()]  # client gone (cancelled): skip its work
            if not jobs:
                continue
            try:
                outcomes = await loop.run_in_executor(self.executor, self._run_jobs, jobs)
            except BaseException as exc:  # executor shut down or cancelled: fail the jobs, keep serving
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for job, outcome in zip(jobs, outcomes):
                if job.future.done():
                    continue
                if isinstance(outcome, BaseException):
                    job.future.set_exception(outcome)
                else:
                    job.future.set_result(outcome)

    def _run_jobs(self, jobs: list[_Job]) -> list[list[MatchResult] | BaseException]:
        """In a worker thread: one encoder call for all jobs, then one search per retriever."""
        queries = [q for job in jobs for q in job.queries]
        try:
            t0 = time.perf_counter()
            vecs = self.matcher.encode([q.query for q in queries])
            encode_ms = (time.perf_counter() - t0) * 1000.0
        except Exception as exc:
            return [exc] * len(jobs)
        if self.metrics:
            self.metrics.encode_batch.observe(len(queries))
        outcomes: list[list[MatchResult] | BaseException] = []
        offset = 0
        for job in jobs:
            n = len(job.queries)
            try:
                results = self.matcher.rank(
                    job.queries, vecs[offset: offset + n], job.retriever, encode_ms=encode_ms, started=job.submitted
                )
                outcomes.append(results)
            except Exception as exc:
                outcomes.append(exc)
            offset += n
        return outcomes


# -- the service state ---------------------------------------------------------------------------
class ServiceState:
    """Everything a request needs, created once per app by the lifespan."""

    def __init__(self, settings: Settings, *, store: Any = None, encoder: Any = None,
                 metrics: ServiceMetrics | None = None):
        self.settings = settings
        self.store = store
        self._owns_store = store is None  # created in open(): closed in close()
        self.encoder = shared(encoder)
        self.metrics = metrics or ServiceMetrics()
        self.registry: Any = None
        # the served retriever: replaced (one reference assignment), never mutated
        self.retriever: Any = None
        self.kb_revision: int | None = None  # KB revision the served retriever reflects
        self.loaded_at: datetime | None = None
        self.not_ready_reason: str | None = "starting up"
        self.matcher: Pipeline | None = None
        self.batcher: MatchBatcher | None = None
        self.query_log: QueryLogWriter | None = None
        self._swap_lock = threading.RLock()
        self._delta_cache: dict = {}  # encoded delta variants reused across KB refreshes (see Retriever.with_kb)
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()
        self._failed_version: str | None = None  # a build that could not be loaded: not retried every poll
        # lexical arms: the LexicalIndex of each served build version, opened on first use
        self._lexical: dict[str, Any] = {}
        self._lexical_lock = threading.Lock()
        self._lexical_health: tuple[float, str | None] | None = None  # (checked_at, problem), cached briefly
        # the cross-encoder of the `+rerank` arms (FAQ_RERANKER); None = none installed -> those arms answer 409
        self.reranker: Any = None
        self.reranker_problem: str | None = None  # why FAQ_RERANKER did not load

    # -- lifecycle ---------------------------------------------------------------------------
    def _current_manifest(self) -> dict | None:
        """The current build's manifest, or None when there is none or it cannot be read (then
        /readyz reports the broken build; the encoder falls back to the configured default)."""
        try:
            current = self.registry.current()
            return self.registry.read_manifest(current) if current else None
        except Exception:  # noqa: BLE001 - a broken build must not stop start-up
            log.exception("could not read the current build's manifest")
            return None

    def open(self) -> None:
        """Blocking start-up work (run in a thread by the lifespan): threads, store, encoder, index."""
        import torch

        from index.artifacts import BuildRegistry

        torch.set_num_threads(max(1, int(self.settings.torch_threads)))
        if self.store is None:
            from app.store import FaqStore

            self.store = FaqStore.from_settings(self.settings)
        self.registry = BuildRegistry(Path(self.settings.index_dir))
        if self.encoder is None:
            from models.load import load_encoder

            self.encoder = shared(load_encoder(encoder_spec(self.settings, self._current_manifest())))
        stages = []
        try:
            stages = load_rerank_stages(self.settings)
        except Exception as exc:  # a bad FAQ_RERANKER must not stop /match: rerank requests get a 409 saying why
            log.exception("could not load the re-ranker %s", self.settings.reranker)
            self.reranker_problem = f"FAQ_RERANKER={self.settings.reranker} could not be loaded: {exc}"
        self.reranker = stages[0].reranker if stages else None
        self.matcher = build_pipeline(self.settings, self.encoder, lambda: self.retriever, lexical=self.lexical_for,
                                      stages=stages)
        try:
            self.load_current_build(reason="startup")
        except Exception as exc:  # a broken build must not stop the process: /readyz says why
            log.exception("could not load the current index build")
            self.not_ready_reason = f"could not load the current index build: {exc}"
        if self.settings.query_log:
            self.query_log = QueryLogWriter(self.store, self.metrics)
            self.query_log.start()
        if self.settings.kb_poll_seconds and self.settings.kb_poll_seconds > 0:
            self._poller = threading.Thread(target=self._poll_loop, name="faq-kb-poller", daemon=True)
            self._poller.start()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.open)
        assert self.matcher is not None
        self.batcher = MatchBatcher(self.matcher, self.settings.encode_workers, self.metrics)
        await self.batcher.start()

    async def close(self) -> None:
        self._stop.set()
        if self.batcher is not None:
            await self.batcher.stop()
        loop = asyncio.get_running_loop()
        if self.query_log is not None:
            await loop.run_in_executor(None, self.query_log.stop)
        if self._poller is not None:
            await loop.run_in_executor(None, self._poller.join, 10.0)
        for index in list(self._lexical.values()):
            index.close()
        self._lexical.clear()
        if self._owns_store and self.store is not None:
            self.store.close()

    # -- readiness ---------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.retriever is not None

    def require_retriever(self) -> Any:
        retriever = self.retriever  # read once: the request keeps this object
        if retriever is None:
            raise NoIndexError(self.not_ready_reason or NO_INDEX_REASON)
        return retriever

    # -- swapping ----------------------------------------------------------------------------
    def load_current_build(self, reason: str = "reload") -> tuple[str | None, str | None]:
        """Load the registry's `current` build (if it is not the one served) with the KB delta applied,
        then swap. Returns (previous_version, served_version)."""
        from index.retriever import Retriever

        with self._swap_lock:
            previous = self.retriever
            prev_version = getattr(previous, "version", None)
            version = self.registry.current() if self.registry is not None else None
            if version is None:
                if previous is None:
                    self.not_ready_reason = NO_INDEX_REASON
                return prev_version, prev_version
            if previous is not None and version == prev_version:
                return prev_version, prev_version  # already served: nothing to load
            fresh = Retriever.load(self.registry.path(version))
            encoder_id = (fresh.manifest or {}).get("encoder_id")
            if encoder_id and encoder_id != self.encoder.id:
                msg = (f"index {fresh.version} was built with encoder {encoder_id!r} but the service runs "
                       f"{self.encoder.id!r}: rebuild it (`faq index build`) or set FAQ_ENCODER")
                if previous is None:
                    self.not_ready_reason = msg
                raise RuntimeError(msg)
            snapshot = self.store.snapshot()
            served = fresh.with_kb(snapshot, self.encoder, cache=self._delta_cache)
            self._failed_version = None
            self._install(served, snapshot.revision, reason)
            log.info("serving index %s (was %s, %s)", served.version, prev_version, reason)
            return prev_version, served.version

    def refresh_kb(self, reason: str = "kb") -> bool:
        """Apply the store's current KB to the served build (delta + tombstones); True if swapped."""
        with self._swap_lock:
            current = self.retriever
            if current is None:
                return False
            snapshot = self.store.snapshot()
            if snapshot.revision == self.kb_revision:
                return False
            served = current.with_kb(snapshot, self.encoder, cache=self._delta_cache)
            self._install(served, snapshot.revision, reason)
            return True

    def _install(self, retriever: Any, kb_revision: int, reason: str) -> None:
        self.retriever = retriever  # the atomic swap
        self.kb_revision = kb_revision
        self.loaded_at = datetime.now(timezone.utc)
        self.not_ready_reason = None
        self.metrics.observe_retriever(retriever, kb_revision)
        self.metrics.swaps.labels(reason=reason).inc()

    def poll_once(self) -> None:
        """One poller step: a new `current` build wins; otherwise follow KB revision changes."""
        version = self.registry.current()  # reads one symlink: cheap enough every few seconds
        if version is not None and version != getattr(self.retriever, "version", None) and version != self._failed_version:
            try:
                self.load_current_build(reason="new build")
            except Exception:
                self._failed_version = version  # logged once; a reload or the next build tries again
                raise
            return
        if self.retriever is not None and self.store.revision() != self.kb_revision:
            self.refresh_kb(reason="kb poll")

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.settings.kb_poll_seconds):
            try:
                self.poll_once()
            except Exception:
                log.exception("KB/index poll failed (will retry)")

    # -- lexical arms ------------------------------------------------------------------------------
    def lexical_for(self, retriever: Any) -> Any:
        """The LexicalIndex of `retriever`'s build version on the configured engine (opened once per
        version; indexes of versions no longer served are closed). Raises LexicalUnavailable."""
        from index.lexical import LexicalUnavailable, open_lexical

        version = str(retriever.version)
        index = self._lexical.get(version)
        if index is not None:
            return index
        with self._lexical_lock:
            index = self._lexical.get(version)
            if index is None:
                try:
                    engine = lexical_engine(self.settings)
                except ValueError as exc:
                    raise LexicalUnavailable(str(exc)) from exc
                index = open_lexical(retriever.build_dir, retriever.manifest, engine, es_url=self.settings.es_url,
                                     es_prefix=self.settings.es_index_prefix, es_timeout_s=self.settings.es_timeout_s)
                # keep the served version's and the one opened before it (requests pinned to the previous
                # retriever may still be searching it); close older ones
                served = {str(getattr(self.retriever, "version", "")), version, *list(self._lexical)[-1:]}
                for old in [v for v in self._lexical if v not in served]:
                    self._lexical.pop(old).close()
                self._lexical[version] = index
            return index

    def lexical_problem(self, max_age_s: float = 5.0) -> str | None:
        """Why the lexical arms cannot answer now (None: they can). Checked at most every `max_age_s`
        so /readyz probes do not hammer Elasticsearch."""
        from index.lexical import LexicalUnavailable

        retriever = self.retriever
        if retriever is None:
            return None  # not ready at all: /readyz says so already
        cached = self._lexical_health
        now = time.monotonic()
        if cached is not None and now - cached[0] < max_age_s:
            return cached[1]
        try:
            problem = self.lexical_for(retriever).health()
        except LexicalUnavailable as exc:
            problem = str(exc)
        self._lexical_health = (now, problem)
        return problem

    # -- query log and feedback ------------------------------------------------------------------
    def log_matches(self, rows: list[dict]) -> None:
        if self.query_log is not None:
            self.query_log.submit(rows)

    def record_feedback(self, request_id: str, correct: bool | None, faq_id: str | None) -> bool:
        if self.query_log is None:
            raise QueryLogDisabled("the query log is disabled (FAQ_QUERY_LOG=false), so feedback cannot be recorded")
        self.query_log.flush()  # the request's row may still be buffered
        return bool(self.store.record_feedback(request_id, correct, faq_id))

    # -- introspection -------------------------------------------------------------------------
    def index_info(self) -> dict:
        retriever = self.retriever
        return {
            "version": getattr(retriever, "version", None),
            "manifest": getattr(retriever, "manifest", None),
            "delta_size": getattr(retriever, "n_delta", None) if retriever is not None else None,
            "tombstones": getattr(retriever, "n_tombstones", None) if retriever is not None else None,
            "kb_revision": self.kb_revision,
            "loaded_at": self.loaded_at,
            "reason": None if retriever is not None else (self.not_ready_reason or NO_INDEX_REASON),
        }
