"""The service's background workers: the micro-batching executor that runs match jobs off the event
loop, and the query-log writer: one of each per process (resources.py), whatever KB a request is for.

- `MatchBatcher` runs encode+search in a bounded ThreadPoolExecutor (`settings.encode_workers`
  threads), never on the event loop, and micro-batches concurrent requests into one encoder call.
  It is also the service's admission control: queued work is counted in queries, every request has
  a deadline, work whose client has gone is dropped, and single queries run before batch slices.
- `QueryLogWriter` writes the query log from a background thread in batches.
"""
from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from app.api.metrics import ServiceMetrics
from app.match import MatchQuery, MatchResult, Pipeline, cache, run_pipelines

log = logging.getLogger(__name__)

#: single queries merged into one encoder call, at most
MAX_ENCODE_BATCH = 64
#: a batch request runs in slices of this many queries: a single query that arrives while batches
#: are being served waits for at most one slice, not for a whole 64-query batch
BATCH_SLICE = 8
#: lanes, served in this order: single queries first, then batch slices
INTERACTIVE, BULK = 0, 1


class Overloaded(RuntimeError):
    """The queue is full: 503 (every request is refused) or 429 (batch requests have used their
    share); `retry_after` is the estimated seconds until the queue has drained."""

    def __init__(self, message: str, status_code: int = 503, retry_after: int = 1):
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


class DeadlineExceeded(RuntimeError):
    """A request was not answered within FAQ_REQUEST_TIMEOUT_MS; its remaining work was dropped."""


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
                dropped = self.store.log_queries(batch)  # rows it could not store; the others are written
                if dropped and self.metrics:
                    self.metrics.query_log_dropped.inc(dropped)
            except Exception:  # a logging failure must never take the service down
                log.exception("query log: could not write %d rows", len(batch))
                if self.metrics:
                    self.metrics.query_log_dropped.inc(len(batch))
            with self._cond:
                self._done += len(batch)
                self._cond.notify_all()


# -- micro-batching executor -------------------------------------------------------------------------
@dataclass(eq=False)
class _Job:
    queries: list[MatchQuery]
    retriever: Any
    future: asyncio.Future
    pipeline: Pipeline
    lane: int = INTERACTIVE
    submitted: float = field(default_factory=time.perf_counter)
    queued: bool = True  # still counted in the queue bound


