"""The catalogue of knowledge bases (`kbs`): which exist, their stored settings, creating and deleting
them, and their access tokens (`kb_tokens`).

Deleting a KB deletes its FAQs, phrasings, build records and tokens (foreign keys, ON DELETE CASCADE)
and its query-log rows, in one transaction; its index folders are the caller's (cli/kb.py).
A token is 32 random bytes shown once; only its SHA-256 is stored, so a database dump reveals none.
"""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.db.models import utcnow
from app.store.audit import AuditStore
from app.store.base import KbNotFound, builds_t, dismissals_t, faqs_t, kbs_t, qlog_t, tokens_t, utc, variants_t
from kb.records import DEFAULT_KB, kb_name_problem

#: people's roles, each allowed what the ones before it are and more (app/api/roles.py says what each may do)
ROLES: tuple[str, ...] = ("viewer", "editor", "publisher", "admin")
#: the match-only key bots send to /match and /feedback: no role at all
READ_KIND = "read"
TokenKind = Literal["viewer", "editor", "publisher", "admin", "read"]
TOKEN_KINDS: tuple[str, ...] = (*ROLES, READ_KIND)
#: what every token starts with, so that a leaked one is recognisable (secret scanners, logs)
TOKEN_PREFIX = "faqkb_"


class KbExists(Exception):
    """create() of a KB name that is taken."""


@dataclass(frozen=True)
class KbInfo:
    name: str
    revision: int
    settings: dict[str, Any]
    faqs: int
    variants: int
    created_at: datetime

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["created_at"] = self.created_at.isoformat()
        return out


@dataclass(frozen=True)
class TokenInfo:
    id: int
    kb: str
    kind: str
    label: str | None
    created_at: datetime
    revoked_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["created_at"] = self.created_at.isoformat()
        out["revoked_at"] = self.revoked_at.isoformat() if self.revoked_at else None
        return out


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _check_name(name: str) -> None:
    problem = kb_name_problem(name)
    if problem:
        raise ValueError(problem)


