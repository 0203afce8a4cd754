"""The service's background workers: the micro-batching executor that runs match jobs off the event
loop, and the query-log writer. The served state that feeds them is in state.py.

- `MatchBatcher` runs encode+search in a bounded ThreadPoolExecutor (`settings.encode_workers`
  threads), never on the event loop, and micro-batches concurrent requests into one encoder call.
- `QueryLogWriter` writes the query log from a background thread in batches.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from app.api.metrics import ServiceMetrics
from app.pipeline import MatchQuery, MatchResult, Pipeline

log = logging.getLogger(__name__)

#: a micro-batch never grows past this many queries (one /match/batch request may alone be 64)
MAX_ENCODE_BATCH = 64
#: queued match jobs before new requests get 503 (keeps memory and latency bounded under overload)
MAX_PENDING_JOBS = 2048


class Overloaded(RuntimeError):
    """Too many queued match jobs: the client should retry later."""


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
        # repeats are answered from the query cache here, without queueing behind encoder work
        found = self.matcher.cached(queries, retriever)
        todo = [i for i, r in enumerate(found) if r is None]
        if not todo:
            return found  # type: ignore[return-value]
        if self._queue.qsize() >= MAX_PENDING_JOBS:
            raise Overloaded(f"more than {MAX_PENDING_JOBS} match requests queued; retry later")
        job = _Job([queries[i] for i in todo], retriever, asyncio.get_running_loop().create_future())
        await self._queue.put(job)
        for i, result in zip(todo, await job.future):
            found[i] = result
        return found  # type: ignore[return-value]

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
                self.matcher.remember(job.queries, job.retriever, results)
                outcomes.append(results)
            except Exception as exc:
                outcomes.append(exc)
            offset += n
        return outcomes
