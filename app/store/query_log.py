"""The query log of one KB (retention is the deployment's: pruning spans every KB): every served /match (written in batches by the service's log writer), the feedback
on it (written once per request), the reads of `faq eval online`, `faq kb mine` and the decider's
traffic table, the console's Traffic page, and retention (pruned in chunks so writers never wait long).

Text that no database can hold (kb.records.text_problem: NUL, lone surrogates) never reaches a
statement: the log drops only the rows that carry it, and feedback naming such a key finds nothing.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from sqlalchemy import Engine, and_, delete, func, insert, or_, select, update
from sqlalchemy.exc import InterfaceError, OperationalError

from app.db.models import utcnow
from app.store.base import StorePart, qlog_t, storable, utc
from kb.records import DEFAULT_KB, text_problem

log = logging.getLogger(__name__)

#: query-log rows deleted per transaction by prune_query_log
PRUNE_CHUNK = 5000
#: rows traffic_rows reads at most: about 60 MB of Python objects, a few seconds on one core
TRAFFIC_ROWS_LIMIT = 200_000


class FeedbackAlreadyRecorded(Exception):
    """record_feedback() for a request whose feedback is already there: feedback is written once."""


class FeedbackSessionMismatch(Exception):
    """record_feedback() with a session_id other than the logged query's (or none, when one is required)."""


@dataclass(frozen=True)
class TrafficRows:
    rows: list[dict[str, Any]]  # oldest first
    capped: bool  # True: the window held more rows than the limit, and only the newest were read


@dataclass(frozen=True)
class PruneResult:
    deleted: int
    chunks: int
    done: bool  # False: stopped at max_seconds with old rows left