class MatchBatcher:
    """Runs match jobs on a bounded thread pool, merging jobs that queue up into one encoder call.

    Admission: at most `max_queued` queries wait (a batch request counts as its number of queries,
    not as one job); batch requests may fill only half of it (429 beyond that), so a burst of batches
    can never lock single queries out (503 only when everything is full). Every request has a
    deadline (`timeout_s`): when it passes, or when the client disconnects (the HTTP layer cancels
    the request), the request's queued work is dropped before it reaches the encoder.

    Scheduling: one dispatcher task per worker thread. Single queries (the interactive lane) run
    first, merged up to MAX_ENCODE_BATCH into one encoder call; a batch request is split into
    slices of BATCH_SLICE queries (the bulk lane) that run one at a time, so the worst a single query
    waits behind batch work is one slice. Jobs pinned to different retrievers (a swap happened between
    them) share the encoding but are searched on their own retriever.
    """

    def __init__(self, pipeline: Pipeline, workers: int, metrics: ServiceMetrics | None = None, *,
                 max_queued: int = 1024, timeout_s: float = 10.0):
        self.pipeline = pipeline  # the default KB's: `submit` without one
        self.workers = max(1, int(workers))
        self.metrics = metrics
        self.max_queued = int(max_queued)
        self.max_queued_bulk = self.max_queued // 2
        self.timeout_s = float(timeout_s)
        self.executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="faq-encode")
        self._lanes: tuple[deque[_Job], deque[_Job]] = (deque(), deque())
        self._queued = [0, 0]  # queries waiting, per lane
        self._wakeup: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._rate = 50.0  # queries/s served, smoothed: for Retry-After

    @property
    def queued(self) -> int:
        return sum(self._queued)

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
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
        for lane in self._lanes:
            while lane:
                job = lane.popleft()
                if not job.future.done():
                    job.future.set_exception(RuntimeError("service shutting down"))
        self.executor.shutdown(wait=True, cancel_futures=True)

    # -- admission ---------------------------------------------------------------------------
    def _retry_after(self) -> int:
        return int(min(30, max(1, math.ceil(self.queued / max(self._rate, 1.0)))))

    def _admit(self, n: int, lane: int) -> None:
        if lane == BULK and self._queued[BULK] + n > self.max_queued_bulk:
            raise Overloaded(
                f"batch requests may queue at most {self.max_queued_bulk} queries (half of FAQ_MAX_QUEUED_QUERIES="
                f"{self.max_queued}) and {self._queued[BULK]} are queued; retry later or send smaller batches",
                status_code=429, retry_after=self._retry_after())
        if self.queued + n > self.max_queued:
            raise Overloaded(
                f"{self.queued} queries are queued (FAQ_MAX_QUEUED_QUERIES={self.max_queued}); retry later",
                status_code=503, retry_after=self._retry_after())

    def _unqueue(self, job: _Job) -> None:
        if job.queued:
            job.queued = False
            self._queued[job.lane] -= len(job.queries)

    def _overdue(self) -> None:
        if self.metrics:
            self.metrics.deadline_exceeded.inc()

    # -- requests ----------------------------------------------------------------------------
    async def submit(self, queries: list[MatchQuery], retriever: Any, pipeline: Pipeline | None = None) -> list[MatchResult]:
        """Match `queries` (a batch request's queries are searched on one retriever) on `retriever`, with
        `pipeline` (a KB's own; default: the batcher's). One batcher serves every KB: the encoder
        threads and the admission bound are the process's, not a KB's.

        Raises Overloaded (the queue is full) or DeadlineExceeded; cancelling the awaiting task (the
        client went away) drops whatever of the request has not run yet."""
        if self._wakeup is None:
            raise RuntimeError("MatchBatcher not started")
        pipeline = pipeline or self.pipeline
        # repeats are answered from the query cache here, without queueing behind encoder work
        found = cache.cached(pipeline, queries, retriever)
        todo = cache.missing(found)
        if not todo:
            return found  # type: ignore[return-value]
        lane = INTERACTIVE if len(queries) == 1 else BULK
        self._admit(len(todo), lane)
        loop = asyncio.get_running_loop()
        pending = [queries[i] for i in todo]
        step = MAX_ENCODE_BATCH if lane == INTERACTIVE else BATCH_SLICE
        jobs = [_Job(pending[i: i + step], retriever, loop.create_future(), pipeline, lane)
                for i in range(0, len(pending), step)]
        for job in jobs:
            self._lanes[lane].append(job)
            self._queued[lane] += len(job.queries)
        self._wakeup.set()
        try:
            parts = await asyncio.wait_for(asyncio.gather(*(job.future for job in jobs)), self.timeout_s)
        except TimeoutError:
            self._overdue()
            raise DeadlineExceeded(
                f"not answered within {self.timeout_s * 1000:.0f} ms (FAQ_REQUEST_TIMEOUT_MS): the service is "
                f"overloaded; retry later") from None
        finally:
            for job in jobs:  # deadline, client gone or an error: drop what has not run
                if not job.future.done():
                    job.future.cancel()
                self._unqueue(job)
        return cache.merge(found, todo, [r for part in parts for r in part])

    def _take(self) -> list[_Job]:
        """The next jobs to run together (empty: nothing queued). Jobs whose request is finished
        (deadline, client gone) are dropped on the way."""
        for lane in self._lanes:
            while lane and lane[0].future.done():
                self._unqueue(lane.popleft())
            if not lane:
                continue
            jobs = [lane.popleft()]
            size = len(jobs[0].queries)
            if jobs[0].lane == INTERACTIVE:
                while lane and size + len(lane[0].queries) <= MAX_ENCODE_BATCH:
                    job = lane.popleft()
                    if not job.future.done():
                        jobs.append(job)
                        size += len(job.queries)
                    else:
                        self._unqueue(job)
            for job in jobs:
                self._unqueue(job)
            return jobs
        return []

    async def _dispatch(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            jobs = self._take()
            if not jobs:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            t0 = time.perf_counter()
            try:
                outcomes = await loop.run_in_executor(self.executor, self._run_jobs, jobs)
            except BaseException as exc:  # executor shut down or cancelled: fail the jobs, keep serving
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            served = sum(len(job.queries) for job in jobs)
            self._rate = 0.8 * self._rate + 0.2 * served / max(time.perf_counter() - t0, 1e-3)
            for job, outcome in zip(jobs, outcomes):
                if job.future.done():
                    continue
                if isinstance(outcome, BaseException):
                    job.future.set_exception(outcome)
                else:
                    job.future.set_result(outcome)

    def _run_jobs(self, jobs: list[_Job]) -> list[list[MatchResult] | BaseException]:
        """In a worker thread: one encoder call for all jobs, then one search per retriever (`Pipeline.run`)."""
        # a request that ended while its job waited for a thread (deadline, client gone) costs nothing
        live = [i for i, job in enumerate(jobs) if not job.future.done()]
        outcomes: list[list[MatchResult] | BaseException] = [asyncio.CancelledError()] * len(jobs)
        for i, outcome in zip(live, self._run_live([jobs[i] for i in live]) if live else []):
            outcomes[i] = outcome
        return outcomes

    def _run_live(self, jobs: list[_Job]) -> list[list[MatchResult] | BaseException]:
        """KBs differ in pipeline (their own settings) but usually share the encoder: one encoder call for
        all the jobs whose pipelines share one (app/match/chain.py `run_pipelines`)."""
        on_encode = self.metrics.encode_batch.observe if self.metrics else None
        return run_pipelines([(job.pipeline, (job.queries, job.retriever, job.submitted)) for job in jobs],
                             on_encode=on_encode)
