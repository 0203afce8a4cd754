"""The matching pipeline, and the one place it is assembled from settings (`build_pipeline`).

    query texts -> encoder (one call per batch)
      -> candidate generation per arm: ANN (Annoy + delta segment + tombstones) or BM25 (index/candidates.py)
      -> answer evidence (builds whose KB has real answers, index/answers.py): FAQs recalled through their
         answers too, each FAQ's cosine mixed with its answer's: (1 - w) * phrasing + w * answer
      -> FAQ grouping and pooling, scored by the build's calibration: p = sigmoid(a * cos + b)
      -> re-ranking stages (the `+rerank` arms): each re-scores the top `rerank_k` FAQs
      -> decision: answer = the best FAQ when its probability >= threshold, else none

The service (`app/api/state.py`), `faq eval match`, `faq eval ab` and the benchmarks all get their
pipeline from `build_pipeline`, so a new stage, option or runtime is wired in here once.

A re-ranking stage is anything with `id` and `rescore(query, candidates) -> probabilities`
(`RerankStage`): `CrossEncoderStage` adapts models/matchers/cross_encoder.py; models still to come plug in the same way.
Arms (app/arms.py): `MatchQuery.arm` picks the recall stage (`ann` or `lexical`), `+rerank` adds the stages.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from app.arms import base_arm, uses_reranker
from app.decision import Decider
from index.decision import WINDOW, load_model
from app.settings import Settings
from index.answers import nearest_weight
from index.calibration import calibration_for
from index.candidates import (
    FaqMatch,
    RetrieverLike,
    answer_hits,
    deepen,
    group_hits,
    lexical_hits,
    retrieve_depth,
    variant_counts,
)

__all__ = [
    "AnalogyStage", "CrossEncoderStage", "FaqMatch", "MatchQuery", "MatchResult", "MmaicmStage", "NoIndexError",
    "NoRerankerError", "Pipeline", "PooledStage", "RerankStage", "SiameseStage", "build_pipeline", "default_encoder", "encoder_spec",
    "lexical_engine", "load_mmaicm_stage", "load_rerank_stages", "load_siamese_stage", "vector_stages",
]


# ---------------------------------------------------------------------------------------------
# requests and results
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MatchQuery:
    """One query with its own options (the micro-batcher mixes requests with different options)."""

    query: str
    top_k: int = 5
    threshold: float | None = 0.5  # None: the decider's (FAQ_TARGET_PRECISION, else FAQ_DEFAULT_THRESHOLD)
    arm: str = "ann"  # app.arms.ARMS


@dataclass
class MatchResult:
    query: str
    matches: list[FaqMatch]
    answer: FaqMatch | None  # best match when its score >= threshold
    index_version: str
    timings_ms: dict[str, float] = field(default_factory=dict)  # encode, retrieve, rerank, total
    cached: bool = False  # answered from the query cache (the same query, options and index earlier)
    decision: str = "abstain"  # app/decision.py DECISIONS
    options: list[FaqMatch] = field(default_factory=list)  # clarify: the plausible FAQs
    threshold: float = 0.5  # the threshold the decision used
    expected_precision: float | None = None  # the build's expected precision at that threshold


# ---------------------------------------------------------------------------------------------
# the exact query cache
# ---------------------------------------------------------------------------------------------
def cache_text(query: str) -> str:
    """The cache's view of a query: case and runs of whitespace dropped. Every encoder served lower-cases
    (MiniLM's and mpnet's tokenizers, the GloVe tokenizer) and splits on whitespace, so two texts equal
    here get the same vector."""
    return " ".join(query.split()).lower()


class QueryCache:
    """LRU of finished results, keyed by the normalised query text, its options (arm, top_k, threshold)
    and the pipeline's scoring options. Chatbot traffic repeats ("opening hours?"), and a hit skips the
    encoder, the search and the re-rankers.

    Invalidation: entries belong to one retriever object. The service replaces its retriever on every
    index swap and every KB change (app/api/state.py), so the first call that sees another retriever
    empties the cache: a result is never served from an older index or KB.
    """

    def __init__(self, size: int):
        from collections import OrderedDict
        import threading

        self.size = max(0, int(size))
        self._entries: OrderedDict[tuple, MatchResult] = OrderedDict()
        self._owner: Any = None
        self._lock = threading.Lock()
        self.hits = self.misses = self.invalidations = 0

    def _own(self, retriever: Any) -> None:
        if retriever is not self._owner:
            if self._entries:
                self.invalidations += 1
            self._entries.clear()
            self._owner = retriever

    def get(self, retriever: Any, key: tuple) -> MatchResult | None:
        with self._lock:
            self._own(retriever)
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found

    def put(self, retriever: Any, key: tuple, result: MatchResult) -> None:
        if self.size == 0:
            return
        with self._lock:
            self._own(retriever)
            self._entries[key] = result
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)




# ---------------------------------------------------------------------------------------------
# re-ranking stages
# ---------------------------------------------------------------------------------------------
class RerankStage(Protocol):
    """Re-scores a query's candidate FAQs (first-stage order, each with its score so far). A stage may also
    have `attach(retriever)`, called with the build a request is answered from before it re-scores, and
    `vector_key` + `sentence_vectors(texts)`: what an index build stores for it (`vector_stages`)."""

    id: str

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        """Calibrated P(candidate means the same as query), float (len(candidates),)."""
        ...


class CrossEncoderStage:
    """models/matchers/cross_encoder.py's cross-encoder on each candidate's best phrasing (one batched forward pass),
    its probability pooled with the candidate's score so far by `weight` (None: the folder's
    `fusion_weight`; 1 = the cross-encoder alone)."""

    def __init__(self, reranker: Any, weight: float | None = None):
        self.reranker = reranker
        self.weight = weight

    @property
    def id(self) -> str:
        return self.reranker.id

    @property
    def served_weight(self) -> float:
        return self.reranker.config.fusion_weight if self.weight is None else self.weight

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        return np.asarray(self.reranker.score(query, [m.question for m in candidates],
                                              prior=[m.score for m in candidates], weight=self.weight))


class PooledStage:
    """What the stages over this project's calibrated pair models share (MMAICM, analogy, Siamese): the
    model's probability pooled with the candidate's score so far, sigmoid(w * logit(p) + (1 - w) *
    logit(score)), w = `weight` (None: the folder's `fusion_weight`; 1 = the model alone)."""

    #: names the model in errors
    label = "stage"

    def __init__(self, scorer: Any, weight: float | None = None):
        if weight is not None and not 0.0 <= weight <= 1.0:
            raise ValueError(f"{self.label} weight must be in 0..1, got {weight}")
        self.scorer = scorer
        self.weight = weight

    @property
    def served_weight(self) -> float:
        return self.scorer.calibration.fusion_weight if self.weight is None else self.weight

    def pooled(self, p: np.ndarray, candidates: Sequence[FaqMatch]) -> np.ndarray:
        """The model's probabilities `p` for `candidates` -> the stage's, float64."""
        from models.scoring import pool

        w = self.served_weight
        if w >= 1.0:
            return p
        return pool(p, np.array([m.score for m in candidates], dtype=np.float64), w).astype(np.float64)


class MmaicmStage(PooledStage):
    """models/matchers/mmaicm.py's MMAICM on each candidate's answer and best phrasing (one forward pass for both).
    Its raw scores become probabilities through the folder's logistic calibration, mixed as
    p = answer_share * p(answer) + (1 - answer_share) * p(phrasing), then pooled with the candidate's
    score so far: sigmoid(w * logit(p) + (1 - w) * logit(score)), w = `weight` (None: the folder's
    `fusion_weight`; 1 = MMAICM alone)."""

    label = "MMAICM"

    def __init__(self, scorer: Any, weight: float | None = None, answer_share: float = 0.5):
        super().__init__(scorer, weight)
        if not 0.0 <= answer_share <= 1.0:
            raise ValueError(f"answer_share must be in 0..1, got {answer_share}")
        self.answer_share = answer_share

    @property
    def id(self) -> str:
        return self.scorer.id

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        n = len(candidates)
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        share = self.answer_share
        texts = ([m.answer for m in candidates] if share > 0 else []) + ([m.question for m in candidates] if share < 1 else [])
        probs = self.scorer.probability(self.scorer.score(query, texts)).astype(np.float64)
        if share <= 0:
            p = probs
        elif share >= 1:
            p = probs[:n]
        else:
            p = share * probs[:n] + (1.0 - share) * probs[n:]
        return self.pooled(p, candidates)


class AnalogyStage(PooledStage):
    """models/matchers/analogy.py's analogy model on each candidate's answer: how well query -> answer lines up
    with the model's prototype question -> answer pairs (best of k). Calibrated to a probability by the
    folder's logistic fit and pooled with the candidate's score so far like MmaicmStage (w = `weight`,
    None: the folder's `fusion_weight`; 1 = the analogy score alone)."""

    #: FAQ answers and prototype texts whose sentence vectors are kept: a service re-scores the same
    #: answers again and again, so after the first requests only the query is encoded
    CACHE_SIZE = 8192

    label = "analogy"

    def __init__(self, scorer: Any, weight: float | None = None):
        super().__init__(scorer, weight)
        self._vectors: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def _embed_cached(self, texts: Sequence[str]) -> Any:
        import torch

        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
            if missing:
                for text, vec in zip(missing, self.scorer.embed(missing)):
                    self._vectors[text] = vec
            for text in texts:
                self._vectors.move_to_end(text)
            rows = torch.stack([self._vectors[t] for t in texts])
            while len(self._vectors) > self.CACHE_SIZE:
                self._vectors.popitem(last=False)
            return rows

    @property
    def id(self) -> str:
        return f"analogy:{self.scorer.name}"

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float64)
        import torch.nn.functional as F

        from models.matchers.analogy import best_of_prototypes

        q = self.scorer.embed([query])[0]
        answers = self._embed_cached([m.answer for m in candidates])
        if self.scorer.config.objective == "cosine":
            raw = F.cosine_similarity(q.unsqueeze(0), answers, dim=-1)
        else:  # as AnalogyScorer.score, with the answers' and prototypes' vectors cached
            protos = self.scorer.prototypes_for(query)
            if not protos:
                raise ValueError(f"the analogy model {self.scorer.name} has no prototypes to score with")
            pv = self._embed_cached([p.question for p in protos] + [p.answer for p in protos])
            raw = best_of_prototypes(pv[: len(protos)], pv[len(protos):], q, answers)
        p = self.scorer.probability(raw.numpy()).astype(np.float64)
        return self.pooled(p, candidates)


