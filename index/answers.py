"""Answer evidence: a FAQ's answer text as a second description of what the FAQ covers.

Most real knowledge bases have one or two phrasings per FAQ, and users describe their situation in
words the phrasings do not use; the answer usually does use them. A build therefore encodes every
FAQ's answer with the same encoder (`answers.npy`, one row per FAQ, next to the phrasing vectors), and
the matcher scores a candidate FAQ by

    s = (1 - w) * phrasing cosine + w * answer cosine          (w = FAQ_ANSWER_WEIGHT)

where the phrasing cosine is the best phrasing's (or the pooled one, index/pooling.py). FAQs are also
recalled through their answers, so a FAQ whose only phrasing is far from the query's wording can still
be found. The build's calibration is fitted on `s` for each weight of `WEIGHT_GRID` (index/calibration.py),
so a threshold of 0.5 keeps its meaning whatever weight is served.

A KB without real answers (datasets converted from intent labels carry placeholders such as
"[intent: balance]") gets no answer segment: `answer_policy` turns the evidence off for the build and
says why, and the matcher then scores by phrasings alone, exactly as without this module.

Cost: the answer segment is searched exactly (one (n_faqs, dim) matrix product per query batch), about
1 ms per query for 10k FAQs at dim 768 on one core; KBs of 100k+ FAQs would want it in Annoy instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from kb.records import is_placeholder

#: weights the build calibrates for; a served weight uses the nearest one (settings restrict it to these)
WEIGHT_GRID: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(19))  # 0.0 .. 0.9
#: FAQs recalled through their answers per query, at least (the matcher asks for top_k when more)
ANSWER_RECALL = 5
#: a KB uses answer evidence when at least this share of its FAQs has a real answer
MIN_REAL_SHARE = 0.5


@dataclass(frozen=True)
class AnswerPolicy:
    """Whether a build uses answer evidence, and which FAQs' answers it encodes."""

    used: bool
    faq_ids: list[str]  # FAQs whose answers are encoded (empty when not used)
    n_faqs: int
    n_placeholder: int
    reason: str

    def report(self) -> dict:
        return {"used": self.used, "n_faqs": self.n_faqs, "n_encoded": len(self.faq_ids),
                "n_placeholder": self.n_placeholder, "reason": self.reason}


def answer_policy(faqs: Mapping[str, tuple[str, list[str]]]) -> AnswerPolicy:
    """faq_id -> (answer, tags) of a KB snapshot -> which answers to encode. FAQs with a placeholder
    answer in a KB that uses evidence are scored by their phrasings alone."""
    real = sorted(f for f, (answer, _) in faqs.items() if not is_placeholder(answer))
    n, n_placeholder = len(faqs), len(faqs) - len(real)
    if n and len(real) >= MIN_REAL_SHARE * n:
        reason = f"{len(real)} of {n} FAQs have a real answer: answers are matching evidence"
        return AnswerPolicy(True, real, n, n_placeholder, reason)
    reason = (f"only {len(real)} of {n} FAQs have a real answer (the others are empty or placeholders such as "
              f"'[intent: NAME]'): answer evidence is off for this build")
    return AnswerPolicy(False, [], n, n_placeholder, reason)


def nearest_weight(weight: float) -> float:
    """The calibrated weight closest to `weight`."""
    return min(WEIGHT_GRID, key=lambda g: abs(g - weight))


class AnswerVectors:
    """One unit vector per FAQ answer, searched exactly. Immutable once built (shared between threads)."""

    def __init__(self, faq_ids: Sequence[str], vectors: np.ndarray, texts: Sequence[str] | None = None):
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(faq_ids):
            raise ValueError(f"answer vectors: expected ({len(faq_ids)}, dim), got {vectors.shape}")
        self.faq_ids = list(faq_ids)
        self.vectors = vectors  # (n_faqs, dim)
        self.texts = list(texts) if texts is not None else None  # the encoded answers, to diff a newer KB against
        self.row_of = {f: i for i, f in enumerate(self.faq_ids)}

    def __len__(self) -> int:
        return len(self.faq_ids)

    def cosines(self, vecs: np.ndarray) -> np.ndarray:
        """(q, dim) unit query vectors -> (q, n_faqs) cosines with every answer."""
        return np.asarray(vecs, dtype=np.float32) @ self.vectors.T

    def mask(self, faq_ids: frozenset[str]) -> np.ndarray:
        """(n_faqs,) bool: the rows of `faq_ids` (a filter's FAQs), kept for the last few sets asked."""
        cache = self.__dict__.setdefault("_masks", {})
        found = cache.get(faq_ids)
        if found is None:
            if len(cache) >= 16:
                cache.pop(next(iter(cache)))
            found = cache[faq_ids] = np.fromiter((f in faq_ids for f in self.faq_ids), dtype=bool,
                                                  count=len(self.faq_ids))
        return found

    def top(self, cosines_row: np.ndarray, k: int) -> list[str]:
        """faq_ids of the `k` best answers in one row of `cosines` (best first)."""
        k = min(k, len(self.faq_ids))
        if k <= 0:
            return []
        part = np.argpartition(-cosines_row, k - 1)[:k]
        return [self.faq_ids[i] for i in part[np.argsort(-cosines_row[part], kind="stable")].tolist()]


def combine(phrasing_cos: float, answer_cos: float | None, weight: float) -> float:
    """The FAQ's first-stage score; a FAQ without an encoded answer keeps its phrasing cosine."""
    if answer_cos is None or weight <= 0.0:
        return phrasing_cos
    return (1.0 - weight) * phrasing_cos + weight * answer_cos
