"""Candidate generation: query vectors -> the FAQs worth answering with, each with its calibrated
first-stage score.

- ANN recall (`Retriever.search`: Annoy + the delta segment, minus tombstones), searched deeper when the
  first depth covers too few distinct FAQs (`deepen`);
- lexical recall (`lexical_hits`): BM25 top-K FAQs from the build's lexical index, their phrasings scored
  with the same stored vectors, so both recall stages feed the same grouping;
- answer recall (`answer_hits`, builds with answer evidence): the FAQs whose answers are nearest the
  query join the candidates, their phrasings scored exactly;
- grouping and pooling (`group_hits`): variant hits -> one entry per FAQ, its cosine the best phrasing's
  or the mean of its best m (index/pooling.py), mixed with its answer's cosine (index/answers.py), its
  score the build's calibration of that value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from index.answers import ANSWER_RECALL, AnswerVectors, combine
from index.calibration import Calibration
from index.pooling import pooled_cosine

#: retrieval depth in variants for a requested number of FAQs
MIN_RETRIEVE_VARIANTS = 20
RETRIEVE_FACTOR = 4
#: deepest re-search when the first depth held fewer than top_k distinct FAQs
MAX_RETRIEVE_VARIANTS = 4096


#: BM25 candidates a filtered lexical query asks for at most (the filter then keeps its own)
MAX_FILTERED_LEXICAL_K = 2000


def retrieve_depth(top_k: int) -> int:
    """How many variants to fetch so that grouping still leaves `top_k` distinct FAQs."""
    return max(RETRIEVE_FACTOR * top_k, MIN_RETRIEVE_VARIANTS)


class RetrieverLike(Protocol):
    """The part of `index.retriever.Retriever` the matcher uses."""

    version: str
    manifest: dict
    answers: dict[str, tuple[str, list[str]]]
    answer_vectors: AnswerVectors | None

    def search(self, vecs: np.ndarray, k: int, selection: Any = None) -> list[list[Any]]: ...


@dataclass(frozen=True)
class FaqMatch:
    """One FAQ in a result list: its best-matching variant and the calibrated score."""

    faq_id: str
    question: str  # the variant that matched best
    answer: str
    score: float  # calibrated probability 0..1
    # the first-stage evidence the calibration maps to `score`: the best phrasing's cosine or the pooled one
    # (`pool_variants`), mixed with the answer's cosine when answers are evidence; kept when a re-ranker sets `score`
    cosine: float
    answer_cosine: float | None = None  # the query's cosine with the FAQ's answer, when the build encoded it
    phrasing_cosine: float | None = None  # the (pooled) phrasing cosine `cosine` mixes with the answer's
    first_score: float | None = None  # re-ranked arms: the first-stage probability the stages pooled with


def deepen(retriever: RetrieverLike, vecs: np.ndarray, top_ks: Sequence[int], hits: list, k: int,
           selection: Any = None) -> list:
    """Re-search, deeper, the queries whose `k` variants cover fewer than `top_k` FAQs (inside `selection`,
    the queries' filter, when given).

    A FAQ with many phrasings (CLINC150 has 100 per intent) can fill the whole first depth on its
    own; without this a `top_k=5` request could come back with a single FAQ.
    """
    hits = list(hits)

    def short(i: int, depth: int) -> bool:
        return len(hits[i]) >= depth and len({h.faq_id for h in hits[i]}) < top_ks[i]

    # (top_k - 1) * (most phrasings of any FAQ) + 1 variants always hold top_k FAQs: go there in one step
    # when the retriever knows its counts, instead of growing 4x per round
    counts = variant_counts(retriever)
    most = max(counts.values(), default=0) if counts else 0
    depth = k
    pending = [i for i in range(len(top_ks)) if short(i, depth)]
    while pending and depth < MAX_RETRIEVE_VARIANTS:
        enough = (max(top_ks[i] for i in pending) - 1) * most + 1 if most else 0
        depth = min(max(depth * 4, enough), MAX_RETRIEVE_VARIANTS)
        deeper_hits = (retriever.search(vecs[pending], depth) if selection is None
                       else retriever.search(vecs[pending], depth, selection=selection))
        for i, deeper in zip(pending, deeper_hits):
            hits[i] = deeper
        pending = [i for i in pending if short(i, depth)]
    return hits


def variant_counts(retriever: Any) -> dict[str, int] | None:
    """faq_id -> live phrasings, from a retriever that knows them (`Retriever.variant_counts`)."""
    return getattr(retriever, "variant_counts", None)


def group_hits(
    hits: Sequence[Any], answers: dict[str, tuple[str, list[str]]], calibration: Calibration, top_k: int,
    *, pool: int = 1, counts: dict[str, int] | None = None,
    answer_cos: dict[str, float] | None = None, answer_weight: float = 0.0, floor: float | None = None,
) -> list[FaqMatch]:
    """Variant hits (best first) -> at most `top_k` FAQs, one per faq_id with its best variant.

    The FAQ's cosine is its best variant's (`pool` 1), or the mean of its best `min(pool, n)` phrasings'
    (index/pooling.py), n = its number of phrasings (`counts`, else the hits seen); with `answer_cos`
    (faq_id -> the query's cosine with its answer) it is mixed with that by `answer_weight`.
    `floor`: the cosine a FAQ's unretrieved phrasings count at (default: the lowest hit's); pass the ANN
    list's when `answer_hits` added exactly scored FAQs below it.
    Hits of FAQs missing from `answers` are skipped: the FAQ was deleted after the retriever's
    snapshot and must not be served (the tombstones normally hide them already).
    """
    per_faq: dict[str, list[Any]] = {}
    for hit in hits:
        if hit.faq_id in answers:
            per_faq.setdefault(hit.faq_id, []).append(hit)
    if floor is None:
        floor = min((h.cosine for h in hits), default=0.0)

    def pooled(faq_hits: list[Any]) -> float:
        n = (counts or {}).get(faq_hits[0].faq_id, 0)
        return pooled_cosine([h.cosine for h in faq_hits], n, pool, floor)

    answer_cos = answer_cos or {}
    scored = []
    for faq_hits in per_faq.values():
        phrasing = pooled(faq_hits)
        scored.append((combine(phrasing, answer_cos.get(faq_hits[0].faq_id), answer_weight), phrasing,
                       max(faq_hits, key=lambda h: h.cosine)))
    scored.sort(key=lambda sh: (-sh[0], sh[2].faq_id))
    return [
        FaqMatch(
            faq_id=h.faq_id,
            question=h.question,
            answer=answers[h.faq_id][0],
            score=calibration.probability(cos),
            cosine=cos,
            answer_cosine=answer_cos.get(h.faq_id),
            phrasing_cosine=phrasing,
        )
        for cos, phrasing, h in scored[:top_k]
    ]


def answer_hits(retriever: Any, answer_vectors: AnswerVectors, cosines_row: np.ndarray, query_vec: np.ndarray,
                hits: list[Any], top_k: int, only: frozenset[str] | None = None) -> list[Any]:
    """`hits` plus the phrasings of the FAQs with the best answers that `hits` does not reach (at least
    ANSWER_RECALL of them, `top_k` when more), scored exactly from the stored vectors, best first.
    Every phrasing of such a FAQ is added, so its pooled cosine is exact. `only`: the FAQs a filter keeps
    (the best answers among them)."""
    from index.retriever import Hit

    have = {h.faq_id for h in hits}
    extra: list[Any] = []
    if only is not None:
        cosines_row = np.where(answer_vectors.mask(only), cosines_row, -np.inf)
    for faq_id in answer_vectors.top(cosines_row, max(ANSWER_RECALL, top_k)):
        if faq_id in have or (only is not None and faq_id not in only):
            continue
        variants = retriever.faq_variants(faq_id)
        if not variants:
            continue
        vectors, found = retriever.vectors_of([vid for vid, _ in variants])
        cosines = vectors @ np.asarray(query_vec, dtype=np.float32)
        extra += [Hit(vid, faq_id, q, float(c)) for (vid, q), c, ok in zip(variants, cosines.tolist(), found.tolist()) if ok]
    if not extra:
        return hits
    return sorted(list(hits) + extra, key=lambda h: -h.cosine)


def lexical_hits(lexical: Any, retriever: Any, queries: Sequence[str], vecs: np.ndarray, k: int,
                 only: frozenset[str] | None = None) -> list[list[Any]]:
    """BM25 top-`k` FAQs per query -> their variant hits scored by cosine with the query vector.

    The cosines come from the retriever's stored vectors (`Retriever.vectors_of`), i.e. exactly what
    the `ann` arm would compute for those variants; variants deleted or edited since the build are not
    live in the retriever and are dropped (the lexical index holds the KB as of the build).
    Returns `index.retriever.Hit`s (cosine set), best cosine first, ready for `group_hits`.
    `only`: the FAQs a filter keeps; BM25 is then asked deeper, in proportion to how few FAQs the filter
    keeps, and its candidates outside the filter are dropped.
    """
    from index.retriever import Hit

    if only is not None:
        n_faqs = max(len(retriever.answers), 1)
        k = min(max(k, int(np.ceil(k * n_faqs / max(len(only), 1)))), n_faqs, MAX_FILTERED_LEXICAL_K)
    per_query = lexical.search(list(queries), k=k)
    out: list[list[Any]] = []
    for row, candidates in enumerate(per_query):
        if only is not None:
            candidates = [h for h in candidates if h.faq_id in only]
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
