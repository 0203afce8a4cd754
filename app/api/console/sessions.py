"""Signed-in console users, kept in this process's memory.

The browser holds only a random session id (an HttpOnly cookie). The admin token it was opened with
stays here, on the server, so every request can ask `Tenants.allows` again: a revoked KB token ends its
console sessions within the tenants' token cache time instead of living on until the cookie expires.
Sessions do not survive a restart and are not shared between replicas; signing in again is the price.
"""
from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

#: a session unused for this long ends
IDLE_S = 60 * 60.0
#: and none lives longer than this, used or not
MAX_AGE_S = 12 * 60 * 60.0
#: a flood of sign-ins must not grow memory without bound: past it the oldest sessions end
MAX_SESSIONS = 10_000


@dataclass
class ConsoleSession:
    id: str
    token: str
    #: the KB a KB token's session is bound to; None: FAQ_ADMIN_TOKEN, every KB
    kb: str | None
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    created: float = field(default_factory=lambda: time.monotonic())
    last_used: float = field(default_factory=lambda: time.monotonic())
    #: one message shown on the next page (after a redirect)
    flash: str | None = None
    #: the import checked by the latest dry run, waiting to be applied (app/api/console/imports.py)
    pending_import: Any = None

    def take_flash(self) -> str | None:
        message, self.flash = self.flash, None
        return message

    def csrf_ok(self, sent: str | None) -> bool:
        return bool(sent) and secrets.compare_digest(sent.encode("utf-8", "surrogatepass"), self.csrf.encode())


class Sessions:
    def __init__(self) -> None:
        self._by_id: dict[str, ConsoleSession] = {}
        self._lock = threading.Lock()

    def open(self, token: str, kb: str | None) -> ConsoleSession:
        session = ConsoleSession(id=secrets.token_urlsafe(32), token=token, kb=kb)
        with self._lock:
            self._expire(time.monotonic())
            while len(self._by_id) >= MAX_SESSIONS:
                oldest = min(self._by_id.values(), key=lambda s: s.last_used)
                del self._by_id[oldest.id]
            self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> ConsoleSession | None:
        if not session_id:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None:
                return None
            if now - session.last_used > IDLE_S or now - session.created > MAX_AGE_S:
                del self._by_id[session_id]
                return None
            session.last_used = now
            return session

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._by_id.pop(session_id or "", None)

    def __len__(self) -> int:
        return len(self._by_id)

    def _expire(self, now: float) -> None:
        dead = [s.id for s in self._by_id.values()
                if now - s.last_used > IDLE_S or now - s.created > MAX_AGE_S]
        for session_id in dead:
            del self._by_id[session_id]
