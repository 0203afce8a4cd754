"""What the match path takes and gives: `MatchQuery` (one query with its own options), `MatchResult`, the
`Group` of `Pipeline.run`, and the errors only the match path raises."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from app.conversation.turns import NO_TURN, Turn
from index.candidates import FaqMatch, RetrieverLike

__all__ = ["NO_INDEX", "NO_STAGES", "FaqMatch", "Group", "MatchQuery", "MatchResult", "NoIndexError", "NoStagesError"]


@dataclass(frozen=True)
class MatchQuery:
    """One query with its own options (the micro-batcher mixes requests with different options)."""

    query: str
    top_k: int = 5
    threshold: float | None = 0.5  # None: the decider's (FAQ_TARGET_PRECISION, else FAQ_DEFAULT_THRESHOLD)
    arm: str = "ann"  # app.match.arms.ARMS
    filter: Any = None  # kb.filters.FaqFilter: only the FAQs it keeps are candidates (None: every FAQ)
    turn: Turn | None = None  # the previous turn (app/conversation/turns.py)
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
    timings_ms: dict[str, float] = field(default_factory=dict)  # encode, retrieve, rerank, decide, total
    cached: bool = False  # answered from the query cache (the same query, options and index earlier)
    decision: str = "abstain"  # app/match/decider.py DECISIONS
    options: list[FaqMatch] = field(default_factory=list)  # clarify: the plausible FAQs
    threshold: float = 0.5  # the threshold the decision used
    expected_precision: float | None = None  # the build's expected precision at that threshold
    context: dict = field(default_factory=lambda: NO_TURN.report())  # what the previous turn changed (app/conversation/turns.py)
    small_talk: dict | None = None  # decision "chitchat": {"kind", "answer"}, the response's `chitchat` (app/conversation/small_talk)


#: one group of `Pipeline.run`: its queries, the retriever that answers them, and when they were submitted
#: (a time.perf_counter() reading, where their `total` timing starts; None: when `run` starts)
Group = tuple[Sequence[MatchQuery], RetrieverLike, float | None]


#: why a KB without a served build cannot answer (its own reason when a build failed to load)
NO_INDEX = "no index built: run `faq index build`"
#: why a `+rerank` arm cannot run
NO_STAGES = ("no re-ranker installed: set FAQ_RERANKER to a folder made by `faq train reranker` (or `faq train "
             "mmaicm`, `faq train analogy`, `faq train siamese`) to use `rerank: true`; send `rerank: false` or "
             "leave it out")


class NoIndexError(RuntimeError):
    """No retriever is loaded (no build yet, or the current build could not be loaded). `kb`: a KB other than
    the default one, which the command to run must name."""

    def __init__(self, reason: str | None = None, kb: str | None = None):
        super().__init__(reason or (NO_INDEX if kb is None else NO_INDEX[:-1] + f" --kb {kb}`"))


class NoStagesError(RuntimeError):
    """A `+rerank` arm was asked for but no stage is installed (or the installed one could not load)."""

    def __init__(self, reason: str | None = None, arm: str | None = None):
        super().__init__((reason or NO_STAGES) + (f" (arm {arm!r} needs a re-ranker)" if arm else ""))