class SiameseStage(PooledStage):
    """models/matchers/siamese.py's Siamese matcher on the query and each candidate's best phrasing. The phrasings'
    sentence vectors are computed at index build time (`faq index build` with this folder in FAQ_RERANKER
    stores them in the build: index/build.py `write_stage_vectors`) and read from the serving build
    (`attach`); phrasings the build lacks (KB edits since) are encoded once and kept. A request then encodes
    only its query and runs the MLP head over the candidates. Calibrated by the folder's logistic fit and
    pooled with the candidate's score so far like MmaicmStage (w = `weight`, None: the folder's
    `fusion_weight`; 1 = the Siamese matcher alone)."""

    #: phrasings outside the serving build whose vectors are kept (most recently used first out)
    CACHE_SIZE = 8192
    #: builds whose stored vectors stay open: the serving one and the one it replaced (in-flight requests)
    BUILDS_KEPT = 2

    label = "Siamese"

    def __init__(self, scorer: Any, weight: float | None = None):
        super().__init__(scorer, weight)
        # build folder -> (phrasing text -> row, the build's memory-mapped vectors), or None: none stored
        self._builds: OrderedDict[str, tuple[dict[str, int], np.ndarray] | None] = OrderedDict()
        self._extra: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.scorer.id

    # what an index build stores for this stage (index/build.py `write_stage_vectors`)
    @property
    def vector_key(self) -> str:
        return self.scorer.vector_key

    def sentence_vectors(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        return self.scorer.sentence_vectors(texts, batch_size=batch_size)

    def attach(self, retriever: Any) -> None:
        """Open `retriever`'s stored vectors for this model (once per build)."""
        build = str(getattr(retriever, "build_dir", ""))
        with self._lock:
            if build in self._builds:
                self._builds.move_to_end(build)
                return
        reader = getattr(retriever, "stage_vectors", None)
        found = reader(self.vector_key) if reader is not None else None
        entry = None
        if found is not None:
            texts, matrix = found
            rows: dict[str, int] = {}
            for i, text in enumerate(texts):
                rows.setdefault(text, i)
            entry = (rows, matrix)
        with self._lock:
            self._builds[build] = entry
            while len(self._builds) > self.BUILDS_KEPT:
                self._builds.popitem(last=False)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """(n, D) sentence vectors of `texts`: from an attached build, else from the cache, else encoded."""
        out: list[np.ndarray | None] = [None] * len(texts)
        with self._lock:
            builds = [b for b in reversed(self._builds.values()) if b is not None]
            for i, text in enumerate(texts):
                for rows, matrix in builds:
                    row = rows.get(text)
                    if row is not None:
                        out[i] = matrix[row]
                        break
                else:
                    cached = self._extra.get(text)
                    if cached is not None:
                        self._extra.move_to_end(text)
                        out[i] = cached
        missing = list(dict.fromkeys(t for t, v in zip(texts, out) if v is None))
        if missing:
            fresh = dict(zip(missing, self.scorer.sentence_vectors(missing)))
            with self._lock:
                self._extra.update(fresh)
                while len(self._extra) > self.CACHE_SIZE:
                    self._extra.popitem(last=False)
            out = [fresh[t] if v is None else v for t, v in zip(texts, out)]
        return np.asarray(np.stack(out), dtype=np.float32)

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float64)
        u = self.scorer.sentence_vectors([query])[0]
        p = self.scorer.compare_vectors(u, self.vectors([m.question for m in candidates])).astype(np.float64)
        return self.pooled(p, candidates)


