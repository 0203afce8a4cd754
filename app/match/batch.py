"""What flows through the chain's steps (app/match/chain.py): a `Batch` of `Item`s, one per query.

A step reads some fields and writes others; each step names them in `reads` and `writes`, and the chain's
order is checked against them (tests/app/match/test_chain.py). What a batch shares is the answering
build's: one retriever, its `ServedBuild` and how it is scored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from app.match.decider import Decision, native_language, query_language
from app.match.request import FaqMatch, MatchQuery, MatchResult
from app.conversation.turns import NO_TURN, TurnPlan
from index.candidates import RetrieverLike

if TYPE_CHECKING:
    from app.match.served import ServedBuild


@dataclass
class Item:
    """One query on its way through the steps."""

    request: MatchQuery
    vec: np.ndarray
    retriever: RetrieverLike
    # query
    selection: Any = None  # index/selection.py `Selection` of the query's filter (None: every FAQ)
    # conversation
    plan: TurnPlan = NO_TURN  # what the previous turn changes (app/conversation/turns.py)
    reply: Any = None  # a small-talk reply (app/conversation/small_talk), when the query is small talk
    # candidates
    hits: list = field(default_factory=list)  # the recall stage's phrasing hits
    answer_cos: dict[str, float] | None = None  # each hit FAQ's answer cosine (builds with answer evidence)
    floor: float | None = None  # the lowest phrasing cosine the ANN list reached
    open_hits: tuple | None = None  # the same query without its filter: (hits, answer_cos, floor)
    matches: list[FaqMatch] = field(default_factory=list)  # FAQs, best first; their `score` the probability
    rivals: list[FaqMatch] = field(default_factory=list)  # FAQs outside the filter that beat its best
    # decision
    table: list[dict] | None = None  # threshold -> expected precision table the decision reads
    in_context: list[FaqMatch] | None = None  # scored with the previous FAQ as evidence (the turn model)
    decision: Decision | None = None
    # answers
    result: MatchResult | None = None

    @cached_property
    def language(self) -> str:
        """The query's language: the caller's detection, else detected here (once)."""
        return query_language(self.request.query, self.request.language)

    @cached_property
    def words(self) -> str:
        """The language the decision model reads the query's and the FAQs' words in."""
        return native_language(self.request.query, self.retriever, self.language) or "en"

    @property
    def shut(self) -> frozenset[str]:
        """Context-only FAQs this query may not be answered with (those its previous FAQ prompts to open)."""
        hidden = getattr(self.retriever, "context_only", frozenset())
        return hidden - self.plan.prompted if self.plan.prompted else hidden


@dataclass
class Batch:
    """The queries of one `rank` call, all answered by one retriever, and what the build shares."""

    pipeline: Any  # app/match/pipeline.py `Pipeline`: what the steps share (below it in the imports)
    retriever: RetrieverLike
    items: list[Item]
    vecs: np.ndarray
    served: ServedBuild | None = None  # set after the search (a retriever that cannot search keeps the last)
    weight: float = 0.0  # the answer's share of a FAQ's first-stage score, as served
    pool: int = 1  # phrasings pooled per FAQ, as served
    decided: bool = False  # scored by the decision model (else by the build's cosine curve)
    ref: Any = None  # the decision model's reference for the build (None: calibration scoring)
    table: list[dict] | None = None  # the build's threshold -> expected precision table


class Step:
    """One step of the chain: it reads the fields `reads` names (of an Item, or of the Batch as `batch.x`) and
    writes those `writes` names. The chain times it; the step does the work and nothing else."""

    name: str = ""
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def run(self, batch: Batch) -> None:
        raise NotImplementedError
