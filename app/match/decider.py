"""The decision: each candidate FAQ's probability of being the right answer, then answer, clarify or abstain.

    first-stage candidates -> index/decision.py model, on the build's own scale -> score = P(right answer)
      -> answer   when the best score reaches the threshold
      -> clarify  when it does not, but two or three distinct FAQs are plausible and together reach it:
                  they are returned as options (the chatbot's "did you mean")
      -> abstain  otherwise

The threshold is the request's, else the one whose expected precision in the build's table reaches
FAQ_TARGET_PRECISION, else FAQ_DEFAULT_THRESHOLD. `expected_precision` is the table's value at the
threshold used: the share of answers given at that threshold that are expected to be right, for the
assumed share of out-of-scope traffic (FAQ_OOS_SHARE). Once the served build has MIN_TRAFFIC logged
queries, the service hands their scores in (`set_traffic`) and their table replaces the replayed one.

Builds without the decision block (made before it existed) and FAQ_SCORING=calibration keep the build's
logistic curve of the cosine as the score; decisions are then made on it the same way, with no
expected precision.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence


from kb.records import is_placeholder
from index.candidates import FaqMatch
from index.decision import (
    MIN_TRAFFIC, Candidate, DecisionModel, Reference, decide, expected_precision_at, reference_for,
    reference_key, served_table, threshold_for_precision, traffic_table, words_of,
)

DECISIONS = ("answer", "clarify", "abstain")
#: most options a clarify offers
CLARIFY_OPTIONS = 3
#: the least probability an option needs (a model's `meta.clarify_min` overrides it)
CLARIFY_MIN = 0.15


@dataclass(frozen=True)
class Decision:
    kind: str  # DECISIONS
    options: tuple[FaqMatch, ...]  # clarify: the plausible FAQs, best first; else empty
    threshold: float
    expected_precision: float | None


class BuildDecisions:
    """What the decider computes once per served build (app/match/served.py `ServedBuild.decisions`):
    references, tables and FAQ word sets."""

    def __init__(self, retriever: Any):
        self.retriever = retriever
        self.words: dict[str, frozenset[str]] = {}
        self.references: dict[str, Reference | None] = {}
        self.tables: dict[tuple[str, float], list[dict] | None] = {}


class Decider:
    """Scores candidates with the cross-KB model and decides. Thread-safe; one per pipeline. What it computes
    per build is kept in the `BuildDecisions` a caller passes (`build=`); without one, nothing is kept."""

    def __init__(self, model: DecisionModel | None, *, oos_share: float = 0.2, target_precision: float | None = None,
                 default_threshold: float = 0.5):
        self.model = model
        self.oos_share = oos_share
        self.target_precision = target_precision
        self.default_threshold = default_threshold
        self.clarify_min = float((model.meta if model else {}).get("clarify_min", CLARIFY_MIN))
        # (build version, table, queries) from the served build's own logged traffic (`set_traffic`)
        self._traffic: tuple[str, list[dict], int] | None = None

    @property
    def traffic(self) -> tuple[str, list[dict], int] | None:
        """(build version, table, queries) of the logged traffic in force (`set_traffic`), else None."""
        return self._traffic

    def set_traffic(self, version: str, scores: Sequence[float]) -> None:
        """The latest logged top scores of build `version`: with MIN_TRAFFIC of them their table replaces the
        replayed one for that build (index/decision.py `traffic_table`)."""
        self._traffic = (str(version), traffic_table(scores), len(scores)) if len(scores) >= MIN_TRAFFIC else None

    def traffic_queries(self, retriever: Any) -> int | None:
        """How many logged queries the served table comes from; None: the build's replayed table."""
        t = self._traffic
        return t[2] if t is not None and t[0] == str(getattr(retriever, "version", "")) else None

    @staticmethod
    def _build(retriever: Any, build: BuildDecisions | None) -> BuildDecisions:
        return build if build is not None else BuildDecisions(retriever)

    # -- scores ----------------------------------------------------------------------------------
    def reference(self, retriever: Any, pool: int, weight: float,
                  build: BuildDecisions | None = None) -> Reference | None:
        """The served build's reference for (pool, weight), read from its manifest once per build."""
        if self.model is None:
            return None
        state = self._build(retriever, build)
        key = reference_key(pool, weight)
        if key not in state.references:
            state.references[key] = reference_for(getattr(retriever, "manifest", None), pool, weight)
        return state.references[key]

    def _words(self, state: BuildDecisions, faq_id: str, language: str = "en") -> frozenset[str]:
        """The FAQ's words (phrasings and answer) read as `language` reads them (index/decision.py `words_of`)."""
        key = faq_id if language == "en" else (faq_id, language)
        found = state.words.get(key)
        if found is None:
            r = state.retriever
            texts = [q for _, q in r.faq_variants(faq_id)] if hasattr(r, "faq_variants") else []
            answer = (getattr(r, "answers", {}).get(faq_id) or ("",))[0]
            if getattr(r, "answer_vectors", None) is not None and not is_placeholder(answer):
                texts.append(answer)
            found = frozenset().union(*(words_of(t, language) for t in texts)) if texts else frozenset()
            state.words[key] = found
        return found

    def candidates(self, retriever: Any, matches: Sequence[FaqMatch], build: BuildDecisions | None = None,
                   language: str = "en") -> list[Candidate]:
        """The model's view of `matches` (first-stage order); their words read in `language`."""
        state = self._build(retriever, build)
        counts = getattr(retriever, "variant_counts", None) or {}
        return [Candidate(m.faq_id, m.cosine, m.cosine if m.phrasing_cosine is None else m.phrasing_cosine,
                          m.answer_cosine, int(counts.get(m.faq_id, 1)), self._words(state, m.faq_id, language))
                for m in matches]

    def rescore(self, query: str, matches: list[FaqMatch], retriever: Any, ref: Reference,
                build: BuildDecisions | None = None, language: str = "en") -> list[FaqMatch]:
        """`matches` with `score` = the model's probability (the first WINDOW; the rest are capped below
        them), re-ordered by it when the model re-ranks. `language`: the one the query and the FAQs' words are
        read in (a question in a non-English KB's own language: that language; else English, as learnt)."""
        assert self.model is not None
        if not matches:
            return matches
        p = decide(self.model, query, self.candidates(retriever, matches, build, language), ref, language)
        head = [replace(m, score=float(x)) for m, x in zip(matches, p.tolist())]
        if self.model.rerank:
            head.sort(key=lambda m: -m.score)  # stable: ties keep the first-stage order
        floor = min(m.score for m in head)
        tail = [replace(m, score=min(m.score, floor)) for m in matches[len(head):]]
        return head + tail

    # -- decisions -------------------------------------------------------------------------------
    def table(self, retriever: Any, pool: int, weight: float,
              build: BuildDecisions | None = None) -> list[dict] | None:
        """The build's threshold -> expected precision / answer rate table for the served (pool, weight)."""
        if self.model is None:
            return None
        t = self._traffic
        if t is not None and t[0] == str(getattr(retriever, "version", "")):
            return t[1]
        state = self._build(retriever, build)
        # the share of out-of-scope traffic is the decider's: a pipeline whose decider is replaced (evaluations
        # do) must not be answered from the table of another share
        key = (reference_key(pool, weight), self.oos_share)
        if key not in state.tables:
            state.tables[key] = served_table(getattr(retriever, "manifest", None), pool, weight, self.oos_share)
        return state.tables[key]

    def threshold(self, requested: float | None, table: list[dict] | None) -> float:
        if requested is not None:
            return float(requested)
        if self.target_precision is not None and table:
            t = threshold_for_precision(table, self.target_precision)
            return t if t is not None else 1.0  # no threshold reaches it: abstain rather than miss the target
        return self.default_threshold

    def decide(self, matches: Sequence[FaqMatch], threshold: float, table: list[dict] | None) -> Decision:
        ep = expected_precision_at(table, threshold) if table else None
        if matches and matches[0].score >= threshold:
            return Decision("answer", (), threshold, ep)
        options = tuple(m for m in matches[:CLARIFY_OPTIONS] if m.score >= self.clarify_min)
        if len(options) >= 2 and sum(m.score for m in options) >= threshold:
            return Decision("clarify", options, threshold, ep)
        return Decision("abstain", (), threshold, ep)


def query_language(query: str, language: str | None = None) -> str:
    """The query's language: `language`, the caller's detection (the service's, on the client's words), else
    detected here."""
    if language is not None:
        return language
    from models.language import detect

    return detect(query).language


def native_language(query: str, retriever: Any, language: str | None = None) -> str | None:
    """The query's language (`query_language`) when it is not English and the served KB is written in it (the
    build's lexical languages), else None: the language the decision model then reads the query's and the FAQs'
    words in."""
    language = query_language(query, language)
    if language == "en":
        return None
    manifest = getattr(retriever, "manifest", None) or {}
    return language if language in ((manifest.get("lexical") or {}).get("languages") or {"en": 0}) else None
