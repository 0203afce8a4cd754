"""Console sign-ins (app/api/console/sessions.py), for every KB: found by the SHA-256 of the browser's
cookie, so the table holds nothing a browser could present. Shared by every replica of a deployment.

How many sessions are kept (`ConsoleSessionStore.expire`, run before each sign-in): sessions are counted
per bucket, a bucket being one KB's sessions (opened with that KB's tokens) or FAQ_ADMIN_TOKEN's (kb
NULL). A sign-in first ends the least recently used sessions of its own bucket beyond `keep`, so a flood
of sign-ins with one KB's token ends only that KB's sessions, never another KB's nor the admin's. The
table as a whole is bounded too (`keep_total`): past it, the least recently used sessions of the bucket
holding the most are ended, the signing-in bucket first among equals. Another bucket is thus touched only
while the whole table is full and that bucket holds more than the signing-in one: with a bucket cap of
10,000 and a total of 100,000, it takes ten buckets at their own cap. Both queries go through the
(kb, last_used_at) index.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, func, select, update

from app.db.models import ConsoleSession
from app.store.base import utc

sessions_t = ConsoleSession.__table__


def session_digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class SessionRow:
    id_sha256: str
    kb: str | None
    token_id: int | None
    admin_sha256: str | None
    csrf: str
    created_at: datetime
    last_used_at: datetime


class ConsoleSessionStore:
    def __init__(self, engine: Engine):
        self.engine = engine

    def create(self, cookie: str, *, kb: str | None, token_id: int | None, admin_sha256: str | None, csrf: str,
               now: datetime) -> None:
        with self.engine.begin() as conn:
            conn.execute(sessions_t.insert().values(
                id_sha256=session_digest(cookie), kb=kb, token_id=token_id, admin_sha256=admin_sha256, csrf=csrf,
                created_at=now, last_used_at=now))

    def get(self, cookie: str) -> SessionRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(sessions_t.c.id_sha256, sessions_t.c.kb, sessions_t.c.token_id,
                                      sessions_t.c.admin_sha256, sessions_t.c.csrf, sessions_t.c.created_at,
                                      sessions_t.c.last_used_at)
                               .where(sessions_t.c.id_sha256 == session_digest(cookie))).first()
        if row is None:
            return None
        return SessionRow(row.id_sha256, row.kb, row.token_id, row.admin_sha256, row.csrf, utc(row.created_at),
                          utc(row.last_used_at))

    def touch(self, id_sha256: str, now: datetime) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(sessions_t).where(sessions_t.c.id_sha256 == id_sha256).values(last_used_at=now))

    def set(self, id_sha256: str, **values: Any) -> None:
        """Set `flash` and/or `pending`."""
        if set(values) - {"flash", "pending"}:
            raise ValueError(f"only flash and pending change: {sorted(values)}")
        with self.engine.begin() as conn:
            conn.execute(update(sessions_t).where(sessions_t.c.id_sha256 == id_sha256).values(**values))

    def take_flash(self, id_sha256: str) -> str | None:
        """The session's message, cleared: it is shown once."""
        with self.engine.begin() as conn:
            message = conn.execute(select(sessions_t.c.flash).where(sessions_t.c.id_sha256 == id_sha256)).scalar()
            if message is not None:
                conn.execute(update(sessions_t).where(sessions_t.c.id_sha256 == id_sha256).values(flash=None))
        return message

    def pending(self, id_sha256: str) -> dict | None:
        with self.engine.connect() as conn:
            return conn.execute(select(sessions_t.c.pending).where(sessions_t.c.id_sha256 == id_sha256)).scalar()

    def delete(self, id_sha256: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(sessions_t).where(sessions_t.c.id_sha256 == id_sha256))

    def expire(self, idle_before: datetime, created_before: datetime, kb: str | None, keep: int,
               keep_total: int) -> int:
        """End sessions unused since `idle_before` or opened before `created_before`, then the least
        recently used of `kb`'s bucket (None: FAQ_ADMIN_TOKEN's) beyond `keep`, then those of the largest
        bucket while the table holds more than `keep_total` (module docstring); returns how many ended."""
        with self.engine.begin() as conn:
            ended = conn.execute(delete(sessions_t).where(
                (sessions_t.c.last_used_at < idle_before) | (sessions_t.c.created_at < created_before))).rowcount
            ended += self._trim(conn, kb, keep)
            extra = int(conn.execute(select(func.count()).select_from(sessions_t)).scalar() or 0) - keep_total
            while extra > 0:
                sizes = {row.kb: int(row.n) for row in conn.execute(
                    select(sessions_t.c.kb, func.count().label("n")).group_by(sessions_t.c.kb))}
                largest = max(sizes.values())
                # among equally large buckets the signing-in one gives way first: it cannot end others'
                # sessions while its own are as many; FAQ_ADMIN_TOKEN's last
                tied = sorted((b for b, n in sizes.items() if n == largest),
                              key=lambda b: (b != kb, b is None, b or ""))
                # the largest come down level with each other, and no lower than the next bucket
                below = max([n for n in sizes.values() if n < largest], default=0)
                level = max(below, largest - -(-extra // len(tied)))
                trimmed = 0
                for bucket in tied:
                    if extra <= 0:
                        break
                    n = self._trim(conn, bucket, max(level, largest - extra))
                    trimmed, extra = trimmed + n, extra - n
                ended += trimmed
                if trimmed == 0:
                    break
        return ended

    @staticmethod
    def _trim(conn: Any, kb: str | None, keep: int) -> int:
        """End the least recently used sessions of one bucket beyond `keep`."""
        in_bucket = sessions_t.c.kb.is_(None) if kb is None else sessions_t.c.kb == kb
        extra = int(conn.execute(select(func.count()).select_from(sessions_t).where(in_bucket)).scalar() or 0) - keep
        if extra <= 0:
            return 0
        oldest = select(sessions_t.c.id_sha256).where(in_bucket).order_by(sessions_t.c.last_used_at).limit(extra)
        return conn.execute(delete(sessions_t).where(sessions_t.c.id_sha256.in_(oldest.scalar_subquery()))).rowcount

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(sessions_t)).scalar() or 0)
