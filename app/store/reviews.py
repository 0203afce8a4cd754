"""What FAQ owners dismissed from one KB's review queues (app/curation/review.py): a mined phrasing, a cluster of
unanswered queries, a lint finding. A dismissal names its item by a key (a hash of what identifies it,
made by app/curation/review.py), keeps the text the queue showed and the reason given, and can be taken back."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from app.db.models import utcnow
from app.store.audit import AuditStore
from app.store.base import StorePart, dismissals_t, storable, utc
from kb.mining import phrasing_form

Queue = Literal["phrasing", "cluster", "lint"]
QUEUES: tuple[str, ...] = ("phrasing", "cluster", "lint")
#: longest reason kept (characters)
MAX_REASON_CHARS = 500


def _key(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def phrasing_key(faq_id: str, question: str) -> str:
    """A mined phrasing: the FAQ and the phrasing's normalised form (case and spacing do not matter)."""
    return _key("phrasing", faq_id, phrasing_form(question))


def cluster_key(bow_key: str) -> str:
    """A cluster of unanswered queries, by its bag-of-words key (kb/mining.py `cluster_unanswered`)."""
    return _key("cluster", bow_key)


def lint_key(faq_id: str, answer: str) -> str:
    """A lint finding, by the FAQ and its answer: once the answer is edited, the FAQ is judged afresh."""
    return _key("lint", faq_id, answer)


@dataclass(frozen=True)
class Dismissal:
    queue: str
    key: str
    subject: str
    reason: str | None
    dismissed_by: str | None
    created_at: datetime


class ReviewStore(StorePart):
    def dismiss(self, queue: Queue, key: str, subject: str, reason: str | None = None,
                by: str | None = None) -> bool:
        """Record that the item `key` of `queue` was dismissed; False when it already was (the first
        reason stands). Raises KbNotFound for a KB that does not exist, ValueError for a bad queue, key
        or text (the callers validate first; this is the last line)."""
        if queue not in QUEUES:
            raise ValueError(f"queue must be one of {', '.join(QUEUES)}, got {queue!r}")
        if not key or len(key) > 64 or not storable(key, subject, reason, by):
            raise ValueError("a dismissal needs a key of 1-64 characters and storable text")
        if reason is not None and len(reason) > MAX_REASON_CHARS:
            raise ValueError(f"reason must be at most {MAX_REASON_CHARS} characters")
        row = {"queue": queue, "key": key, "subject": subject, "reason": reason or None,
               "dismissed_by": by[:200] if by else None}
        try:
            with self.locked_write() as conn:
                conn.execute(dismissals_t.insert().values(kb=self.kb, created_at=utcnow(), **row))
                # the key is what the API and the console name a dismissal by (and restore it with)
                AuditStore(self.engine, self.kb).record("review.dismiss", key, None, row, conn=conn)
        except IntegrityError:
            return False
        return True

    def restore(self, queue: str, key: str) -> bool:
        """Take a dismissal back (the item is proposed again); False when there was none."""
        which = (dismissals_t.c.kb == self.kb, dismissals_t.c.queue == queue, dismissals_t.c.key == key)
        with self.locked_write() as conn:
            found = conn.execute(select(dismissals_t).where(*which)).first()
            if found is None or conn.execute(delete(dismissals_t).where(*which)).rowcount == 0:
                return False
            before = {"queue": found.queue, "key": found.key, "subject": found.subject, "reason": found.reason,
                      "dismissed_by": found.dismissed_by, "dismissed_at": utc(found.created_at)}
            AuditStore(self.engine, self.kb).record("review.restore", key, before, None, conn=conn)
            return True

    def dismissed(self, queue: str | None = None) -> list[Dismissal]:
        """This KB's dismissals (of one queue, or all), newest first."""
        stmt = select(dismissals_t).where(dismissals_t.c.kb == self.kb)
        if queue is not None:
            stmt = stmt.where(dismissals_t.c.queue == queue)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt.order_by(dismissals_t.c.id.desc())).all()
        return [Dismissal(r.queue, r.key, r.subject, r.reason, r.dismissed_by, utc(r.created_at)) for r in rows]

    def dismissed_keys(self, queue: str) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(select(dismissals_t.c.key).where(
                dismissals_t.c.kb == self.kb, dismissals_t.c.queue == queue)).scalars())