# ---------------------------------------------------------------------------------------------
# the pipeline
# ---------------------------------------------------------------------------------------------
class Pipeline:
    """Encoder + (current) Retriever [+ re-ranking stages] -> `MatchResult`s. Built by `build_pipeline`.

    `retriever_provider` is either a Retriever or a zero-argument callable returning the current one
    (the service passes its state's getter so a hot swap is seen by the next call). The retriever is read
    ONCE per `match` call, so every query of a call is answered by the same index version even if a
    swap happens meanwhile; callers can also pin one with `retriever=`.
    """

    def __init__(self, encoder: Any, retriever_provider: Callable[[], RetrieverLike | None] | RetrieverLike, *,
                 lexical: Callable[[RetrieverLike], Any] | None = None, lexical_k: int = 30,
                 stages: Sequence[RerankStage] = (), rerank_k: int = 20, pool_variants: int | None = 1,
                 answer_weight: float = 0.0, cache_size: int = 0, decider: Decider | None = None,
                 scoring: str = "model"):
        self.encoder = encoder
        # scores (the cross-KB decision model) and answer / clarify / abstain; None: calibrated cosines only
        self.decider = decider if decider is not None else Decider(None)
        self.scoring = scoring  # "model" | "calibration" (app/settings.py)
        self._pure_stage: Any = None  # `stacked_rerank`'s stage at weight 1
        # finished results of repeated queries (0 = off); see QueryCache
        self.cache = QueryCache(cache_size)
        if pool_variants is not None and pool_variants < 1:
            raise ValueError(f"pool_variants must be >= 1, got {pool_variants}")
        # the answer's share of a FAQ's first-stage score (builds without answer evidence ignore it)
        self.answer_weight = answer_weight
        # a FAQ's cosine = mean of its best `pool_variants` phrasings' (1 = its best phrasing alone);
        # None = by build (`served_pool`)
        self.pool_variants = pool_variants
        # the `+rerank` arms: each stage re-scores the top `rerank_k` FAQs in turn; none = those arms refuse
        self.stages = list(stages)
        self.rerank_k = rerank_k
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
        found = self.cached(requests, retriever)
        todo = [i for i, r in enumerate(found) if r is None]
        if todo:
            misses = [requests[i] for i in todo]
            vecs = self.encode([r.query for r in misses])
            fresh = self.rank(misses, vecs, retriever, encode_ms=(time.perf_counter() - t0) * 1000.0, started=t0)
            self.remember(misses, retriever, fresh)
            for i, result in zip(todo, fresh):
                found[i] = result
        return found  # type: ignore[return-value]

    # -- the query cache -------------------------------------------------------------------------
    def _cache_key(self, request: MatchQuery, options: tuple) -> tuple:
        return (cache_text(request.query), request.arm, request.top_k, request.threshold, options)

    def cached(self, requests: Sequence[MatchQuery], retriever: RetrieverLike) -> list[MatchResult | None]:
        """Each request's result from the query cache (as this request's: its own text, `cached` set,
        zero stage timings), or None."""
        if self.cache.size == 0:
            return [None] * len(requests)
        t0 = time.perf_counter()
        options = self._options_key()
        out: list[MatchResult | None] = []
        for request in requests:
            hit = self.cache.get(retriever, self._cache_key(request, options))
            if hit is not None:
                ms = round((time.perf_counter() - t0) * 1000.0, 3)
                hit = replace(hit, query=request.query, cached=True,
                              timings_ms={"encode": 0.0, "retrieve": 0.0, "rerank": 0.0, "total": ms})
            out.append(hit)
        return out

    def remember(self, requests: Sequence[MatchQuery], retriever: RetrieverLike, results: Sequence[MatchResult]) -> None:
        if self.cache.size == 0:
            return
        options = self._options_key()
        for request, result in zip(requests, results):
            self.cache.put(retriever, self._cache_key(request, options), result)

    def _options_key(self) -> tuple:
        """Everything of the pipeline's own that changes a ranking (evaluations retune these live)."""
        return (self.answer_weight, self.pool_variants, self.rerank_k, self.lexical_k, self.scoring,
                id(self.decider.model), self.decider.oos_share, self.decider.target_precision,
                id(self.decider._traffic),
                tuple((s.id, getattr(s, "weight", None)) for s in self.stages))

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
        weight = self.served_answer_weight(retriever)
        answer_cos: list[dict[str, float] | None] = [None] * len(requests)
        floors: list[float | None] = [None] * len(requests)
        if weight > 0:
            answer_vectors = retriever.answer_vectors
            cosines = answer_vectors.cosines(vecs)
            for i, request in enumerate(requests):
                hits = hits_per_query[i]
                if base_arm(request.arm) == "ann":  # the lexical arms keep BM25's candidates, scored the same way
                    floors[i] = min((h.cosine for h in hits), default=None)
                    top_k = max(request.top_k, self.rerank_k) if uses_reranker(request.arm) else request.top_k
                    hits = hits_per_query[i] = answer_hits(retriever, answer_vectors, cosines[i], vecs[i], hits, top_k)
                row_of = answer_vectors.row_of
                answer_cos[i] = {f: float(cosines[i, row_of[f]]) for f in {h.faq_id for h in hits} if f in row_of}
        retrieve_ms = (time.perf_counter() - t1) * 1000.0

        pool = self.served_pool(retriever)
        calibration = calibration_for(retriever.manifest, self.encoder, pool, weight)
        answers = retriever.answers
        ranked: list[list[FaqMatch]] = []
        t2 = time.perf_counter()
        # the ANN list holds every phrasing down to its lowest cosine, so a FAQ's phrasings missing from it
        # are known to score below it; BM25 candidates carry no such bound: pool over what was scored
        counts = variant_counts(retriever) if pool > 1 else None
        decided = self.scoring == "model" and self.decider.reference(retriever, pool, weight) is not None
        attached = False
        for request, hits, a_cos, floor in zip(requests, hits_per_query, answer_cos, floors):
            reranked = uses_reranker(request.arm)
            depth = max(request.top_k, self.rerank_k) if reranked else max(request.top_k, WINDOW if decided else 0)
            grouped = group_hits(hits, answers, calibration, depth,
                                 pool=pool, counts=counts if base_arm(request.arm) == "ann" else None,
                                 answer_cos=a_cos, answer_weight=weight, floor=floor)
            if reranked:
                # the stages pool with the build's cosine curve, not the decision model's probability: a
                # convex pool of two calibrated probabilities is under-confident (docs/results.md); a stage
                # fitted on the KB's labels (`faq index calibrate`) is stacked with the model instead
                grouped = [replace(m, first_score=m.score) for m in grouped]
                if not attached:
                    self.attach_stages(retriever)
                    attached = True
                stack = self.stage_stack() if decided else None
                if stack is not None:
                    ranked.append(self.stacked_rerank(request, grouped, retriever, pool, weight, stack))
                    continue
            ranked.append(self.rerank(request, grouped) if reranked else grouped)
        rerank_ms = (time.perf_counter() - t2) * 1000.0 if any(uses_reranker(r.arm) for r in requests) else 0.0
        t3 = time.perf_counter()
        decider = self.decider
        ref = decider.reference(retriever, pool, weight) if self.scoring == "model" else None
        table = decider.table(retriever, pool, weight) if ref is not None else None
        results: list[MatchResult] = []
        for request, matches in zip(requests, ranked):
            staged = uses_reranker(request.arm)  # a stage's probability stays the score: the table is not its
            if ref is not None and not staged:
                matches = decider.rescore(request.query, matches, retriever, ref)[: request.top_k]
            decision = decider.decide(matches, decider.threshold(request.threshold, table),
                                      None if staged else table)
            answer = matches[0] if decision.kind == "answer" else None
            results.append(
                MatchResult(
                    query=request.query,
                    matches=matches,
                    answer=answer,
                    decision=decision.kind,
                    options=list(decision.options),
                    threshold=decision.threshold,
                    expected_precision=decision.expected_precision,
                    index_version=str(retriever.version),
                    timings_ms={
                        "encode": round(encode_ms, 3),
                        "retrieve": round(retrieve_ms, 3),
                        "rerank": round(rerank_ms, 3),
                    },
                )
            )
        decide_ms = (time.perf_counter() - t3) * 1000.0
        total_ms = (time.perf_counter() - started) * 1000.0
        for result in results:
            result.timings_ms.update(decide=round(decide_ms, 3), total=round(total_ms, 3))
        return results

    def served_pool(self, retriever: RetrieverLike) -> int:
        """The pool size `retriever`'s build is served with: the configured one, else (None) the best
        phrasing alone when the build's answers are evidence and the mean of the best 2 when not. Both
        measured on dev queries (docs/results.md): pooling steadies a FAQ with many phrasings against
        one stray neighbour, and the answer does that better."""
        if self.pool_variants is not None:
            return self.pool_variants
        return 1 if self.served_answer_weight(retriever) > 0 else DEFAULT_POOL_WITHOUT_ANSWERS

    def served_answer_weight(self, retriever: RetrieverLike) -> float:
        """The answer weight `retriever`'s build is served with: 0 when it encoded no answers, else the
        configured one rounded to the nearest weight its calibration was fitted for."""
        if self.answer_weight <= 0 or getattr(retriever, "answer_vectors", None) is None:
            return 0.0
        return nearest_weight(self.answer_weight)

    def decision_summary(self, retriever: RetrieverLike) -> dict:
        """How `retriever`'s build is scored and decided: the scoring in force, the default threshold and
        its expected precision, and the build's threshold -> expected precision / answer rate table."""
        pool, weight = self.served_pool(retriever), self.served_answer_weight(retriever)
        decider = self.decider
        ref = decider.reference(retriever, pool, weight) if self.scoring == "model" else None
        table = decider.table(retriever, pool, weight) if ref is not None else None
        threshold = decider.threshold(None, table)
        return {
            "scoring": "model" if ref is not None else "calibration",
            "threshold": threshold,
            "expected_precision": decider.decide([], threshold, table).expected_precision,
            "target_precision": decider.target_precision,
            "oos_share": decider.oos_share,
            "model_labels": (decider.model.meta.get("kb_labels") if decider.model is not None else None),
            "traffic_queries": decider.traffic_queries(retriever) if ref is not None else None,
            "table": table,
        }

    def attach_stages(self, retriever: RetrieverLike) -> None:
        """Stages that keep something per build (`attach(retriever)`: the Siamese matcher's stored phrasing
        vectors) are shown the build this call is answered from."""
        for stage in self.stages:
            attach = getattr(stage, "attach", None)
            if attach is not None:
                attach(retriever)

    def stage_stack(self) -> tuple[float, float, float] | None:
        """(a, b, c) of the single configured stage when the served decision model was fitted with it on
        this KB's labels (`faq index calibrate`), else None."""
        model = self.decider.model
        if model is None or len(self.stages) != 1:
            return None
        found = (model.meta.get("stages") or {}).get(self.stages[0].id)
        return tuple(float(x) for x in found) if found else None  # type: ignore[return-value]

    def stacked_rerank(self, request: MatchQuery, candidates: list[FaqMatch], retriever: RetrieverLike, pool: int,
                       weight: float, stack: tuple[float, float, float]) -> list[FaqMatch]:
        """The `+rerank` arm with a stage fitted on the KB's labels: the decision model's probability and
        the stage's own (weight 1) stacked, P = sigmoid(a * logit p_stage + b * logit p_model + c)."""
        import copy

        from app.decision import stacked

        ref = self.decider.reference(retriever, pool, weight)
        head = self.decider.rescore(request.query, candidates, retriever, ref)[: max(request.top_k, WINDOW)]
        if not head:
            return []
        pure = self._pure_stage
        if pure is None or pure.id != self.stages[0].id:  # the stage alone (weight 1), made once
            pure = self._pure_stage = copy.copy(self.stages[0])
            pure.weight = 1.0
        p_stage = np.asarray(pure.rescore(request.query, head), dtype=np.float64)
        p = stacked(stack, p_stage, np.array([m.score for m in head]))
        out = [replace(m, first_score=m.score, score=float(x)) for m, x in zip(head, p.tolist())]
        out.sort(key=lambda m: (-m.score, m.faq_id))
        return out[: request.top_k]

    def rerank(self, request: MatchQuery, candidates: list[FaqMatch]) -> list[FaqMatch]:
        """The `+rerank` arms: each stage re-scores the top `rerank_k` FAQs (their scores so far are its
        prior); the last stage's probability becomes the score and the order."""
        if not self.stages:
            raise NoRerankerError("no re-ranker installed: set FAQ_RERANKER to a re-ranker folder")
        head = candidates[: max(request.top_k, self.rerank_k)]
        for stage in self.stages:
            if not head:
                return []
            probs = np.asarray(stage.rescore(request.query, head), dtype=np.float64)
            head = [replace(m, score=float(p)) for m, p in zip(head, probs.tolist())]
            head.sort(key=lambda m: (-m.score, m.faq_id))
        return head[: request.top_k]

    def retrieve(self, requests: Sequence[MatchQuery], vecs: np.ndarray, retriever: RetrieverLike) -> list[list[Any]]:
        """Variant hits (with cosine) per query from its arm's recall stage: ANN, or BM25 candidates."""
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
            for i, found in zip(ann_rows, deepen(retriever, sub_vecs, [r.top_k for r in sub], retriever.search(sub_vecs, k), k)):
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


