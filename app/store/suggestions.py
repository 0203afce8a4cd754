"""Phrasings other products suggested for one KB's FAQs (QnA Maker's SuggestedQuestions, Azure's active
learning), imported as proposals of the phrasing review queue (app/curation/mining.py lists them beside the mined
ones), never as phrasings. Each is named by the queue's key, so accepting adds it as any mined phrasing and
dismissing hides it; once it is a phrasing, or its FAQ is gone, it is no longer proposed."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select

from app.db.models import utcnow
from app.store.base import StorePart, storable, suggestions_t
from app.store.reviews import phrasing_key
from kb.records import MAX_FAQ_ID_CHARS, MAX_QUESTION_CHARS


@dataclass(frozen=True)
class Suggestion:
    faq_id: str
    question: str
    origin: str
    key: str


class SuggestionStore(StorePart):
    def add(self, pairs: Iterable[tuple[str, str]], origin: str, dry_run: bool = False) -> int:
        """Keep (faq_id, question) pairs as suggestions; returns how many were new. Pairs already kept
        (same FAQ, same phrasing up to case and spacing) are left as they are. Raises KbNotFound."""
        rows: dict[str, dict] = {}
        for faq_id, question in pairs:
            question = " ".join(question.split())
            if not question or len(question) > MAX_QUESTION_CHARS or len(faq_id) > MAX_FAQ_ID_CHARS \
                    or not storable(faq_id, question):
                continue
            key = phrasing_key(faq_id, question)
            rows.setdefault(key, {"kb": self.kb, "key": key, "faq_id": faq_id, "question": question,
                                  "origin": origin[:32], "created_at": utcnow()})
        if not rows:
            return 0
        with self.locked_write() as conn:
            known = set(conn.execute(select(suggestions_t.c.key).where(suggestions_t.c.kb == self.kb)).scalars())
            new = [r for k, r in rows.items() if k not in known]
            if new and not dry_run:
                conn.execute(suggestions_t.insert(), new)
            elif dry_run:
                conn.rollback()
        return len(new)

    def all(self) -> list[Suggestion]:
        """Every suggestion kept for the KB, oldest first (accepted, dismissed and stale ones included:
        the review queue leaves those out)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(suggestions_t).where(suggestions_t.c.kb == self.kb)
                                .order_by(suggestions_t.c.id)).all()
        return [Suggestion(r.faq_id, r.question, r.origin, r.key) for r in rows]
