"""Signed-in console users, kept in the database (app/store/console_sessions.py), so a sign-in survives
a restart and every replica behind a load balancer knows it.

The browser holds only a random session id (an HttpOnly cookie); the table holds its SHA-256 and no
token: a KB token's session names the token's row, FAQ_ADMIN_TOKEN's the digest of the admin token it
was opened with. Every request asks again whether that still reaches the KB (`Sessions.allowed`): a
revoked KB token ends its sessions within the resident KBs' token cache time, a changed FAQ_ADMIN_TOKEN at once.
"""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from app.api.roles import DEPLOYMENT_ADMIN, Principal, principal_of_info
from app.store.catalog import ROLES
from app.store.console_sessions import ConsoleSessionStore, session_digest

#: a session unused for this long ends
IDLE_S = 60 * 60.0
#: and none lives longer than this, used or not
MAX_AGE_S = 12 * 60 * 60.0
#: a flood of sign-ins must not grow the table without bound: past this many sessions of one KB (or of
#: FAQ_ADMIN_TOKEN) the least recently used of that KB (or the admin's) end, so one KB's sign-ins never
#: end another's (app/store/console_sessions.py)
MAX_SESSIONS = 10_000
#: and past this many in all, the least recently used of the KB holding the most
MAX_SESSIONS_TOTAL = 100_000
#: a session's last use is written at most this often (a page view is otherwise a read)
TOUCH_S = 60.0


def admin_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class ConsoleSession:
    #: the cookie's value; only its digest is stored
    id: str
    #: the KB a KB token's session is bound to; None: FAQ_ADMIN_TOKEN, every KB
    kb: str | None
    token_id: int | None
    admin_sha256: str | None
    csrf: str
    created: datetime
    store: ConsoleSessionStore = field(repr=False)
    #: the message left for the page this request shows (taken when the session was loaded)
    shown_flash: str | None = None
    #: who is signed in, as checked when the session was loaded (`Sessions.principal`)
    principal: Principal | None = None

    @property
    def digest(self) -> str:
        return session_digest(self.id)

    def take_flash(self) -> str | None:
        return self.store.take_flash(self.digest)

    @property
    def pending_import(self) -> dict | None:
        """The import checked by the latest dry run, waiting to be applied (app/api/console/imports.py)."""
        return self.store.pending(self.digest)

    @pending_import.setter
    def pending_import(self, value: dict | None) -> None:
        self.store.set(self.digest, pending=value)

    def csrf_ok(self, sent: str | None) -> bool:
        return bool(sent) and secrets.compare_digest(sent.encode("utf-8", "surrogatepass"), self.csrf.encode())


class Sessions:
    def __init__(self, store: ConsoleSessionStore | Callable[[], ConsoleSessionStore],
                 clock: Callable[[], datetime] = _utcnow) -> None:
        # a callable: the app's store exists only once the service has started
        self._store = store
        self.clock = clock

    @property
    def store(self) -> ConsoleSessionStore:
        return self._store if isinstance(self._store, ConsoleSessionStore) else self._store()

    def open(self, kb: str | None, token_id: int | None = None, admin_token: str | None = None) -> ConsoleSession:
        """A new session: a KB token's (`kb` and `token_id`) or FAQ_ADMIN_TOKEN's (`admin_token`, kb None)."""
        if (token_id is None) == (admin_token is None):
            raise ValueError("a session is opened with a KB token's id or with FAQ_ADMIN_TOKEN")
        now = self.clock()
        self.store.expire(now - timedelta(seconds=IDLE_S), now - timedelta(seconds=MAX_AGE_S), kb, MAX_SESSIONS - 1,
                          MAX_SESSIONS_TOTAL - 1)
        session = ConsoleSession(id=secrets.token_urlsafe(32), kb=kb, token_id=token_id,
                                 admin_sha256=admin_digest(admin_token) if admin_token is not None else None,
                                 csrf=secrets.token_urlsafe(32), created=now, store=self.store)
        self.store.create(session.id, kb=kb, token_id=token_id, admin_sha256=session.admin_sha256, csrf=session.csrf,
                          now=now)
        return session

    def get(self, session_id: str | None) -> ConsoleSession | None:
        if not session_id or len(session_id) > 100:
            return None
        row = self.store.get(session_id)
        if row is None:
            return None
        now = self.clock()
        if (now - row.last_used_at).total_seconds() > IDLE_S or (now - row.created_at).total_seconds() > MAX_AGE_S:
            self.store.delete(row.id_sha256)
            return None
        if (now - row.last_used_at).total_seconds() > TOUCH_S:
            self.store.touch(row.id_sha256, now)
        return ConsoleSession(id=session_id, kb=row.kb, token_id=row.token_id, admin_sha256=row.admin_sha256,
                              csrf=row.csrf, created=row.created_at, store=self.store)

    def allowed(self, session: ConsoleSession, resident_kbs: Any) -> bool:
        """Does what the session was opened with still reach its KBs? (ResidentKbs: app/api/resident_kbs.py)"""
        return self.principal(session, resident_kbs) is not None

    @staticmethod
    def principal(session: ConsoleSession, resident_kbs: Any) -> Principal | None:
        """Who the session is signed in as while what it was opened with still reaches its KBs, else None."""
        if session.token_id is None:
            admin = resident_kbs.settings.admin_token
            still = bool(admin) and session.admin_sha256 is not None and secrets.compare_digest(
                session.admin_sha256.encode(), admin_digest(admin).encode())
            return DEPLOYMENT_ADMIN if still else None
        info = resident_kbs.token_live(session.token_id)
        if info is None or info.kb != session.kb or info.kind not in ROLES:
            return None
        return principal_of_info(info)

    def close(self, session_id: str | None) -> None:
        if session_id:
            self.store.delete(session_digest(session_id))

    def __len__(self) -> int:
        return self.store.count()
