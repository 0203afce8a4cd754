"""The Matcher: query text -> ranked FAQs with calibrated scores and an answer decision.

This is the one place where retrieval results become what the service answers, so the API
(`/match`) and the offline evaluation (`faq eval match`) use the same code and measure the same thing.

Steps for a batch of queries:
1. encode all queries in ONE encoder call (the expensive, CPU-bound part);
2. retrieve `max(4*top_k, 20)` variants per query from a single Retriever (variants, not FAQs: several
   variants of one FAQ often crowd the top, so we over-fetch before grouping), and search deeper for
   the queries whose hits still cover fewer than top_k FAQs;
3. group by faq_id keeping each FAQ's best variant; the FAQ's cosine is that variant's, or with
   `pool_variants` m > 1 the mean of its best m phrasings' cosines (see `group_hits`);
4. turn cosine into a calibrated probability with the build's calibration:
   p = sigmoid(a * cos + b), `a, b` from the manifest (`calibration: {a, b}`, or its `pooled[m]` curve);
5. answer = the best FAQ when its probability >= threshold, otherwise None.
   `+rerank` arms put a step 4b before it: the cross-encoder scores the query against the best phrasing of
   the top `max(rerank_k, top_k)` FAQs, and its probability (pooled with the calibrated cosine by
   `rerank_weight`, models/reranker.py `pool`) becomes the score and the order.

Arms (app/arms.py): `MatchQuery.arm` picks the recall stage of step 2: `ann` (above) or `lexical`
(BM25 top-K FAQs from the build's lexical index, their variants scored with the same stored vectors,
so steps 3-5 are shared); `+rerank` arms add the cross-encoder stage.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from app.arms import base_arm, uses_reranker
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
class Calibration:
    """p(match) = sigmoid(a * cos + b)."""

    a: float
    b: float

    def probability(self, cosine: float) -> float:
        z = self.a * cosine + self.b
        # numerically stable sigmoid (z can be large with a steep calibration)
        if z >= 0:
            return float(1.0 / (1.0 + math.exp(-z)))
        ez = math.exp(z)
        return float(ez / (1.0 + ez))


def calibration_for(manifest: dict | None, encoder: Any = None, pool: int = 1) -> Calibration:
    """The build's calibration from its manifest (every build writes one, see index/calibration.py),
    the curve fitted for FAQ scores pooled over `pool` phrasings when the build has it; for a manifest
    without one, the same prior a build would fall back to (the encoder's matching layer, else the
    MiniLM-like default)."""
    cal = (manifest or {}).get("calibration")
    if isinstance(cal, dict) and pool > 1:
        pooled = (cal.get("pooled") or {}).get(str(pool))
        cal = pooled if isinstance(pooled, dict) else cal  # builds before pooled curves: the best-phrasing one
    if isinstance(cal, dict) and cal.get("a") is not None and cal.get("b") is not None:
        return Calibration(float(cal["a"]), float(cal["b"]))
    from index.calibration import prior_calibration

    prior = prior_calibration(encoder)
    return Calibration(prior.a, prior.b)


@dataclass(frozen=True)
class FaqMatch:
    """One FAQ in a result list: its best-matching variant and the calibrated score."""

    faq_id: str
    question: str  # the variant that matched best
    answer: str
    score: float  # calibrated probability 0..1
    cosine: float  # the FAQ's cosine: its best phrasing's, or the pooled one (`pool_variants`); kept when a re-ranker sets `score`


@dataclass(frozen=True)
class MatchQuery:
    """One query with its own options (the micro-batcher mixes requests with different options)."""

    query: str
    top_k: int = 5
    threshold: float = 0.5
    arm: str = "ann"  # app.arms.ARMS


@dataclass
class MatchResult:
    query: str
    matches: list[FaqMatch]
    answer: FaqMatch | None  # best match when its score >= threshold
    index_version: str
    timings_ms: dict[str, float] = field(default_factory=dict)  # encode, retrieve, rerank, total


class Matcher:
    """Encoder + (current) Retriever -> `MatchResult`s.

    `retriever_provider` is either a Retriever or a zero-argument callable returning the current one
    (the API passes its state's getter so a hot swap is seen by the next call). The retriever is read
    ONCE per `match` call, so every query of a call is answered by the same index version even if a
    swap happens meanwhile; callers can also pin one with `retriever=`.
    """

    def __init__(self, encoder: Any, retriever_provider: Callable[[], RetrieverLike | None] | RetrieverLike, *,
                 lexical: Callable[[RetrieverLike], Any] | None = None, lexical_k: int = 30,
                 reranker: Any = None, rerank_k: int = 20, rerank_weight: float | None = None,
                 pool_variants: int = 1):
        self.encoder = encoder
        if pool_variants < 1:
            raise ValueError(f"pool_variants must be >= 1, got {pool_variants}")
        # a FAQ's cosine = mean of its best `pool_variants` phrasings' (1 = its best phrasing alone)
        self.pool_variants = pool_variants
        # the `+rerank` arms: models.reranker.Reranker (score(query, candidates) -> probabilities); None = none
        self.reranker = reranker
        self.rerank_k = rerank_k
        # weight of the cross-encoder in its pool with the first-stage probability (None: the re-ranker's own
        # default, models/reranker.py `fusion_weight`; 1 = the cross-encoder's probability alone)
        self.rerank_weight = rerank_weight
        # the lexical arms: retriever -> the LexicalIndex of its build version (raises LexicalUnavailable)
        self.lexical = lexical
        self.lexical_k = lexical_k
        if callable(retriever_provider) and not hasattr(retriever_provider, "search"):
            self._provider = retriever_provider
        else:
            self._provider = lambda: retriever_provider  # a fixed retriever

    def current_retriever(self) -> RetrieverLike | None:
        return self._provider()

    # -- public API ------------------------------------------------------------------------------
    def match(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        threshold: float = 0.5,
        *,
        retriever: RetrieverLike | None = None,
    ) -> list[MatchResult]:
        """Match `queries` with the same options. See `match_many` for per-query options."""
        return self.match_many([MatchQuery(q, top_k, threshold) for q in queries], retriever=retriever)

    def match_many(
        self, requests: Sequence[MatchQuery], *, retriever: RetrieverLike | None = None
    ) -> list[MatchResult]:
        """Encode every query in one call and rank each against one retriever."""
        if not requests:
            return []
        retriever = retriever if retriever is not None else self.current_retriever()
        if retriever is None:
            raise NoIndexError("no index built: run `faq index build`")
        t0 = time.perf_counter()
        vecs = self.encode([r.query for r in requests])
        encode_ms = (time.perf_counter() - t0) * 1000.0
        return self.rank(requests, vecs, retriever, encode_ms=encode_ms, started=t0)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        vecs = self.encoder.encode(list(texts), batch_size=max(1, min(64, len(texts))))
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def rank(
        self,
        requests: Sequence[MatchQuery],
        vecs: np.ndarray,
        retriever: RetrieverLike,
        *,
        encode_ms: float = 0.0,
        started: float | None = None,
    ) -> list[MatchResult]:
        """Retrieve, group and score already-encoded queries (one search call for all of them)."""
        started = started if started is not None else time.perf_counter()
        t1 = time.perf_counter()
        hits_per_query = self.retrieve(requests, vecs, retriever)
        retrieve_ms = (time.perf_counter() - t1) * 1000.0

        calibration = calibration_for(retriever.manifest, self.encoder, self.pool_variants)
        answers = retriever.answers
        ranked: list[list[FaqMatch]] = []
        t2 = time.perf_counter()
        # the ANN list holds every phrasing down to its lowest cosine, so a FAQ's phrasings missing from it
        # are known to score below it; BM25 candidates carry no such bound: pool over what was scored
        counts = variant_counts(retriever) if self.pool_variants > 1 else None
        for request, hits in zip(requests, hits_per_query):
            reranked = uses_reranker(request.arm)
            grouped = group_hits(hits, answers, calibration, max(request.top_k, self.rerank_k) if reranked else request.top_k,
                                 pool=self.pool_variants, counts=counts if base_arm(request.arm) == "ann" else None)
            ranked.append(self.rerank(request, grouped) if reranked else grouped)
        rerank_ms = (time.perf_counter() - t2) * 1000.0 if any(uses_reranker(r.arm) for r in requests) else 0.0
        total_ms = (time.perf_counter() - started) * 1000.0
        results: list[MatchResult] = []
        for request, matches in zip(requests, ranked):
            best = matches[0] if matches else None
            answer = best if best is not None and best.score >= request.threshold else None
            results.append(
                MatchResult(
                    query=request.query,
                    matches=matches,
                    answer=answer,
                    index_version=str(retriever.version),
                    timings_ms={
                        "encode": round(encode_ms, 3),
                        "retrieve": round(retrieve_ms, 3),
                        "rerank": round(rerank_ms, 3),
                        "total": round(total_ms, 3),
                    },
                )
            )
        return results

    def rerank(self, request: MatchQuery, candidates: list[FaqMatch]) -> list[FaqMatch]:
        """The `+rerank` stage: the cross-encoder scores the query against each candidate FAQ's best
        phrasing (one batched forward pass); its probability becomes the score and the order."""
        if self.reranker is None:
            raise NoRerankerError("no re-ranker installed: set FAQ_RERANKER to a re-ranker folder")
        if not candidates:
            return []
        head = candidates[: max(request.top_k, self.rerank_k)]
        probs = np.asarray(self.reranker.score(request.query, [m.question for m in head],
                                               prior=[m.score for m in head], weight=self.rerank_weight),
                           dtype=np.float64)
        rescored = [replace(m, score=float(p)) for m, p in zip(head, probs.tolist())]
        rescored.sort(key=lambda m: (-m.score, m.faq_id))
        return rescored[: request.top_k]

    def retrieve(self, requests: Sequence[MatchQuery], vecs: np.ndarray, retriever: RetrieverLike) -> list[list[Any]]:
        """Variant hits (with cosine) per query from its arm's recall stage: ANN, or BM25 candidates."""
        from app.arms import lexical_hits

        hits: list[list[Any]] = [[] for _ in requests]
        ann_rows = [i for i, r in enumerate(requests) if base_arm(r.arm) == "ann"]
        lexical_rows = [i for i, r in enumerate(requests) if base_arm(r.arm) == "lexical"]
        if len(ann_rows) + len(lexical_rows) != len(requests):
            unknown = sorted({r.arm for r in requests} - {"ann", "lexical", "ann+rerank", "lexical+rerank"})
            raise ValueError(f"unknown arm(s) {unknown}")
        if ann_rows:
            # a re-ranked arm needs rerank_k FAQs from its recall stage, whatever top_k it returns
            sub = [replace(requests[i], top_k=max(requests[i].top_k, self.rerank_k)) if uses_reranker(requests[i].arm)
                   else requests[i] for i in ann_rows]
            sub_vecs = vecs if len(ann_rows) == len(requests) else vecs[ann_rows]
            k = max(retrieve_depth(r.top_k) for r in sub)
            for i, found in zip(ann_rows, deepen(retriever, sub_vecs, sub, retriever.search(sub_vecs, k), k)):
                hits[i] = found
        if lexical_rows:
            if self.lexical is None:
                from index.lexical import LexicalUnavailable

                raise LexicalUnavailable("no lexical index configured for this matcher")
            index = self.lexical(retriever)
            k = max([self.lexical_k] + [requests[i].top_k for i in lexical_rows])
            found = lexical_hits(index, retriever, [requests[i].query for i in lexical_rows], vecs[lexical_rows], k)
            for i, row_hits in zip(lexical_rows, found):
                hits[i] = row_hits
        return hits


def deepen(
    retriever: RetrieverLike, vecs: np.ndarray, requests: Sequence[MatchQuery], hits: list, k: int
) -> list:
    """Re-search, deeper, the queries whose `k` variants cover fewer than `top_k` FAQs.

    A FAQ with many phrasings (CLINC150 has 100 per intent) can fill the whole first depth on its
    own; without this a `top_k=5` request could come back with a single FAQ.
    """
    hits = list(hits)

    def short(i: int, depth: int) -> bool:
        return len(hits[i]) >= depth and len({h.faq_id for h in hits[i]}) < requests[i].top_k

    depth = k
    pending = [i for i in range(len(requests)) if short(i, depth)]
    while pending and depth < MAX_RETRIEVE_VARIANTS:
        depth = min(depth * 4, MAX_RETRIEVE_VARIANTS)
        for i, deeper in zip(pending, retriever.search(vecs[pending], depth)):
            hits[i] = deeper
        pending = [i for i in pending if short(i, depth)]
    return hits


class NoIndexError(RuntimeError):
    """No retriever is loaded (no build yet, or the current build could not be loaded)."""


class NoRerankerError(RuntimeError):
    """A `+rerank` arm was asked for but no re-ranker is installed."""


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
