"""The review queues of one KB, shared by the console, the admin API and the CLI:

- **mined phrasings** (`faq kb mine`): a query users asked that means an existing FAQ. Accepting adds it
  to that FAQ's phrasings (`KbStore.add_questions`), rejecting dismisses it;
- **unanswered clusters**: queries nothing answered, grouped. Opening one drafts a new FAQ with the
  queries as its phrasings; dismissing says it needs none (out of scope, say);
- **lint findings** (`faq kb lint`): FAQs whose answer looks wrong. Dismissing one needs a reason and
  lasts until the answer changes.

A dismissal is stored (app/store/reviews.py) under a key naming the item, so every caller stops
proposing it. Accepting re-checks that the item is still proposed now: what was dismissed, already
added, or is no longer supported by the log is refused, as the CLI would never have proposed it.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.curation.mining import mine_report
from app.store import FaqOut, FaqStore
from app.store.reviews import MAX_REASON_CHARS, lint_key
from kb.mining import content_words
from kb.records import field_problem


#: unanswered queries whose most frequent wordings are this close (encoder cosine) are one cluster in the
#: service's queues: exact word keys alone almost never group what users ask (docs/results.md)
CLUSTER_COSINE = 0.8


class NotProposed(LookupError):
    """The item is not (or no longer) in its queue."""


@dataclass(frozen=True)
class Accepted:
    faq: FaqOut
    added: int


def reason_problem(reason: str | None, required: bool) -> str | None:
    """Why a dismissal's reason cannot be stored, or None."""
    text = (reason or "").strip()
    if not text:
        return "a reason is needed: say why this finding is not a problem" if required else None
    return field_problem(text, MAX_REASON_CHARS)


def queues(store: FaqStore, since: datetime | None = None, embed: Any = None,
           cosine: float | None = None) -> dict[str, Any]:
    """The mined phrasings and unanswered clusters now proposed for the KB (dismissed ones left out).
    With `embed` (texts -> unit vectors), unanswered groups within `cosine` of each other are merged."""
    return mine_report(store, since=since, embed=embed, cosine=cosine)


def find(report: dict[str, Any], queue: str, key: str) -> dict[str, Any] | None:
    rows = report["phrasings"] if queue == "phrasing" else report["clusters"]
    return next((r for r in rows if r["review_key"] == key), None)


def accept_phrasing(store: FaqStore, key: str, since: datetime | None = None) -> Accepted:
    """Add the mined phrasing named `key` to its FAQ. Raises NotProposed when it is not proposed now,
    FaqNotFound / KbValidationError as the store does."""
    item = find(queues(store, since), "phrasing", key)  # phrasings do not depend on the clusters' grouping
    if item is None:
        raise NotProposed("this phrasing is no longer proposed: it was added, dismissed, or its queries are gone "
                          "from the log")
    faq, added = store.faqs.add_questions(item["faq_id"], [item["question"]], action="review.accept")
    return Accepted(faq, added)


def dismiss(store: FaqStore, queue: str, key: str, subject: str, reason: str | None, by: str | None) -> bool:
    """Dismiss an item; False when it was already dismissed. Raises ValueError for a bad reason."""
    problem = reason_problem(reason, required=queue == "lint")
    if problem is not None:
        raise ValueError(f"reason: {problem}")
    return store.reviews.dismiss(queue, key, subject, (reason or "").strip() or None, by)


def hide_dismissed_lint(store: FaqStore, report: Any) -> int:
    """Unflag the lint findings an owner dismissed (kb/lint.py LintReport, in place; each keeps the
    reason in `dismissed`); returns how many."""
    reasons = {d.key: d.reason or "" for d in store.reviews.dismissed("lint")}
    hidden = 0
    for finding in report.faqs:
        reason = reasons.get(lint_key(finding.faq_id, finding.answer))
        if reason is not None and finding.flagged:
            finding.flagged = False
            finding.dismissed = reason
            hidden += 1
    return hidden


def draft_id(queries: list[str]) -> str:
    """An id for an FAQ drafted from a cluster (most frequent query first), for the editor to change."""
    words = [w for w in content_words(queries[0]) if re.fullmatch(r"[a-z0-9]+", w)] if queries else []
    return "-".join(words[:5])[:60] or "new-faq"


class EmbedMemo:
    """`encode` remembering the vectors of texts it has seen (at most `limit`, the oldest forgotten first):
    the review queues group the same unanswered queries on every page view."""

    def __init__(self, encode: Any, limit: int = 50_000) -> None:
        self.encode = encode
        self.limit = limit
        self._vectors: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> Any:
        import numpy as np

        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            fresh = np.asarray(self.encode(missing), dtype=np.float32)
            with self._lock:
                for text, vector in zip(missing, fresh):
                    self._vectors[text] = vector
                while len(self._vectors) > self.limit:
                    self._vectors.pop(next(iter(self._vectors)))
        with self._lock:
            found = [self._vectors.get(t) for t in texts]
        if any(v is None for v in found):  # forgotten meanwhile (a flood of new texts): encode them again
            return np.asarray(self.encode(texts), dtype=np.float32)
        return np.stack(found) if found else np.zeros((0, 0), dtype=np.float32)
