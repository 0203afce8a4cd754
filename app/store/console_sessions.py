"""Console sign-ins (app/api/console/sessions.py), for every KB: found by the SHA-256 of the browser's
cookie, so the table holds nothing a browser could present. Shared by every replica of a deployment."""
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

    def expire(self, idle_before: datetime, created_before: datetime, keep: int) -> int:
        """End sessions unused since `idle_before` or opened before `created_before`, then the least
        recently used beyond `keep`; returns how many ended."""
        with self.engine.begin() as conn:
            ended = conn.execute(delete(sessions_t).where(
                (sessions_t.c.last_used_at < idle_before) | (sessions_t.c.created_at < created_before))).rowcount
            extra = int(conn.execute(select(func.count()).select_from(sessions_t)).scalar() or 0) - keep
            if extra > 0:
                oldest = select(sessions_t.c.id_sha256).order_by(sessions_t.c.last_used_at).limit(extra)
                ended += conn.execute(delete(sessions_t).where(
                    sessions_t.c.id_sha256.in_(oldest.scalar_subquery()))).rowcount
        return ended

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(sessions_t)).scalar() or 0)
