"""Candidate generation: query vectors -> the FAQs worth answering with, each with its calibrated
first-stage score.

- ANN recall (`Retriever.search`: Annoy + the delta segment, minus tombstones), searched deeper when the
  first depth covers too few distinct FAQs (`deepen`);
- lexical recall (`lexical_hits`): BM25 top-K FAQs from the build's lexical index, their phrasings scored
  with the same stored vectors, so both recall stages feed the same grouping;
- grouping and pooling (`group_hits`): variant hits -> one entry per FAQ, its cosine the best phrasing's
  or the mean of its best m (index/pooling.py), its score the build's calibration of that cosine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from index.calibration import Calibration
from index.pooling import pooled_cosine

#: retrieval depth in variants for a requested number of FAQs
MIN_RETRIEVE_VARIANTS = 20
RETRIEVE_FACTOR = 4
#: deepest re-search when the first depth held fewer than top_k distinct FAQs
MAX_RETRIEVE_VARIANTS = 4096


def retrieve_depth(top_k: int) -> int:
    """How many variants to fetch so that grouping still leaves `top_k` distinct FAQs."""
    return max(RETRIEVE_FACTOR * top_k, MIN_RETRIEVE_VARIANTS)


class RetrieverLike(Protocol):
    """The part of `index.retriever.Retriever` the matcher uses."""

    version: str
    manifest: dict
    answers: dict[str, tuple[str, list[str]]]

    def search(self, vecs: np.ndarray, k: int) -> list[list[Any]]: ...


@dataclass(frozen=True)
class FaqMatch:
    """One FAQ in a result list: its best-matching variant and the calibrated score."""

    faq_id: str
    question: str  # the variant that matched best
    answer: str
    score: float  # calibrated probability 0..1
    cosine: float  # the FAQ's cosine: its best phrasing's, or the pooled one (`pool_variants`); kept when a re-ranker sets `score`


def deepen(retriever: RetrieverLike, vecs: np.ndarray, top_ks: Sequence[int], hits: list, k: int) -> list:
    """Re-search, deeper, the queries whose `k` variants cover fewer than `top_k` FAQs.

    A FAQ with many phrasings (CLINC150 has 100 per intent) can fill the whole first depth on its
    own; without this a `top_k=5` request could come back with a single FAQ.
    """
    hits = list(hits)

    def short(i: int, depth: int) -> bool:
        return len(hits[i]) >= depth and len({h.faq_id for h in hits[i]}) < top_ks[i]

    depth = k
    pending = [i for i in range(len(top_ks)) if short(i, depth)]
    while pending and depth < MAX_RETRIEVE_VARIANTS:
        depth = min(depth * 4, MAX_RETRIEVE_VARIANTS)
        for i, deeper in zip(pending, retriever.search(vecs[pending], depth)):
            hits[i] = deeper
        pending = [i for i in pending if short(i, depth)]
    return hits


def variant_counts(retriever: Any) -> dict[str, int] | None:
    """faq_id -> live phrasings, from a retriever that knows them (`Retriever.variant_counts`)."""
    return getattr(retriever, "variant_counts", None)


def group_hits(
    hits: Sequence[Any], answers: dict[str, tuple[str, list[str]]], calibration: Calibration, top_k: int,
    *, pool: int = 1, counts: dict[str, int] | None = None,
) -> list[FaqMatch]:
    """Variant hits (best first) -> at most `top_k` FAQs, one per faq_id with its best variant.

    The FAQ's cosine is its best variant's (`pool` 1), or the mean of its best `min(pool, n)` phrasings'
    (index/pooling.py), n = its number of phrasings (`counts`, else the hits seen).
    Hits of FAQs missing from `answers` are skipped: the FAQ was deleted after the retriever's
    snapshot and must not be served (the tombstones normally hide them already).
    """
    per_faq: dict[str, list[Any]] = {}
    for hit in hits:
        if hit.faq_id in answers:
            per_faq.setdefault(hit.faq_id, []).append(hit)
    floor = min((h.cosine for h in hits), default=0.0)

    def pooled(faq_hits: list[Any]) -> float:
        n = (counts or {}).get(faq_hits[0].faq_id, 0)
        return pooled_cosine([h.cosine for h in faq_hits], n, pool, floor)

    scored = [(pooled(faq_hits), max(faq_hits, key=lambda h: h.cosine)) for faq_hits in per_faq.values()]
    scored.sort(key=lambda sh: (-sh[0], sh[1].faq_id))
    return [
        FaqMatch(
            faq_id=h.faq_id,
            question=h.question,
            answer=answers[h.faq_id][0],
            score=calibration.probability(cos),
            cosine=cos,
        )
        for cos, h in scored[:top_k]
    ]


def lexical_hits(lexical: Any, retriever: Any, queries: Sequence[str], vecs: np.ndarray, k: int) -> list[list[Any]]:
    """BM25 top-`k` FAQs per query -> their variant hits scored by cosine with the query vector.

    The cosines come from the retriever's stored vectors (`Retriever.vectors_of`), i.e. exactly what
    the `ann` arm would compute for those variants; variants deleted or edited since the build are not
    live in the retriever and are dropped (the lexical index holds the KB as of the build).
    Returns `index.retriever.Hit`s (cosine set), best cosine first, ready for `group_hits`.
    """
    from index.retriever import Hit

    per_query = lexical.search(list(queries), k=k)
    out: list[list[Any]] = []
    for row, candidates in enumerate(per_query):
        if not candidates:
            out.append([])
            continue
        vectors, found = retriever.vectors_of([h.variant_id for h in candidates])
        cosines = vectors @ np.asarray(vecs[row], dtype=np.float32)
        hits = [Hit(h.variant_id, h.faq_id, h.question, float(c))
                for h, c, ok in zip(candidates, cosines.tolist(), found.tolist()) if ok]
        hits.sort(key=lambda h: -h.cosine)
        out.append(hits)
    return out