#: `served_pool` for a build without answer evidence
DEFAULT_POOL_WITHOUT_ANSWERS = 2


class NoIndexError(RuntimeError):
    """No retriever is loaded (no build yet, or the current build could not be loaded)."""


class NoRerankerError(RuntimeError):
    """A `+rerank` arm was asked for but no re-ranker is installed."""


# ---------------------------------------------------------------------------------------------
# assembly
# ---------------------------------------------------------------------------------------------
def encoder_spec(settings: Settings, manifest: dict | None = None) -> str:
    """The encoder to load: FAQ_ENCODER, else the one that built `manifest` (a served index must be
    queried with its own encoder), else the default."""
    if settings.encoder:
        return settings.encoder
    if (manifest or {}).get("encoder_spec"):
        return str(manifest["encoder_spec"])
    return default_encoder(settings)


def encoder_runtime(settings: Settings, manifest: dict | None = None) -> str:
    """The encoder runtime to load: FAQ_ENCODER_RUNTIME, else the one that built `manifest` (builds
    from before runtimes were recorded ran PyTorch), else "auto"."""
    if settings.encoder_runtime:
        return settings.encoder_runtime
    if manifest:
        return str(manifest.get("encoder_runtime", "torch"))
    return "auto"


def load_configured_encoder(settings: Settings, manifest: dict | None = None, spec: str | None = None):
    """The encoder a service or a build runs: `spec` (else `encoder_spec`) on `encoder_runtime`."""
    from models.encoders.load import load_encoder

    return load_encoder(spec or encoder_spec(settings, manifest), runtime=encoder_runtime(settings, manifest),
                        threads=settings.encoder_threads, device=settings.device, cache_dir=settings.mpnet_cache)


