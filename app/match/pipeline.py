"""`Pipeline`: what the match path's steps share for one KB (encoder, stages, decider, query cache, turn and
small-talk models, the served build), the encoder call, and the entry points.

`Pipeline.run` is the one entry point for encoded work: every query of several groups encoded in one call,
each group ranked on its own retriever by the chain (chain.py), the results kept in the query cache. The
service's batcher calls it (after `cache.cached`), and so does `match_many`. The pipeline is assembled from
settings in one place, app/match/assembly.py `build_pipeline`. Arms (app/match/arms.py): `MatchQuery.arm` picks the
recall stage (`ann` or `lexical`), `+rerank` adds the stages.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from app.conversation.small_talk.responder import SmallTalk
from app.match.decider import Decider, native_language, query_language
from app.match import cache, chain
from app.match.chain import run_pipelines
from app.match.cache import QueryCache
from app.match.respond import candidates_in_context
from app.match.request import FaqMatch, Group, MatchQuery, MatchResult, NoIndexError
from app.match.served import OpenBuilds, ServedBuild
from app.stages.base import Stage
from index.answers import nearest_weight
from index.candidates import RetrieverLike
from index.turns import TurnCandidates, load_turn_model
from models.encoders.base import query_side

#: `served_pool` for a build without answer evidence
DEFAULT_POOL_WITHOUT_ANSWERS = 2


class Pipeline:
    """Encoder + (current) retriever [+ re-ranking stages] -> `MatchResult`s.

    `retriever_provider` is either a Retriever or a zero-argument callable returning the current one (the
    service passes its state's getter so a hot swap is seen by the next call). The retriever is read ONCE per
    `match` call, so every query of a call is answered by the same index version even if a swap happens
    meanwhile; callers can also pin one with `retriever=`.

    What is computed from a retriever (cached results, the decider's per-build state, the build's lexical
    index and stage vectors) is kept on its `ServedBuild` (`served`, app/match/served.py). `builds` holds the
    build versions open; the service passes its KB's, so a new pipeline of the KB (new settings) keeps them.
    """

    def __init__(self, encoder: Any, retriever_provider: Callable[[], RetrieverLike | None] | RetrieverLike, *,
                 lexical: Callable[[RetrieverLike], Any] | None = None, lexical_k: int = 30,
                 stages: Sequence[Stage] = (), rerank_k: int = 20, pool_variants: int | None = 1,
                 answer_weight: float = 0.0, cache_size: int = 0, decider: Decider | None = None,
                 scoring: str = "model", builds: OpenBuilds | None = None, small_talk: SmallTalk | None = None,
                 turn_model: Any = None):
        self.encoder = encoder
        # "hi", "thanks", "are you a bot?": answered as small talk, not matched (app/conversation/small_talk); None: off
        self.small_talk = small_talk
        # a turn whose previous FAQ is known: its candidates scored with that FAQ as evidence (index/turns.py)
        self.turn_model = load_turn_model() if turn_model is None else (turn_model or None)
        # scores (the cross-KB decision model) and answer / clarify / abstain; None: calibrated cosines only
        self.decider = decider if decider is not None else Decider(None)
        self.scoring = scoring  # "model" | "calibration" (app/settings.py)
        # finished results of repeated queries (0 = off); see app/match/cache.py
        self.cache = QueryCache(cache_size)
        self.builds = builds if builds is not None else OpenBuilds()
        self._served: ServedBuild | None = None
        self._served_lock = threading.Lock()
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

    def served(self, retriever: RetrieverLike) -> ServedBuild:
        """`retriever`'s `ServedBuild`: the one invalidation rule of what the pipeline computes from a build is
        that another retriever (a swap, a KB refresh, a caller's own) gets a new one. The last one is kept,
        so a request pinned to a retriever no longer served starts its own."""
        served = self._served
        if served is not None and served.retriever is retriever:
            return served
        with self._served_lock:
            served = self._served
            if served is None or served.retriever is not retriever:
                served = self._served = ServedBuild(retriever, self.builds, self.cache.size)
            return served

    # -- entry points ------------------------------------------------------------------------------
    def match(self, queries: Sequence[str], top_k: int = 5, threshold: float = 0.5, *,
              retriever: RetrieverLike | None = None) -> list[MatchResult]:
        """Match `queries` with the same options. See `match_many` for per-query options."""
        return self.match_many([MatchQuery(q, top_k, threshold) for q in queries], retriever=retriever)

    def match_many(self, requests: Sequence[MatchQuery], *, retriever: RetrieverLike | None = None) -> list[MatchResult]:
        """Answer `requests` against one retriever: repeats from the query cache, the others through `run`."""
        if not requests:
            return []
        retriever = retriever if retriever is not None else self.current_retriever()
        if retriever is None:
            raise NoIndexError()
        t0 = time.perf_counter()
        found = cache.cached(self, requests, retriever)
        todo = cache.missing(found)
        if not todo:
            return found  # type: ignore[return-value]
        [fresh] = self.run([([requests[i] for i in todo], retriever, t0)])
        if isinstance(fresh, BaseException):
            raise fresh
        return cache.merge(found, todo, fresh)

    def run(self, groups: Sequence[Group], *,
            on_encode: Callable[[int], Any] | None = None) -> list[list[MatchResult] | BaseException]:
        """Answer groups of queries not in the cache: every query encoded in ONE encoder call, then each
        group ranked on its own retriever and its results kept in the query cache. A group that fails gets
        its exception as its outcome and the others are still answered; an encoder failure is every
        group's. `on_encode(n)` hears the size of the encoder call (the service's batch-size metric).
        Timings: `encode` is that call's, a group's `total` runs from its submitted time."""
        return run_pipelines([(self, group) for group in groups], on_encode=on_encode)

    def cached(self, requests: Sequence[MatchQuery], retriever: RetrieverLike) -> list[MatchResult | None]:
        return cache.cached(self, requests, retriever)

    def encode(self, texts: Sequence[str], languages: Sequence[str | None] | None = None) -> np.ndarray:
        """The queries' vectors; an encoder routed by language gets `languages` when every query's is known (the
        service's detections, so a query is routed in the language its response names)."""
        routing = {}
        if languages is not None and None not in languages and getattr(self.encoder, "routed_by_language", False):
            routing["languages"] = list(languages)
        vecs = query_side(self.encoder)(list(texts), batch_size=max(1, min(64, len(texts))), **routing)
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def rank(self, requests: Sequence[MatchQuery], vecs: np.ndarray, retriever: RetrieverLike, *,
             encode_ms: float = 0.0, started: float | None = None) -> list[MatchResult]:
        """Already-encoded queries through the chain (app/match/chain.py)."""
        return chain.rank(self, requests, vecs, retriever, encode_ms=encode_ms, started=started)

    def rank_group(self, group: Group, vecs: np.ndarray, encode_ms: float,
                   started: float) -> list[MatchResult] | BaseException:
        """`rank` for one group of `run` (its queries' vectors from the shared encoder call), its results
        kept in the query cache; a failure is returned as the group's outcome."""
        requests, retriever, submitted = group
        try:
            results = self.rank(requests, vecs, retriever, encode_ms=encode_ms,
                                started=started if submitted is None else submitted)
            cache.remember(self, requests, retriever, results)
            return results
        except Exception as exc:
            return exc

    # -- how a build is served ---------------------------------------------------------------------
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

    def language_curve(self, request: MatchQuery, retriever: RetrieverLike, language: str | None = None) -> Any:
        """The encoder's curve for a query that is not English (multilingual mode: models/encoders/multilingual.py
        `LanguageCurve`): its language's when the KB is in another one, the `native` one when the KB is
        written in it (it shares the KB's words, which the model reads as it learnt to); else None. `language`:
        the query's, when the caller has it already."""
        curves = getattr(self.encoder, "language_curves", None)
        if not curves:
            return None
        language = query_language(request.query, language or request.language)
        if language == "en":
            return None
        if native_language(request.query, retriever, language):
            return curves.get("native")
        return curves.get(language) or curves.get("*")

    def turn_candidates(self, query: str, previous: str, scored: Sequence[FaqMatch], retriever: RetrieverLike,
                        vec: np.ndarray, selection: Any = None, shut: frozenset[str] = frozenset(),
                        prompted: frozenset[str] = frozenset()) -> TurnCandidates | None:
        """The turn model's candidates (app/match/respond.py `candidates_in_context`)."""
        return candidates_in_context(query, previous, scored, retriever, vec, selection, shut, prompted)

    def decision_summary(self, retriever: RetrieverLike) -> dict:
        """How `retriever`'s build is scored and decided: the scoring in force, the default threshold and
        its expected precision, and the build's threshold -> expected precision / answer rate table."""
        pool, weight = self.served_pool(retriever), self.served_answer_weight(retriever)
        decider, build = self.decider, self.served(retriever).decisions
        ref = decider.reference(retriever, pool, weight, build) if self.scoring == "model" else None
        table = decider.table(retriever, pool, weight, build) if ref is not None else None
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

    def lexical_index(self, retriever: RetrieverLike) -> Any:
        """The LexicalIndex of `retriever`'s build (opened once per build version). Raises LexicalUnavailable."""
        if self.lexical is None:
            from index.lexical import LexicalUnavailable

            raise LexicalUnavailable("no lexical index configured for this pipeline")
        return self.builds.files(retriever).lexical(retriever, self.lexical)

