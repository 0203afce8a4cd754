"""The audit log: one row per change to a KB, appended and never updated (`audit_log`).

Who made a change is set once at the edge, for the whole request or command (`acting_as`): the HTTP layer
with the token's name and role, the console with its signed-in user, the CLI with the operator. The store's
writes record their change with it (`AuditStore.record`), inside the transaction that makes the change when
they have one, so a change and its row are committed together. Rows are removed only by `prune` (per KB)
and `prune_every_kb` (`faq db prune --audit-days N`).

What only the edge knows about a change rides along the same way: an import's file name and digest
(`importing`), read by the store's import when it records its row. The actions are ACTIONS; which change
records which, and what its before and after hold, is docs/operations.md's "Audit log".
"""
from __future__ import annotations

import contextvars
import getpass
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select

from app.db.models import AuditEntry, utcnow
from app.store.base import StorePart, utc

audit_t = AuditEntry.__table__

#: where a change came from
SOURCES = ("api", "cli", "console", "compat")

#: the actions of one FAQ's changes, whose subject is its faq_id (what `read(faq_id=...)` keeps)
FAQ_ACTIONS = ("faq.create", "faq.update", "faq.delete", "review.accept")
#: every action recorded: by the store, app/release/ and the admin API's reload; "publish" and "rollback" are
#: app/release/publishing.py's
ACTIONS = (*FAQ_ACTIONS, "kb.import", "kb.settings", "kb.create", "kb.delete", "token.create", "token.revoke",
           "index.build", "index.activate", "index.reload", "review.dismiss", "review.restore", "small_talk.update",
           "publish", "rollback")


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


_import: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("faq_import", default=None)


@contextmanager
def importing(file: str | None, sha256: str | None, **details: Any) -> Iterator[None]:
    """The file the imports inside come from, for their `kb.import` row (the store sees only records)."""
    token = _import.set({"file": file, "sha256": sha256, **details})
    try:
        yield
    finally:
        _import.reset(token)


def import_details() -> dict[str, Any]:
    """What `importing` says of the import running now ({"file": None, "sha256": None} outside one)."""
    return dict(_import.get() or {"file": None, "sha256": None})


def jsonable(value: Any) -> Any:
    """`value` as the JSON column stores it: datetimes as ISO text, tuples as lists."""
    if value is None:
        return None
    return json.loads(json.dumps(value, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)))


def faq_state(faq: Any) -> dict[str, Any] | None:
    """An FAQ (app/store/faqs.py FaqOut) as a row's before or after: its content, not its timestamps (the row
    has its own)."""
    if faq is None:
        return None
    return {"faq_id": faq.faq_id, "answer": faq.answer, "questions": list(faq.questions), "tags": list(faq.tags),
            "metadata": dict(faq.metadata), "source": faq.source, "follow_ups": [dict(f) for f in faq.follow_ups],
            "context_only": faq.context_only, "answers": dict(faq.answers)}


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


def _short(value: Any, width: int = 60) -> str:
    text = "–" if value is None else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[:width - 1] + "…"


def change_summary(before: Any, after: Any, width: int = 300) -> str:
    """A row's before -> after in one line, for people (the console's History, `faq kb audit`): of two objects
    only the fields that differ, `field: old → new` (a field one side lacks: `field: value`, left out when it is
    empty or zero); else the whole of each side."""
    if isinstance(before, dict) and isinstance(after, dict):
        parts = []
        for k in dict.fromkeys([*before, *after]):
            if k in before and k in after:
                if before[k] != after[k]:
                    parts.append(f"{k}: {_short(before[k])} → {_short(after[k])}")
            elif (after if k in after else before)[k] not in (None, 0, False, "", [], {}):
                parts.append(f"{k}: {_short(after[k])}" if k in after else f"{k}: {_short(before[k])} → –")
        text = "; ".join(parts) or "no difference"
    else:
        text = f"{_short(before, width // 2)} → {_short(after, width // 2)}"
    return text if len(text) <= width else text[:width - 1] + "…"


class AuditStore(StorePart):
    def record(self, action: str, subject: str | None = None, before: Any = None, after: Any = None, *,
               conn: Connection | None = None, actor: Actor | None = None) -> None:
        """Append one row for a change of this KB, in `conn`'s transaction when given (the change's own)."""
        who = actor or current_actor()
        row = {"kb": self.kb, "created_at": utcnow(), "actor": who.name[:200], "role": who.role[:16],
               "source": who.source[:16], "request_id": (who.request_id or None) and who.request_id[:64],
               "action": action[:32], "subject": None if subject is None else str(subject)[:200],
               "before": jsonable(before), "after": jsonable(after)}
        if conn is not None:
            conn.execute(insert(audit_t).values(**row))
            return
        with self.engine.begin() as own:
            own.execute(insert(audit_t).values(**row))

    def read(self, since: datetime | None = None, faq_id: str | None = None, actor: str | None = None,
             limit: int = 1000) -> list[AuditRow]:
        """This KB's rows, newest first; `faq_id`: the rows of that FAQ's changes (FAQ_ACTIONS), whatever other
        rows name a subject of the same text."""
        query = select(audit_t).where(audit_t.c.kb == self.kb)
        if since is not None:
            query = query.where(audit_t.c.created_at >= utc(since))  # a naive time is UTC, as stored
        if faq_id is not None:
            query = query.where(audit_t.c.subject == faq_id, audit_t.c.action.in_(FAQ_ACTIONS))
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


def prune_every_kb(engine: Engine, before: datetime, dry_run: bool = False) -> int:
    """The retention prune of every KB's rows, those of deleted KBs included: rows older than `before` removed
    (`dry_run`: only counted); returns how many."""
    old = audit_t.c.created_at < before
    if dry_run:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(audit_t).where(old)).scalar() or 0)
    with engine.begin() as conn:
        return conn.execute(delete(audit_t).where(old)).rowcount or 0