def default_encoder(settings: Settings) -> str:
    """The encoder used when none is configured: mpnet, the most accurate zero-shot base measured
    (docs/results.md), when its packages are installed; else MiniLM. Fine-tuned models are compared
    with it."""
    from models.encoders.load import default_encoder_spec

    return default_encoder_spec(settings.mpnet_cache)


def lexical_engine(settings: Settings) -> str:
    """The lexical engine FAQ_LEXICAL_ENGINE names ("auto": Elasticsearch when FAQ_ES_URL is set, else tantivy)."""
    from index.lexical import resolve_engine

    return resolve_engine(settings.lexical_engine, settings.es_url)


def load_rerank_stages(settings: Settings, path: str | None = None, weight: float | None = None) -> list[RerankStage]:
    """The re-ranking stages of FAQ_RERANKER (or `path`): one folder, or several separated by commas, run
    in that order; each is a `faq train reranker` cross-encoder, a `faq train mmaicm` matcher, a
    `faq train analogy` model or a `faq train siamese` matcher (told apart by its config's `architecture`). FAQ_RERANK_WEIGHT (or `weight`) pools each stage with the
    score before it; None = each folder's own `fusion_weight`. None configured: no stages. Raises what
    loading a folder raises."""
    spec = path or settings.reranker
    if not spec:
        return []
    from models.encoders.base import pick_device
    from models.folder import architecture_of

    weight = settings.rerank_weight if weight is None else weight
    stages: list[RerankStage] = []
    for folder in (part.strip() for part in spec.split(",") if part.strip()):
        if architecture_of(folder) == "siamese":
            stages.append(load_siamese_stage(folder, weight, runtime=settings.rerank_runtime, device=settings.device,
                                             cache_dir=settings.mpnet_cache))
            continue
        if architecture_of(folder) == "analogy":
            from models.matchers.analogy import load_analogy

            stages.append(AnalogyStage(load_analogy(folder, device=settings.device), weight))
            continue
        if architecture_of(folder) == "mmaicm":
            runtime = settings.rerank_runtime
            if runtime == "auto":  # fp32 ONNX for MiniLM's states: the numbers it was trained on, 3x faster than eager
                runtime = "onnx" if pick_device(settings.device) == "cpu" else "torch"
            stages.append(load_mmaicm_stage(folder, weight, runtime=runtime, device=settings.device,
                                            cache_dir=settings.mpnet_cache))
            continue
        from models.matchers.cross_encoder import load_reranker

        reranker = load_reranker(folder, runtime=settings.rerank_runtime, threads=settings.torch_threads,
                                 device=settings.device)
        stages.append(CrossEncoderStage(reranker, weight))
    return stages


