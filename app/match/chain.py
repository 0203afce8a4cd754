"""The match path: a batch of encoded queries, all answered by one retriever, through six steps in turn.

    query         its filter as the build's selection, its place in the conversation      (candidates.py)
    candidates    ANN or BM25 / Elasticsearch hits -> FAQs scored by the build's curve     (candidates.py)
    rerank        the `+rerank` arms' stages                                               (rerank.py)
    conversation  small talk recognised                                                    (respond.py)
    decision      each FAQ's probability -> answer / clarify / abstain, expected precision (respond.py)
    answers       a prompt sent back, small talk, or the decision, as `MatchResult`s        (respond.py)

The previous turn is read in the query step, before the search: it decides which context-only FAQs may be
candidates. The chain times the steps; the steps do the work. `Pipeline` (pipeline.py) holds what they
share, encodes, and owns the query cache (cache.py).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from app.match.arms import uses_stages
from app.match.batch import Batch, Item, Step
from app.match.candidates import CandidatesStep, QueryStep
from app.match.request import Group, MatchQuery, MatchResult
from app.match.rerank import RerankStep
from app.match.respond import AnswersStep, ConversationStep, DecisionStep
from index.candidates import RetrieverLike

#: app/match/pipeline.py `Pipeline` (which imports this module)
Pipeline = Any

STEPS: tuple[Step, ...] = (QueryStep(), CandidatesStep(), RerankStep(), ConversationStep(), DecisionStep(),
                           AnswersStep())
#: the response's timing each step's time is counted in (`timings_ms`: encode, retrieve, rerank, decide, total)
TIMED_AS = {"query": "retrieve", "candidates": "retrieve", "rerank": "rerank", "conversation": "decide",
            "decision": "decide", "answers": "decide"}


def rank(pipeline: Pipeline, requests: Sequence[MatchQuery], vecs: np.ndarray, retriever: RetrieverLike, *,
         encode_ms: float = 0.0, started: float | None = None) -> list[MatchResult]:
    """The steps over already-encoded queries (one search call for all of them); `total` runs from `started`."""
    started = started if started is not None else time.perf_counter()
    batch = Batch(pipeline, retriever, [Item(r, vecs[i], retriever) for i, r in enumerate(requests)], vecs)
    spent = dict.fromkeys(("retrieve", "rerank", "decide"), 0.0)
    for step in STEPS:
        t0 = time.perf_counter()
        step.run(batch)
        spent[TIMED_AS[step.name]] += (time.perf_counter() - t0) * 1000.0
    if not any(uses_stages(r.arm) for r in requests):
        spent["rerank"] = 0.0
    total = (time.perf_counter() - started) * 1000.0
    results = [item.result for item in batch.items]
    for result in results:
        result.timings_ms = {"encode": round(encode_ms, 3), **{k: round(v, 3) for k, v in spent.items()},
                             "total": round(total, 3)}
    return results  # type: ignore[return-value]


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
