"""The exact query cache: finished results of repeated queries, answered without encoding; and the one way
every caller uses it, check -> run -> merge:

    found = cached(pipeline, queries, retriever)     # each query's result from the cache, or None
    todo = missing(found)                            # the positions to run
    ... run [queries[i] for i in todo] (the batcher queues them; `Pipeline.match_many` runs them at once) ...
    merge(found, todo, fresh)                        # the results in the queries' order

The chain's results are kept (`remember`) by `Pipeline.rank_group`, whoever ran them.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from app.match.request import MatchQuery, MatchResult
from index.candidates import RetrieverLike

if TYPE_CHECKING:
    from app.match.served import ServedBuild

#: app/match/pipeline.py `Pipeline` (which imports this module)
Pipeline = Any


def cache_text(query: str) -> str:
    """The cache's view of a query: case and runs of whitespace dropped. Every encoder served lower-cases
    (MiniLM's and mpnet's tokenizers, the GloVe tokenizer) and splits on whitespace, so two texts equal
    here get the same vector."""
    return " ".join(query.split()).lower()


class QueryCache:
    """A pipeline's exact query cache: finished results (`MatchResult`), keyed by the
    normalised query text, its options (arm, top_k, threshold) and the pipeline's scoring options. Chatbot
    traffic repeats ("opening hours?"), and a hit skips the encoder, the search and the stages.

    The entries are the served build's (app/match/served.py `ServedBuild.results`): every index swap and
    every KB change serves another retriever, hence another `ServedBuild` with no entries, so a result is
    never served from an older index or KB. This object holds the size and the counters across builds.
    """

    def __init__(self, size: int):
        self.size = max(0, int(size))
        self._last: ServedBuild | None = None  # the build the last lookup was for: `len` and the counters
        self._lock = threading.Lock()
        self.hits = self.misses = self.invalidations = 0

    def _seen(self, served: ServedBuild) -> None:
        with self._lock:
            last = self._last
            if served is not last:
                if last is not None and len(last.results):
                    self.invalidations += 1
                self._last = served

    def get(self, served: ServedBuild, key: tuple) -> Any:
        """The result stored under `key` for `served`, else None."""
        self._seen(served)
        found = served.results.get(key)
        with self._lock:
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
        return found

    def put(self, served: ServedBuild, key: tuple, result: Any) -> None:
        if self.size == 0:
            return
        self._seen(served)
        served.results.put(key, result)

    def clear(self) -> None:
        """Empty the entries and the counters (a benchmark's clean start)."""
        with self._lock:
            last, self._last = self._last, None
            self.hits = self.misses = self.invalidations = 0
        if last is not None:
            last.results.clear()

    def __len__(self) -> int:
        last = self._last
        return len(last.results) if last is not None else 0


def cache_key(request: MatchQuery, options: tuple) -> tuple:
    flt = None if request.filter is None or request.filter.is_empty else request.filter.key()
    turn = None if request.turn is None else request.turn.key()
    return (cache_text(request.query), request.arm, request.top_k, request.threshold, flt, turn, options)


def options_key(pipeline: Pipeline) -> tuple:
    """Everything of the pipeline's own that changes a ranking (evaluations retune these live)."""
    decider = pipeline.decider
    return (pipeline.answer_weight, pipeline.pool_variants, pipeline.rerank_k, pipeline.lexical_k, pipeline.scoring,
            id(decider.model), decider.oos_share, decider.target_precision, id(decider.traffic),
            tuple((s.id, getattr(s, "weight", None)) for s in pipeline.stages),
            None if pipeline.small_talk is None else pipeline.small_talk.key(), id(pipeline.turn_model))


def cached(pipeline: Pipeline, requests: Sequence[MatchQuery], retriever: RetrieverLike) -> list[MatchResult | None]:
    """Each request's result from the query cache (as this request's: its own text, `cached` set, zero step
    timings), or None."""
    if pipeline.cache.size == 0:
        return [None] * len(requests)
    t0 = time.perf_counter()
    options = options_key(pipeline)
    served = pipeline.served(retriever)
    out: list[MatchResult | None] = []
    for request in requests:
        hit = pipeline.cache.get(served, cache_key(request, options))
        if hit is not None:
            ms = round((time.perf_counter() - t0) * 1000.0, 3)
            hit = replace(hit, query=request.query, cached=True,
                          timings_ms={"encode": 0.0, "retrieve": 0.0, "rerank": 0.0, "total": ms})
        out.append(hit)
    return out


def remember(pipeline: Pipeline, requests: Sequence[MatchQuery], retriever: RetrieverLike,
             results: Sequence[MatchResult]) -> None:
    if pipeline.cache.size == 0:
        return
    options = options_key(pipeline)
    served = pipeline.served(retriever)
    for request, result in zip(requests, results):
        pipeline.cache.put(served, cache_key(request, options), result)


def missing(found: Sequence[MatchResult | None]) -> list[int]:
    """The positions `cached` found nothing for: the queries to run."""
    return [i for i, r in enumerate(found) if r is None]


def merge(found: list[MatchResult | None], todo: Sequence[int], fresh: Sequence[MatchResult]) -> list[MatchResult]:
    """`found` with the fresh results in the positions `missing` gave."""
    for i, result in zip(todo, fresh):
        found[i] = result
    return found  # type: ignore[return-value]
