"""The matching pipeline: a request's path from query texts to decided results.

    query texts -> encoder (one call per batch)
      -> candidate generation per arm: ANN (Annoy + delta segment + tombstones) or BM25 (index/candidates.py)
      -> answer evidence (builds whose KB has real answers, index/answers.py): FAQs recalled through their
         answers too, each FAQ's cosine mixed with its answer's: (1 - w) * phrasing + w * answer
      -> FAQ grouping and pooling, scored by the build's calibration: p = sigmoid(a * cos + b); FAQs marked
         `context_only` (answered only as the follow-up of an FAQ that prompts to them) are dropped here
      -> re-ranking stages (the `+rerank` arms): each re-scores the top `rerank_k` FAQs (app/stages)
      -> decision: answer = the best FAQ when its probability >= threshold, else none

`Pipeline.run` is the one entry point for encoded work: every query of several groups encoded in one
call, each group ranked on its own retriever, the results kept in the exact query cache
(app/query_cache.py). The service's batcher calls it (after `cached`), and so does `match_many`.

The pipeline is assembled from settings in one place, app/assembly.py `build_pipeline`.
Arms (app/arms.py): `MatchQuery.arm` picks the recall stage (`ann` or `lexical`), `+rerank` adds the stages.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from app.chitchat.responder import SmallTalk
from app.arms import base_arm, uses_stages
from app.decision import Decider, native_language, query_language
from app.query_cache import QueryCache, cache_text
from app.served_build import OpenBuilds, ServedBuild
from app.stages.base import Stage
from app.turns import NO_TURN, Turn, plan_turn
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
from index.decision import WINDOW
from index.turns import FEATURES, TurnCandidates, first_question, load_turn_model
from index.turns import candidates as turn_candidates
from models.encoders.base import query_side

__all__ = ["FaqMatch", "Group", "MatchQuery", "MatchResult", "NoIndexError", "NoStagesError", "Pipeline",
           "run_pipelines"]


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
    filter: Any = None  # kb.filters.FaqFilter: only the FAQs it keeps are candidates (None: every FAQ)
    turn: Turn | None = None  # the previous turn (app/turns.py)
    language: str | None = None  # the query's language (models/language.py), when the caller detected it

    def selection(self, retriever: RetrieverLike) -> Any:
        """The retriever's index/selection.py `Selection` of this query's filter, or None without one."""
        if self.filter is None or self.filter.is_empty:
            return None
        return retriever.select(self.filter)


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
    context: dict = field(default_factory=lambda: NO_TURN.report())  # what the previous turn changed (app/turns.py)
    chitchat: dict | None = None  # decision "chitchat": {"kind", "answer"} (app/chitchat)


#: one group of `Pipeline.run`: its queries, the retriever that answers them, and when they were submitted
#: (a time.perf_counter() reading, where their `total` timing starts; None: when `run` starts)
Group = tuple[Sequence[MatchQuery], RetrieverLike, float | None]


# ---------------------------------------------------------------------------------------------
# the pipeline
# ---------------------------------------------------------------------------------------------
class Pipeline:
    """Encoder + (current) Retriever [+ re-ranking stages] -> `MatchResult`s. Built by app/assembly.py `build_pipeline`.

    `retriever_provider` is either a Retriever or a zero-argument callable returning the current one
    (the service passes its state's getter so a hot swap is seen by the next call). The retriever is read
    ONCE per `match` call, so every query of a call is answered by the same index version even if a
    swap happens meanwhile; callers can also pin one with `retriever=`.

    What is computed from a retriever (cached results, the decider's per-build state, the build's lexical
    index and stage vectors) is kept on its `ServedBuild` (`served`, app/served_build.py). `builds` holds the
    build versions open; the service passes its KB's, so a new pipeline of the KB (new settings) keeps them.
    """

    def __init__(self, encoder: Any, retriever_provider: Callable[[], RetrieverLike | None] | RetrieverLike, *,
                 lexical: Callable[[RetrieverLike], Any] | None = None, lexical_k: int = 30,
                 stages: Sequence[Stage] = (), rerank_k: int = 20, pool_variants: int | None = 1,
                 answer_weight: float = 0.0, cache_size: int = 0, decider: Decider | None = None,
                 scoring: str = "model", builds: OpenBuilds | None = None, small_talk: SmallTalk | None = None,
                 turn_model: Any = None):
        self.encoder = encoder
        # "hi", "thanks", "are you a bot?": answered as small talk, not matched (app/chitchat); None: off
        self.small_talk = small_talk
        # a turn whose previous FAQ is known: its candidates scored with that FAQ as evidence (index/turns.py)
        self.turn_model = load_turn_model() if turn_model is None else (turn_model or None)
        # scores (the cross-KB decision model) and answer / clarify / abstain; None: calibrated cosines only
        self.decider = decider if decider is not None else Decider(None)
        self.scoring = scoring  # "model" | "calibration" (app/settings.py)
        # finished results of repeated queries (0 = off); see QueryCache
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
        """Answer `requests` against one retriever: repeats from the query cache, the others through `run`."""
        if not requests:
            return []
        retriever = retriever if retriever is not None else self.current_retriever()
        if retriever is None:
            raise NoIndexError("no index built: run `faq index build`")
        t0 = time.perf_counter()
        found = self.cached(requests, retriever)
        todo = [i for i, r in enumerate(found) if r is None]
        if todo:
            [fresh] = self.run([([requests[i] for i in todo], retriever, t0)])
            if isinstance(fresh, BaseException):
                raise fresh
            for i, result in zip(todo, fresh):
                found[i] = result
        return found  # type: ignore[return-value]

    def run(self, groups: Sequence[Group], *,
            on_encode: Callable[[int], Any] | None = None) -> list[list[MatchResult] | BaseException]:
        """Answer groups of queries not in the cache: every query encoded in ONE encoder call, then each
        group ranked on its own retriever and its results kept in the query cache. A group that fails gets
        its exception as its outcome and the others are still answered; an encoder failure is every
        group's. `on_encode(n)` hears the size of the encoder call (the service's batch-size metric).
        Timings: `encode` is that call's, a group's `total` runs from its submitted time."""
        return run_pipelines([(self, group) for group in groups], on_encode=on_encode)

    # -- the query cache -------------------------------------------------------------------------
    def _cache_key(self, request: MatchQuery, options: tuple) -> tuple:
        flt = None if request.filter is None or request.filter.is_empty else request.filter.key()
        turn = None if request.turn is None else request.turn.key()
        return (cache_text(request.query), request.arm, request.top_k, request.threshold, flt, turn, options)

    def cached(self, requests: Sequence[MatchQuery], retriever: RetrieverLike) -> list[MatchResult | None]:
        """Each request's result from the query cache (as this request's: its own text, `cached` set,
        zero stage timings), or None."""
        if self.cache.size == 0:
            return [None] * len(requests)
        t0 = time.perf_counter()
        options = self._options_key()
        served = self.served(retriever)
        out: list[MatchResult | None] = []
        for request in requests:
            hit = self.cache.get(served, self._cache_key(request, options))
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
        served = self.served(retriever)
        for request, result in zip(requests, results):
            self.cache.put(served, self._cache_key(request, options), result)

    def _options_key(self) -> tuple:
        """Everything of the pipeline's own that changes a ranking (evaluations retune these live)."""
        return (self.answer_weight, self.pool_variants, self.rerank_k, self.lexical_k, self.scoring,
                id(self.decider.model), self.decider.oos_share, self.decider.target_precision,
                id(self.decider.traffic),
                tuple((s.id, getattr(s, "weight", None)) for s in self.stages),
                None if self.small_talk is None else self.small_talk.key(), id(self.turn_model))

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

    def encode(self, texts: Sequence[str], languages: Sequence[str | None] | None = None) -> np.ndarray:
        """The queries' vectors; an encoder routed by language gets `languages` when every query's is known (the
        service's detections, so a query is routed in the language its response names)."""
        routing = {}
        if languages is not None and None not in languages and getattr(self.encoder, "routed_by_language", False):
            routing["languages"] = list(languages)
        vecs = query_side(self.encoder)(list(texts), batch_size=max(1, min(64, len(texts))), **routing)
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
        selections = [r.selection(retriever) for r in requests]
        plans = [plan_turn(r.turn, r.query, retriever) for r in requests]
        hits_per_query = self.retrieve(requests, vecs, retriever, selections)
        # after the search: a retriever that cannot search leaves the served build of the last one in place
        served = self.served(retriever)
        build = served.decisions
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
                    top_k = max(request.top_k, self.rerank_k) if uses_stages(request.arm) else request.top_k
                    only = None if selections[i] is None else selections[i].faq_ids
                    hits = hits_per_query[i] = answer_hits(retriever, answer_vectors, cosines[i], vecs[i], hits, top_k,
                                                           only)
                row_of = answer_vectors.row_of
                answer_cos[i] = {f: float(cosines[i, row_of[f]]) for f in {h.faq_id for h in hits} if f in row_of}
        # a filter that hides the question's own FAQ must not make a weak candidate look certain: the FAQs
        # outside it that beat the filter's best are its rivals in the decision model's features, then dropped
        rival_rows = [i for i, (r, sel) in enumerate(zip(requests, selections))
                      if sel is not None and base_arm(r.arm) == "ann" and not uses_stages(r.arm)
                      and self.scoring == "model"]
        open_hits: dict[int, tuple[list, dict[str, float] | None, float | None]] = {}
        if rival_rows:
            found = self.retrieve([replace(requests[i], filter=None) for i in rival_rows], vecs[rival_rows], retriever)
            for i, hits in zip(rival_rows, found):
                a_cos, floor = None, None
                if weight > 0:
                    floor = min((h.cosine for h in hits), default=None)
                    hits = answer_hits(retriever, answer_vectors, cosines[i], vecs[i], hits, requests[i].top_k, None)
                    row_of = answer_vectors.row_of
                    a_cos = {f: float(cosines[i, row_of[f]]) for f in {h.faq_id for h in hits} if f in row_of}
                open_hits[i] = (hits, a_cos, floor)
        retrieve_ms = (time.perf_counter() - t1) * 1000.0

        pool = self.served_pool(retriever)
        calibration = calibration_for(retriever.manifest, self.encoder, pool, weight)
        answers = retriever.answers
        ranked: list[list[FaqMatch]] = []
        t2 = time.perf_counter()
        # the ANN list holds every phrasing down to its lowest cosine, so a FAQ's phrasings missing from it
        # are known to score below it; BM25 candidates carry no such bound: pool over what was scored
        counts = variant_counts(retriever) if pool > 1 else None
        decided = self.scoring == "model" and self.decider.reference(retriever, pool, weight, build) is not None
        hidden = getattr(retriever, "context_only", frozenset())
        rivals: list[list[FaqMatch]] = [[] for _ in requests]
        for i, (request, hits, a_cos, floor, selection, plan) in enumerate(zip(
                requests, hits_per_query, answer_cos, floors, selections, plans)):
            reranked = uses_stages(request.arm)
            depth = max(request.top_k, self.rerank_k) if reranked else max(request.top_k, WINDOW if decided else 0)
            grouped = group_hits(hits, answers, calibration, depth,
                                 pool=pool, counts=counts if base_arm(request.arm) == "ann" else None,
                                 answer_cos=a_cos, answer_weight=weight, floor=floor)
            shut = hidden - plan.prompted if plan.prompted else hidden
            if shut:  # before the stages and the decision: they judge only what may be answered
                grouped = [m for m in grouped if m.faq_id not in shut]
            if selection is not None:  # the search kept to the filter already; this is the guarantee
                grouped = [m for m in grouped if m.faq_id in selection.faq_ids]
            if i in open_hits and decided:
                o_hits, o_cos, o_floor = open_hits[i]
                best = grouped[0].score if grouped else 0.0
                rivals[i] = [m for m in group_hits(o_hits, answers, calibration, RIVALS + 1, pool=pool, counts=counts,
                                                   answer_cos=o_cos, answer_weight=weight, floor=o_floor)
                             if m.faq_id not in selection.faq_ids and m.faq_id not in shut and m.score > best + RIVAL_MARGIN][:RIVALS]
            if reranked:
                # the stages pool with the build's cosine curve, not the decision model's probability: a
                # convex pool of two calibrated probabilities is under-confident (docs/results.md); a stage
                # fitted on the KB's labels (`faq index calibrate`) is stacked with the model instead
                grouped = [replace(m, first_score=m.score) for m in grouped]
                stack = self.stage_stack() if decided else None
                if stack is not None:
                    ranked.append(self.stacked_rerank(request, grouped, retriever, pool, weight, stack))
                    continue
            ranked.append(self.rerank(request, grouped, served) if reranked else grouped)
        rerank_ms = (time.perf_counter() - t2) * 1000.0 if any(uses_stages(r.arm) for r in requests) else 0.0
        t3 = time.perf_counter()
        decider = self.decider
        ref = decider.reference(retriever, pool, weight, build) if self.scoring == "model" else None
        table = build_table = decider.table(retriever, pool, weight, build) if ref is not None else None
        results: list[MatchResult] = []
        talk = self.small_talk.replies([r.query for r in requests], vecs) if self.small_talk is not None else \
            [None] * len(requests)
        for i, (request, matches, plan, selection, reply) in enumerate(zip(requests, ranked, plans, selections, talk)):
            staged = uses_stages(request.arm)  # a stage's probability stays the score: the table is not its
            in_context = None
            if ref is not None and not staged:
                # a question in the KB's own language (not English) shares its words read in that language
                language = query_language(request.query, request.language)
                words = native_language(request.query, retriever, language) or "en"
                if rivals[i]:
                    rivaled = sorted(matches + rivals[i], key=lambda m: -m.score)
                    matches = [m for m in decider.rescore(request.query, rivaled, retriever, ref, build, words)
                               if m.faq_id in selection.faq_ids]
                else:
                    matches = decider.rescore(request.query, matches, retriever, ref, build, words)
                curve = self.language_curve(request, retriever, language)
                if curve is not None:  # the model learnt English queries: put another language's on its scale
                    matches = [replace(m, score=curve.apply(m.score)) for m in matches]
                    table = curve.table
                if plan.applied == "prompted" and self.turn_model is not None and plan.clicked is None:
                    in_context = self.context_ranked(request, matches, plan, selection, retriever, vecs[i])
                matches = (in_context if in_context is not None else matches)[: request.top_k]
            # the build's table describes the query alone: a turn scored with its previous one has none
            decision = decider.decide(matches, decider.threshold(request.threshold, table),
                                      None if staged or in_context is not None else table)
            table = build_table
            answer = matches[0] if decision.kind == "answer" else None
            kind, options, expected = decision.kind, list(decision.options), decision.expected_precision
            if plan.clicked is not None and (selection is None or plan.clicked in selection.faq_ids):
                # a prompt sent back names its FAQ: certain, whatever the search thought of the words
                found = next((m for m in matches if m.faq_id == plan.clicked), None)
                answer = FaqMatch(faq_id=plan.clicked, question=plan.prompt or request.query,
                                  answer=retriever.answers[plan.clicked][0], score=1.0,
                                  cosine=found.cosine if found else 1.0)
                matches = [answer] + [m for m in matches if m.faq_id != plan.clicked][: request.top_k - 1]
                kind, options, expected = "answer", [], None
            elif reply is not None:  # answered in the KB's voice; the FAQs stay listed for the curious
                answer, kind, options, expected = None, "chitchat", [], None
            results.append(
                MatchResult(
                    query=request.query,
                    matches=matches,
                    answer=answer,
                    decision=kind,
                    options=options,
                    threshold=decision.threshold,
                    expected_precision=expected,
                    context=plan.report() if in_context is None else {
                        "applied": plan.applied, "note": f"scored with the previous FAQ {request.turn.previous_faq_id!r} as evidence"},
                    chitchat=None if reply is None or kind != "chitchat" else reply.as_dict(),
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

    # -- a turn in context --------------------------------------------------------------------------
    def turn_candidates(self, query: str, previous: str, scored: Sequence[FaqMatch], retriever: RetrieverLike,
                        vec: np.ndarray, selection: Any = None, shut: frozenset[str] = frozenset(),
                        prompted: frozenset[str] = frozenset()) -> TurnCandidates | None:
        """The turn model's candidates for `query` after the FAQ `previous`, from the decision model's
        scored window of the query alone; None when the build has no answer vectors to compare FAQs by."""
        vectors = getattr(retriever, "answer_vectors", None)
        if vectors is None or previous not in vectors.row_of:
            return None
        answer_cos = vectors.cosines(vec[None, :])[0]
        prev_sim = vectors.vectors @ vectors.vectors[vectors.row_of[previous]]
        alone = {m.faq_id: m.score for m in scored[:WINDOW]}
        return turn_candidates(query, previous, alone, vectors.faq_ids, answer_cos, prev_sim,
                               None if selection is None else selection.faq_ids, shut, prompted)

    def context_ranked(self, request: MatchQuery, scored: list[FaqMatch], plan: Any, selection: Any,
                       retriever: RetrieverLike, vec: np.ndarray) -> list[FaqMatch] | None:
        """The candidates of a turn whose previous FAQ is known, scored by the turn model and best first."""
        hidden = getattr(retriever, "context_only", frozenset())
        shut = hidden - plan.prompted if plan.prompted else hidden
        assert self.turn_model is not None and request.turn is not None
        found = self.turn_candidates(request.query, request.turn.previous_faq_id, scored, retriever, vec,
                                     selection, shut, plan.prompted)
        if found is None or not found.faq_ids:
            return None
        probs = self.turn_model.prob(found.x)
        by_id = {m.faq_id: m for m in scored}
        cos = found.x[:, FEATURES.index("answer_cos")]
        out = []
        for faq_id, p, c in zip(found.faq_ids, probs.tolist(), cos.tolist()):
            m = by_id.get(faq_id)
            if m is None:
                m = FaqMatch(faq_id=faq_id, question=first_question(retriever, faq_id),
                             answer=retriever.answers[faq_id][0], score=0.0, cosine=c, answer_cosine=c)
            out.append(replace(m, score=float(p)))
        out.sort(key=lambda m: -m.score)
        return out

    def rank_group(self, group: Group, vecs: np.ndarray, encode_ms: float,
                   started: float) -> list[MatchResult] | BaseException:
        """`rank` for one group of `run` (its queries' vectors from the shared encoder call), its results
        kept in the query cache; a failure is returned as the group's outcome."""
        requests, retriever, submitted = group
        try:
            results = self.rank(requests, vecs, retriever, encode_ms=encode_ms,
                                started=started if submitted is None else submitted)
            self.remember(requests, retriever, results)
            return results
        except Exception as exc:
            return exc

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

        from models.scoring import stacked

        served = self.served(retriever)
        ref = self.decider.reference(retriever, pool, weight, served.decisions)
        words = native_language(request.query, retriever, request.language) or "en"
        head = self.decider.rescore(request.query, candidates, retriever, ref, served.decisions, words)[
            : max(request.top_k, WINDOW)]
        if not head:
            return []
        pure = served.pure_stage
        if pure is None or pure.id != self.stages[0].id:  # the stage alone (weight 1), made once per build
            pure = served.pure_stage = copy.copy(served.stage(self.stages[0]))
            pure.weight = 1.0
        p_stage = np.asarray(pure.rescore(request.query, head), dtype=np.float64)
        p = stacked(stack, p_stage, np.array([m.score for m in head]))
        out = [replace(m, first_score=m.score, score=float(x)) for m, x in zip(head, p.tolist())]
        out.sort(key=lambda m: (-m.score, m.faq_id))
        return out[: request.top_k]

    def rerank(self, request: MatchQuery, candidates: list[FaqMatch], served: ServedBuild | None = None) -> list[FaqMatch]:
        """The `+rerank` arms: each stage re-scores the top `rerank_k` FAQs (their scores so far are its
        prior); the last stage's probability becomes the score and the order. `served`: the build answered
        from (a stage reading stored vectors reads that build's)."""
        if not self.stages:
            raise NoStagesError("no re-ranker installed: set FAQ_RERANKER to a re-ranker folder")
        head = candidates[: max(request.top_k, self.rerank_k)]
        for stage in self.stages:
            stage = served.stage(stage) if served is not None else stage
            if not head:
                return []
            probs = np.asarray(stage.rescore(request.query, head), dtype=np.float64)
            head = [replace(m, score=float(p)) for m, p in zip(head, probs.tolist())]
            head.sort(key=lambda m: (-m.score, m.faq_id))
        return head[: request.top_k]

    def lexical_index(self, retriever: RetrieverLike) -> Any:
        """The LexicalIndex of `retriever`'s build (opened once per build version). Raises LexicalUnavailable."""
        if self.lexical is None:
            from index.lexical import LexicalUnavailable

            raise LexicalUnavailable("no lexical index configured for this pipeline")
        return self.builds.files(retriever).lexical(retriever, self.lexical)

    def retrieve(self, requests: Sequence[MatchQuery], vecs: np.ndarray, retriever: RetrieverLike,
                 selections: Sequence[Any] | None = None) -> list[list[Any]]:
        """Variant hits (with cosine) per query from its arm's recall stage: ANN, or BM25 candidates; each
        query inside its filter's selection (one search call per distinct filter)."""
        selections = list(selections) if selections is not None else [None] * len(requests)
        groups: dict[Any, list[int]] = {}
        for i, selection in enumerate(selections):
            groups.setdefault(None if selection is None else selection.key, []).append(i)
        if len(groups) > 1:
            hits: list[list[Any]] = [[] for _ in requests]
            for rows in groups.values():
                sub = self.retrieve([requests[i] for i in rows], vecs[rows], retriever, [selections[i] for i in rows])
                for i, found in zip(rows, sub):
                    hits[i] = found
            return hits
        selection = selections[0] if selections else None
        hits = [[] for _ in requests]
        ann_rows = [i for i, r in enumerate(requests) if base_arm(r.arm) == "ann"]
        lexical_rows = [i for i, r in enumerate(requests) if base_arm(r.arm) == "lexical"]
        if len(ann_rows) + len(lexical_rows) != len(requests):
            unknown = sorted({r.arm for r in requests} - {"ann", "lexical", "ann+rerank", "lexical+rerank"})
            raise ValueError(f"unknown arm(s) {unknown}")
        if ann_rows:
            # a re-ranked arm needs rerank_k FAQs from its recall stage, whatever top_k it returns
            sub = [replace(requests[i], top_k=max(requests[i].top_k, self.rerank_k)) if uses_stages(requests[i].arm)
                   else requests[i] for i in ann_rows]
            sub_vecs = vecs if len(ann_rows) == len(requests) else vecs[ann_rows]
            k = max(retrieve_depth(r.top_k) for r in sub)
            first = retriever.search(sub_vecs, k) if selection is None else retriever.search(sub_vecs, k, selection)
            for i, found in zip(ann_rows, deepen(retriever, sub_vecs, [r.top_k for r in sub], first, k, selection)):
                hits[i] = found
        if lexical_rows:
            index = self.lexical_index(retriever)
            k = max([self.lexical_k] + [requests[i].top_k for i in lexical_rows])
            found = lexical_hits(index, retriever, [requests[i].query for i in lexical_rows], vecs[lexical_rows], k,
                                 None if selection is None else selection.faq_ids)
            for i, row_hits in zip(lexical_rows, found):
                hits[i] = row_hits
        return hits


#: the FAQs outside a filter that compete with its candidates in the decision model: at most this many, and
#: only those whose first-stage score beats the filter's best by the margin (chosen on the realistic sets' dev
#: queries, evaluation/filter_calibration.py: a filter usually keeps the right FAQ, so a near rival outside
#: it says little, while a clearly better one says the question is about something the filter hides)
RIVALS = 1
RIVAL_MARGIN = 0.1

#: `served_pool` for a build without answer evidence
DEFAULT_POOL_WITHOUT_ANSWERS = 2


class NoIndexError(RuntimeError):
    """No retriever is loaded (no build yet, or the current build could not be loaded)."""


class NoStagesError(RuntimeError):
    """A `+rerank` arm was asked for but no stage is installed."""


def run_pipelines(work: Sequence[tuple[Pipeline, Group]], *,
                  on_encode: Callable[[int], Any] | None = None) -> list[list[MatchResult] | BaseException]:
    """`Pipeline.run` for groups of several pipelines (the KBs of one service, each with its own settings):
    one encoder call for all the groups whose pipelines share an encoder, then each group ranked by its
    own pipeline. Outcomes in the order of `work`."""
    outcomes: list[list[MatchResult] | BaseException] = [RuntimeError("not run")] * len(work)
    by_encoder: dict[int, list[int]] = {}
    for i, (pipeline, _) in enumerate(work):
        by_encoder.setdefault(id(pipeline.encoder), []).append(i)
    for members in by_encoder.values():
        queries = [q for i in members for q in work[i][1][0]]
        t0 = time.perf_counter()
        try:
            vecs = work[members[0]][0].encode([q.query for q in queries], [q.language for q in queries])
        except Exception as exc:
            for i in members:
                outcomes[i] = exc
            continue
        encode_ms = (time.perf_counter() - t0) * 1000.0
        if on_encode is not None:
            on_encode(len(queries))
        offset = 0
        for i in members:
            pipeline, group = work[i]
            n = len(group[0])
            outcomes[i] = pipeline.rank_group(group, vecs[offset: offset + n], encode_ms, t0)
            offset += n
    return outcomes