def load_siamese_stage(path: str, weight: float | None = None, runtime: str = "auto",
                       device: str | None = None, cache_dir: Path | None = None) -> SiameseStage:
    """A `SiameseStage` from a `faq train siamese` folder; "auto" runs it on CUDA when there is one, else on
    the CPU with MiniLM word states (if the model uses them) on fp32 ONNX: the numbers it was trained on,
    several times faster than eager PyTorch."""
    from models.encoders.base import pick_device
    from models.matchers.siamese import load_siamese

    if runtime == "auto":
        device = device or pick_device()
        runtime = "torch" if device.startswith("cuda") else "onnx"
    if runtime == "onnx-int8":  # the Siamese head was trained on fp32 states: int8 would shift them
        runtime = "onnx"
    return SiameseStage(load_siamese(path, device=device, runtime=runtime, cache_dir=cache_dir), weight)


def vector_stages(settings: Settings, path: str | None = None) -> list[SiameseStage]:
    """The stages of FAQ_RERANKER (or `path`) whose phrasing vectors an index build stores (the Siamese
    matchers), loaded; the other folders are not loaded. Raises what loading a folder raises."""
    spec = path or settings.reranker
    if not spec:
        return []
    from models.folder import architecture_of

    return [load_siamese_stage(folder, runtime=settings.rerank_runtime, device=settings.device,
                               cache_dir=settings.mpnet_cache)
            for folder in (part.strip() for part in spec.split(",") if part.strip())
            if architecture_of(folder) == "siamese"]