class QueryLogStore(StorePart):
    _LOG_FIELDS = tuple(c.name for c in qlog_t.columns if c.name != "id")

    _LOG_TEXT_FIELDS = tuple(c.name for c in qlog_t.columns if c.name != "id" and c.type.python_type is str)

    def __init__(self, engine: Engine, kb: str = DEFAULT_KB):
        super().__init__(engine, kb)
        self.log_rows_dropped = 0  # query-log rows log_queries could not store, since this store was opened

    def count_query_log_before(self, cutoff: datetime) -> int:
        """Query-log rows created before `cutoff`."""
        with self.engine.connect() as conn:
            return int(conn.execute(
                select(func.count()).select_from(qlog_t).where(qlog_t.c.created_at < utc(cutoff))
            ).scalar() or 0)

    def prune_query_log(self, cutoff: datetime, *, chunk_size: int = PRUNE_CHUNK, max_seconds: float | None = None,
                        progress: Callable[[int], None] | None = None) -> PruneResult:
        """Delete query-log rows created before `cutoff`, `chunk_size` rows per transaction, so writers
        (the service's log writer) wait at most one chunk for the lock, never the whole prune.
        `max_seconds`: stop after the chunk that passes it (`done` False: call again to go on).
        `progress(deleted_so_far)` is called after every chunk."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        cutoff = utc(cutoff)
        # ids picked through the created_at index; a subquery keeps the bound parameters at two
        old_ids = select(qlog_t.c.id).where(qlog_t.c.created_at < cutoff).limit(chunk_size)
        started = time.monotonic()
        deleted = chunks = 0
        while True:
            with self.engine.begin() as conn:
                n = conn.execute(delete(qlog_t).where(qlog_t.c.id.in_(old_ids))).rowcount
            deleted += n
            chunks += 1
            if progress is not None and n:
                progress(deleted)
            if n < chunk_size:
                return PruneResult(deleted=deleted, chunks=chunks, done=True)
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                return PruneResult(deleted=deleted, chunks=chunks, done=False)

    def log_queries(self, rows: list[dict[str, Any]]) -> int:
        """Insert query-log rows (keys: query_log columns; created_at defaults to now); returns how many
        were dropped. A bad row never costs the others: rows with text no database can hold are dropped
        up front, and when the one-statement insert still fails on the data (a duplicate request_id, a
        value the column refuses), the rows are inserted one by one and only the failing ones dropped.
        Connection problems raise (nothing is written then). `log_rows_dropped` counts drops since start.
        Raises ValueError for unknown fields (a caller bug)."""
        if not rows:
            return 0
        now = utcnow()
        params = []
        unstorable: list[str] = []
        for i, row in enumerate(rows):
            unknown = set(row) - set(self._LOG_FIELDS)
            if unknown:
                raise ValueError(f"query log row {i}: unknown field(s) {', '.join(sorted(unknown))}")
            bad = [name for name in self._LOG_TEXT_FIELDS
                   if isinstance(row.get(name), str) and text_problem(row[name]) is not None]
            if bad:
                unstorable.append(f"{row.get('request_id')!a} ({', '.join(bad)})")
                continue
            # executemany needs the same keys in every row
            full = {name: row.get(name) for name in self._LOG_FIELDS}
            if full["created_at"] is None:
                full["created_at"] = now
            if full["kb"] is None:
                full["kb"] = self.kb
            params.append(full)
        if unstorable:
            log.warning("query log: dropped %d row(s) with text no database can hold (NUL or a lone surrogate): %s",
                        len(unstorable), ", ".join(unstorable[:10]))
        dropped = len(unstorable)
        if params:
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(qlog_t), params)
            except (OperationalError, InterfaceError):
                raise  # the database, not the data: row by row would only fail slower
            except Exception as exc:  # noqa: BLE001 - which row is bad is found out below
                log.warning("query log: inserting %d rows at once failed (%s); inserting them one by one",
                            len(params), " ".join(str(exc).split())[:300])
                dropped += self._log_one_by_one(params)
        self.log_rows_dropped += dropped
        return dropped

    def _log_one_by_one(self, params: list[dict[str, Any]]) -> int:
        """Each row in its own transaction; returns how many were dropped (logged once per call)."""
        failed: list[str] = []
        for i, row in enumerate(params):
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(qlog_t), row)
            except (OperationalError, InterfaceError) as exc:
                rest = len(params) - i
                log.error("query log: database unavailable, dropped the last %d of %d rows: %s",
                          rest, len(params), " ".join(str(exc).split())[:300])
                return len(failed) + rest
            except Exception as exc:  # noqa: BLE001 - drop this row only
                failed.append(f"{row.get('request_id')!a}: {' '.join(str(exc).split())[:200]}")
        if failed:
            log.warning("query log: dropped %d of %d rows the database refused: %s",
                        len(failed), len(params), "; ".join(failed[:5]))
        return len(failed)

    def read_query_log(self, since: datetime | None = None, with_feedback: bool = False) -> list[dict[str, Any]]:
        """Logged queries (oldest first, optionally from `since` on; only those with feedback when
        `with_feedback`) with what they were answered and the feedback: keys query, faq_id, score,
        feedback_correct, feedback_faq_id, created_at, decision."""
        stmt = select(qlog_t.c.query, qlog_t.c.faq_id, qlog_t.c.score, qlog_t.c.feedback_correct,
                      qlog_t.c.feedback_faq_id, qlog_t.c.created_at, qlog_t.c.decision)
        stmt = stmt.where(qlog_t.c.kb == self.kb)
        if since is not None:
            stmt = stmt.where(qlog_t.c.created_at >= utc(since))
        if with_feedback:
            stmt = stmt.where(or_(qlog_t.c.feedback_correct.is_not(None), qlog_t.c.feedback_faq_id.is_not(None)))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt.order_by(qlog_t.c.id))]

    def traffic_rows(self, since: datetime, until: datetime | None = None,
                     limit: int = TRAFFIC_ROWS_LIMIT) -> TrafficRows:
        """This KB's logged queries created in [since, until), the newest `limit` of them, oldest first:
        keys created_at, arm, faq_id, decision, latency_ms, feedback_correct, feedback_faq_id."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        # kb and created_at only, so the (kb, created_at) index serves the range and the order
        conditions = [qlog_t.c.kb == self.kb, qlog_t.c.created_at >= utc(since)]
        if until is not None:
            conditions.append(qlog_t.c.created_at < utc(until))
        stmt = (select(qlog_t.c.created_at, qlog_t.c.arm, qlog_t.c.faq_id, qlog_t.c.decision, qlog_t.c.latency_ms,
                       qlog_t.c.feedback_correct, qlog_t.c.feedback_faq_id)
                .where(and_(*conditions)).order_by(qlog_t.c.created_at.desc()).limit(limit + 1))
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(stmt)]
        capped = len(rows) > limit
        rows = rows[:limit]
        rows.reverse()
        for row in rows:
            row["created_at"] = utc(row["created_at"])
        return TrafficRows(rows, capped)

    def recent_scores(self, index_version: str, arms: Sequence[str], limit: int) -> list[float]:
        """The best match's score of the latest `limit` queries served from `index_version` on `arms`."""
        stmt = (select(qlog_t.c.score)
                .where(qlog_t.c.kb == self.kb, qlog_t.c.index_version == index_version, qlog_t.c.arm.in_(list(arms)), qlog_t.c.score.is_not(None))
                .order_by(qlog_t.c.id.desc()).limit(limit))
        with self.engine.connect() as conn:
            return [float(r[0]) for r in conn.execute(stmt)]

    def record_feedback(self, request_id: str, correct: bool | None, faq_id: str | None,
                        session_id: str | None = None, require_session: bool = False) -> bool:
        """Attach feedback to a logged query, once; False when no query has that request_id.

        One conditional UPDATE decides, so of two concurrent calls exactly one wins. Raises
        FeedbackAlreadyRecorded when the query has feedback already, FeedbackSessionMismatch when the
        query was logged with a session_id and `session_id` differs (or, with `require_session`, is
        missing). Whether `faq_id` names an FAQ is the caller's business (the log outlives FAQs)."""
        if not storable(request_id, faq_id, session_id):
            return False  # no logged request can have it
        row_is = and_(qlog_t.c.kb == self.kb, qlog_t.c.request_id == request_id)
        conditions = [row_is, qlog_t.c.feedback_correct.is_(None), qlog_t.c.feedback_faq_id.is_(None)]
        if session_id is not None:
            conditions.append(or_(qlog_t.c.session_id.is_(None), qlog_t.c.session_id == session_id))
        elif require_session:
            conditions.append(qlog_t.c.session_id.is_(None))
        with self.engine.begin() as conn:
            result = conn.execute(
                update(qlog_t).where(and_(*conditions)).values(feedback_correct=correct, feedback_faq_id=faq_id))
            if result.rowcount > 0:
                return True
            # Nothing updated: tell why. A row that no longer matches the WHERE stays that way
            # (feedback is never cleared), so this read cannot contradict the UPDATE.
            row = conn.execute(select(qlog_t.c.session_id, qlog_t.c.feedback_correct, qlog_t.c.feedback_faq_id)
                               .where(row_is)).first()
        if row is None:
            return False
        # the session is checked first: a caller from another session learns nothing about the feedback
        if row.session_id is not None and (session_id != row.session_id if session_id is not None else require_session):
            if session_id is None:
                raise FeedbackSessionMismatch(f"request {request_id} was made in a session: give its session_id")
            raise FeedbackSessionMismatch(f"session_id does not match the session of request {request_id}")
        if row.feedback_correct is not None or row.feedback_faq_id is not None:
            raise FeedbackAlreadyRecorded(f"feedback for request {request_id} was already recorded")
        return False  # logged only after the UPDATE looked: it was not there when the feedback came