class KbCatalog:
    def __init__(self, engine: Engine):
        self.engine = engine

    # -- KBs -----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(kbs_t.c.name).order_by(kbs_t.c.name)).scalars())

    def exists(self, name: str) -> bool:
        if kb_name_problem(name):
            return False
        with self.engine.connect() as conn:
            return conn.execute(select(kbs_t.c.name).where(kbs_t.c.name == name)).first() is not None

    def list(self) -> list[KbInfo]:
        """Every KB with its size, by name."""
        with self.engine.connect() as conn:
            faqs = dict(conn.execute(select(faqs_t.c.kb, func.count()).group_by(faqs_t.c.kb)).all())
            variants = dict(conn.execute(select(variants_t.c.kb, func.count()).group_by(variants_t.c.kb)).all())
            rows = conn.execute(select(kbs_t).order_by(kbs_t.c.name)).all()
        return [KbInfo(name=r.name, revision=int(r.revision), settings=dict(r.settings or {}),
                       faqs=int(faqs.get(r.name, 0)), variants=int(variants.get(r.name, 0)),
                       created_at=utc(r.created_at)) for r in rows]

    def create(self, name: str, settings: dict[str, Any] | None = None) -> None:
        """Raises ValueError for a malformed name, KbExists when it is taken."""
        _check_name(name)
        now = utcnow()
        try:
            with self.engine.begin() as conn:
                if conn.execute(select(kbs_t.c.name).where(kbs_t.c.name == name)).first() is not None:
                    raise KbExists(f"KB {name!r} already exists")
                conn.execute(insert(kbs_t).values(name=name, revision=0, settings=dict(settings or {}),
                                                  created_at=now, updated_at=now))
                AuditStore(self.engine, name).record("kb.create", name, None, {"settings": dict(settings or {})},
                                                     conn=conn)
        except IntegrityError as exc:  # created concurrently
            raise KbExists(f"KB {name!r} already exists") from exc

    def ensure(self, name: str) -> bool:
        """Create the KB when it does not exist; True when it was created."""
        try:
            self.create(name)
            return True
        except KbExists:
            return False

    def settings(self, name: str) -> dict[str, Any]:
        """The KB's stored settings (app/settings.py KbSettings fields); raises KbNotFound."""
        if kb_name_problem(name):
            raise KbNotFound(name)
        with self.engine.connect() as conn:
            row = conn.execute(select(kbs_t.c.settings).where(kbs_t.c.name == name)).first()
        if row is None:
            raise KbNotFound(name)
        return dict(row[0] or {})

    def all_settings(self) -> dict[str, dict[str, Any]]:
        """Every KB's stored settings, by name (what the service polls to follow changes)."""
        with self.engine.connect() as conn:
            return {name: dict(settings or {}) for name, settings in conn.execute(select(kbs_t.c.name, kbs_t.c.settings))}

    def set_settings(self, name: str, settings: dict[str, Any], action: str = "kb.settings") -> None:
        """Replace the KB's stored settings (validated by the caller); raises KbNotFound. `action`: the audit
        row's, when they differ (small_talk.update for the console's Small talk page)."""
        with self.engine.begin() as conn:
            before = conn.execute(select(kbs_t.c.settings).where(kbs_t.c.name == name)).first()
            result = conn.execute(update(kbs_t).where(kbs_t.c.name == name)
                                  .values(settings=dict(settings), updated_at=utcnow()))
            if result.rowcount == 0 or before is None:
                raise KbNotFound(name)
            if dict(before[0] or {}) != dict(settings):
                AuditStore(self.engine, name).record(action, name, dict(before[0] or {}), dict(settings), conn=conn)

    def delete(self, name: str) -> dict[str, int]:
        """Delete the KB and everything stored of it; returns what was deleted. Raises KbNotFound, and
        ValueError for the default KB (today's routes serve it: empty it instead)."""
        if name == DEFAULT_KB:
            raise ValueError(f"the {DEFAULT_KB!r} KB cannot be deleted (the routes without /kbs/ serve it); "
                             f"empty it with `faq kb import EMPTY_FILE --sync`")
        if kb_name_problem(name):
            raise KbNotFound(name)
        with self.engine.begin() as conn:
            kb_row = conn.execute(select(kbs_t.c.revision, kbs_t.c.settings).where(kbs_t.c.name == name)).first()
            counts = {
                "faqs": conn.execute(select(func.count()).select_from(faqs_t).where(faqs_t.c.kb == name)).scalar(),
                "variants": conn.execute(select(func.count()).select_from(variants_t)
                                         .where(variants_t.c.kb == name)).scalar(),
                "builds": conn.execute(select(func.count()).select_from(builds_t)
                                       .where(builds_t.c.kb == name)).scalar(),
                "tokens": conn.execute(select(func.count()).select_from(tokens_t)
                                       .where(tokens_t.c.kb == name)).scalar(),
            }
            counts["query_log"] = conn.execute(delete(qlog_t).where(qlog_t.c.kb == name)).rowcount
            # phrasings, FAQs, builds and tokens go with the KB's row (ON DELETE CASCADE)
            conn.execute(delete(variants_t).where(variants_t.c.kb == name))
            conn.execute(delete(dismissals_t).where(dismissals_t.c.kb == name))
            if kb_row is None or conn.execute(delete(kbs_t).where(kbs_t.c.name == name)).rowcount == 0:
                conn.rollback()
                raise KbNotFound(name)
            done = {k: int(v or 0) for k, v in counts.items()}
            # audit_log has no key to kbs: this row, and the KB's history before it, outlive the KB
            AuditStore(self.engine, name).record(
                "kb.delete", name, {"revision": int(kb_row.revision), "settings": dict(kb_row.settings or {}), **done},
                None, conn=conn)
        return done

    # -- tokens ----------------------------------------------------------------------------------
    def issue_token(self, kb: str, kind: TokenKind = "admin", label: str | None = None) -> tuple[int, str]:
        """A new token for `kb` alone, of role `kind` (or the read key) named `label`: (its id, the token). The
        token is not stored and cannot be shown again."""
        if kind not in TOKEN_KINDS:
            raise ValueError(f"token kind must be one of {', '.join(TOKEN_KINDS)}, got {kind!r}")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self.engine.begin() as conn:
            if conn.execute(select(kbs_t.c.name).where(kbs_t.c.name == kb)).first() is None:
                raise KbNotFound(kb)
            result = conn.execute(insert(tokens_t).values(kb=kb, kind=kind, token_sha256=token_digest(token),
                                                          label=label, created_at=utcnow()))
            token_id = int(result.inserted_primary_key[0])
            # the token's id, role and name: never the token, nor its digest
            AuditStore(self.engine, kb).record("token.create", str(token_id), None,
                                               {"id": token_id, "role": kind, "name": label}, conn=conn)
        return token_id, token

    def verify_token(self, token: str) -> TokenInfo | None:
        """The live (not revoked) token's KB and kind, or None. Looked up by its digest: the comparison
        is the database's index lookup of a hash, which reveals nothing of the token."""
        if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        with self.engine.connect() as conn:
            row = conn.execute(select(tokens_t).where(tokens_t.c.token_sha256 == token_digest(token),
                                                      tokens_t.c.revoked_at.is_(None))).first()
        return _token_info(row) if row is not None else None

    def live_token(self, token_id: int) -> TokenInfo | None:
        """Token `token_id` while it is live (not revoked), else None."""
        with self.engine.connect() as conn:
            row = conn.execute(select(tokens_t).where(tokens_t.c.id == int(token_id),
                                                      tokens_t.c.revoked_at.is_(None))).first()
        return _token_info(row) if row is not None else None

    def tokens(self, kb: str) -> list[TokenInfo]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(tokens_t).where(tokens_t.c.kb == kb).order_by(tokens_t.c.id)).all()
        return [_token_info(r) for r in rows]

    def revoke_token(self, kb: str, token_id: int) -> bool:
        """Revoke `kb`'s token `token_id`; False when the KB has no such live token."""
        live = (tokens_t.c.kb == kb, tokens_t.c.id == int(token_id), tokens_t.c.revoked_at.is_(None))
        with self.engine.begin() as conn:
            found = conn.execute(select(tokens_t.c.kind, tokens_t.c.label).where(*live)).first()
            now = utcnow()
            if found is None or conn.execute(update(tokens_t).where(*live).values(revoked_at=now)).rowcount == 0:
                return False
            state = {"id": int(token_id), "role": found.kind, "name": found.label}
            AuditStore(self.engine, kb).record("token.revoke", str(token_id), {**state, "revoked_at": None},
                                               {**state, "revoked_at": now}, conn=conn)
            return True


def _token_info(row: Any) -> TokenInfo:
    return TokenInfo(id=int(row.id), kb=row.kb, kind=row.kind, label=row.label, created_at=utc(row.created_at),
                     revoked_at=utc(row.revoked_at))