def load_mmaicm_stage(path: str, weight: float | None = None, answer_share: float = 0.5,
                      device: str | None = None, runtime: str = "torch", cache_dir: Path | None = None) -> MmaicmStage:
    """An `MmaicmStage` from a `faq train mmaicm` folder. Raises what loading the folder raises."""
    from models.matchers.mmaicm import load_mmaicm

    return MmaicmStage(load_mmaicm(path, device=device, runtime=runtime, cache_dir=cache_dir), weight=weight,
                       answer_share=answer_share)


def served_model_path(settings: Settings) -> Any:
    """The decision model file served: FAQ_DECISION_MODEL, else this KB's own (`faq index calibrate`), else
    None (the shipped cross-KB model)."""
    if settings.decision_model is not None:
        if not settings.decision_model.is_file():
            raise ValueError(f"FAQ_DECISION_MODEL={settings.decision_model}: no such file")
        return settings.decision_model
    return settings.kb_decision_model if settings.kb_decision_model.is_file() else None


def build_pipeline(settings: Settings, encoder: Any, retriever: Callable[[], RetrieverLike | None] | RetrieverLike, *,
                   lexical: Callable[[RetrieverLike], Any] | None = None, stages: Sequence[RerankStage] = (),
                   pool_variants: int | None = None, rerank_k: int | None = None,
                   lexical_k: int | None = None, answer_weight: float | None = None,
                   cache_size: int | None = None) -> Pipeline:
    """The matching pipeline: settings give every option a caller does not override."""
    return Pipeline(
        encoder, retriever, lexical=lexical,
        lexical_k=settings.lexical_k if lexical_k is None else lexical_k,
        stages=stages,
        rerank_k=settings.rerank_k if rerank_k is None else rerank_k,
        pool_variants=settings.pool_variants if pool_variants is None else pool_variants,
        answer_weight=settings.answer_weight if answer_weight is None else answer_weight,
        cache_size=settings.query_cache_size if cache_size is None else cache_size,
        decider=Decider(load_model(served_model_path(settings)) if settings.scoring == "model" else None,
                        oos_share=settings.oos_share,
                        target_precision=settings.target_precision, default_threshold=settings.default_threshold),
        scoring=settings.scoring,
    )
