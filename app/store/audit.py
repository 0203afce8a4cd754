"""The audit log: one row per change to a KB, appended and never updated (`audit_log`).

Who made a change is set once at the edge, for the whole request or command (`acting_as`): the HTTP layer
with the token's name and role, the console with its signed-in user, the CLI with the operator. The store's
writes record their change with it (`AuditStore.record`), inside the transaction that makes the change when
they have one, so a change and its row are committed together. Rows are removed only by `prune`.
"""
from __future__ import annotations

import contextvars
import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from app.db.models import AuditEntry, utcnow
from app.store.base import StorePart, utc

audit_t = AuditEntry.__table__

#: where a change came from
SOURCES = ("api", "cli", "console", "compat")


@dataclass(frozen=True)
class Actor:
    """Who changes a KB: `name` (a token's name, the console user, the operator), `role` (viewer, editor,
    publisher, admin), `source` (one of SOURCES) and the request's id, when there is one."""

    name: str
    role: str
    source: str
    request_id: str | None = None


def operator() -> Actor:
    """The CLI's actor: the operating-system user running `faq`, with the deployment's rights."""
    try:
        name = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        name = "operator"
    return Actor(name=name or "operator", role="admin", source="cli")


_actor: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("faq_actor", default=None)


def current_actor() -> Actor:
    """The actor set by `acting_as`, else the CLI's operator (a script calling the store directly)."""
    return _actor.get() or operator()


@contextmanager
def acting_as(actor: Actor) -> Iterator[Actor]:
    token = _actor.set(actor)
    try:
        yield actor
    finally:
        _actor.reset(token)


@dataclass(frozen=True)
class AuditRow:
    id: int
    kb: str
    created_at: datetime
    actor: str
    role: str
    source: str
    request_id: str | None
    action: str
    subject: str | None
    before: Any
    after: Any

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kb": self.kb, "created_at": self.created_at.isoformat(), "actor": self.actor,
                "role": self.role, "source": self.source, "request_id": self.request_id, "action": self.action,
                "subject": self.subject, "before": self.before, "after": self.after}


class AuditStore(StorePart):
    def record(self, action: str, subject: str | None = None, before: Any = None, after: Any = None, *,
               conn: Connection | None = None, actor: Actor | None = None) -> None:
        """Append one row for a change of this KB, in `conn`'s transaction when given (the change's own)."""
        who = actor or current_actor()
        row = {"kb": self.kb, "created_at": utcnow(), "actor": who.name[:200], "role": who.role[:16],
               "source": who.source[:16], "request_id": (who.request_id or None) and who.request_id[:64],
               "action": action[:32], "subject": None if subject is None else str(subject)[:200],
               "before": before, "after": after}
        if conn is not None:
            conn.execute(insert(audit_t).values(**row))
            return
        with self.engine.begin() as own:
            own.execute(insert(audit_t).values(**row))

    def read(self, since: datetime | None = None, faq_id: str | None = None, actor: str | None = None,
             limit: int = 1000) -> list[AuditRow]:
        """This KB's rows, newest first."""
        query = select(audit_t).where(audit_t.c.kb == self.kb)
        if since is not None:
            query = query.where(audit_t.c.created_at >= since)
        if faq_id is not None:
            query = query.where(audit_t.c.subject == faq_id)
        if actor is not None:
            query = query.where(audit_t.c.actor == actor)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(audit_t.c.id.desc()).limit(limit)).all()
        return [AuditRow(r.id, r.kb, utc(r.created_at), r.actor, r.role, r.source, r.request_id, r.action,
                         r.subject, r.before, r.after) for r in rows]

    def prune(self, before: datetime) -> int:
        """The retention prune: this KB's rows older than `before` removed; returns how many."""
        with self.engine.begin() as conn:
            return conn.execute(delete(audit_t).where(audit_t.c.kb == self.kb,
                                                      audit_t.c.created_at < before)).rowcount or 0
