"""A KB's publications (`publications`): the draft's content as it was published, so a `reviewed` KB's
production answers from it while the draft is edited, and an earlier one can be served again.

`content` is a snapshot of everything an answer is made of: each FAQ with its phrasings and their ids (so
a build that holds them is reused as it is, index/retriever.py `with_kb`), its answer in every language,
metadata, tags, follow-ups and context-only flag, and the KB's small-talk answers.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select

from app.db.models import Publication, utcnow
from app.store.base import StorePart, utc
from app.store.faqs import KbSnapshot, VariantRow
from kb.records import FaqDetails

publications_t = Publication.__table__


def snapshot_content(snapshot: KbSnapshot, small_talk_answers: dict | None = None) -> dict[str, Any]:
    """A KB snapshot as a publication's `content` (JSON)."""
    phrasings: dict[str, list[list]] = {}
    for v in snapshot.variants:
        phrasings.setdefault(v.faq_id, []).append([v.variant_id, v.question])
    faqs = {}
    for faq_id, (answer, tags) in sorted(snapshot.faqs.items()):
        details = (snapshot.details.get(faq_id) or FaqDetails()).as_dict()
        faqs[faq_id] = {"answer": answer, "tags": list(tags), **details, "phrasings": phrasings.get(faq_id, [])}
    return {"faqs": faqs, "small_talk_answers": small_talk_answers or None}


def content_snapshot(content: dict[str, Any], revision: int) -> KbSnapshot:
    """A publication's `content` as the KbSnapshot a build serves (`Retriever.with_kb`)."""
    variants, faqs, details = [], {}, {}
    for faq_id, faq in content.get("faqs", {}).items():
        faqs[faq_id] = (faq["answer"], list(faq.get("tags") or []))
        details[faq_id] = FaqDetails(metadata=dict(faq.get("metadata") or {}), source=faq.get("source"),
                                     follow_ups=[dict(f) for f in faq.get("follow_ups") or []],
                                     context_only=bool(faq.get("context_only")),
                                     answers=dict(faq.get("answers") or {}))
        variants += [VariantRow(int(vid), faq_id, question) for vid, question in faq.get("phrasings") or []]
    variants.sort(key=lambda v: v.variant_id)
    return KbSnapshot(revision=revision, variants=variants, faqs=faqs, details=details)


@dataclass(frozen=True)
class PublicationRow:
    id: int  # the KB's own number: 1, 2, ... in each KB
    kb: str
    kind: str
    restored: int | None
    revision: int
    actor: str | None
    note: str | None
    summary: dict
    created_at: datetime
    content: dict | None = None  # read only when asked for (`get`, `latest`)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "restored": self.restored, "revision": self.revision,
                "actor": self.actor, "note": self.note, "summary": self.summary,
                "created_at": self.created_at.isoformat()}


def _row(r: Any, with_content: bool) -> PublicationRow:
    return PublicationRow(r.number, r.kb, r.kind, r.restored, r.revision, r.actor, r.note, r.summary,
                          utc(r.created_at), r.content if with_content else None)


class PublicationStore(StorePart):
    _listed = (publications_t.c.number, publications_t.c.kb, publications_t.c.kind, publications_t.c.restored,
               publications_t.c.revision, publications_t.c.actor, publications_t.c.note, publications_t.c.summary,
               publications_t.c.created_at)

    def add(self, content: dict, revision: int, summary: dict, *, kind: str = "publish", restored: int | None = None,
            actor: str | None = None, note: str | None = None, expected_latest: int | None = None,
            on_added: Any = None) -> PublicationRow | None:
        """Append a publication; None when another was added since `expected_latest` (the latest id the caller
        compared against: two publishes at once, the later one loses). `on_added(conn, row)` runs in the same
        transaction (the audit row)."""
        with self.locked_write() as conn:
            latest = conn.execute(select(func.max(publications_t.c.number))
                                  .where(publications_t.c.kb == self.kb)).scalar()
            if latest != expected_latest:
                conn.rollback()
                return None
            created, number = utcnow(), (latest or 0) + 1
            conn.execute(insert(publications_t).values(
                kb=self.kb, number=number, kind=kind, restored=restored, revision=revision, actor=actor, note=note,
                summary=summary, content=content, created_at=created))
            row = PublicationRow(number, self.kb, kind, restored, revision, actor, note, summary, created, content)
            if on_added is not None:
                on_added(conn, row)
        return row

    def list(self, limit: int = 200) -> list[PublicationRow]:
        """Newest first, without their content."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(*self._listed).where(publications_t.c.kb == self.kb)
                                .order_by(publications_t.c.number.desc()).limit(limit)).all()
        return [_row(r, False) for r in rows]

    def get(self, publication_id: int) -> PublicationRow | None:
        """This KB's publication `publication_id` with its content, else None (another KB's is not found)."""
        with self.engine.connect() as conn:
            r = conn.execute(select(publications_t).where(publications_t.c.kb == self.kb,
                                                          publications_t.c.number == publication_id)).first()
        return None if r is None else _row(r, True)

    def latest(self) -> PublicationRow | None:
        with self.engine.connect() as conn:
            r = conn.execute(select(publications_t).where(publications_t.c.kb == self.kb)
                             .order_by(publications_t.c.number.desc()).limit(1)).first()
        return None if r is None else _row(r, True)

    def latest_id(self) -> int | None:
        with self.engine.connect() as conn:
            return conn.execute(select(func.max(publications_t.c.number))
                                .where(publications_t.c.kb == self.kb)).scalar()
