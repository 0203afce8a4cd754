"""Phrasing mining from the query log: pure text functions, no store, no encoder.

`bow_key` is the bag-of-words key of the CIKM AnalytiCup system (siamese short-text matching,
CIKM 2018): lowercase words, stop words and numbers dropped, negations kept, order and repetition
ignored. Two texts with the same key say the same thing in other words often enough (0.96 precision
on CLINC150, see docs/results.md) that a confident match whose key also equals one of the FAQ's
phrasings' keys is a safe phrasing to propose, while the key alone never matched an out-of-scope query.
A learned pair scorer (the Siamese matcher, passed in as `agree`) can stand in for the key: it also
accepts rewordings with other words, at the same precision on CLINC150 (docs/results.md).

`mine_phrasings` proposes new phrasings for existing FAQs, `cluster_unanswered` groups queries the
service could not answer; `faq kb mine` (cli/kb.py) feeds both from the store and writes files for an
editor. Nothing here writes the KB.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kb.records import normalize_question

# Function words only; negations are deliberately absent: "can I not ..." and "can I ..." must differ.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be been being below between both but by
can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself of off on once only
or other our ours ourselves out over own please same she should so some such than that the their theirs
them themselves then there these they this those through to too under until up very was we were what
when where which while who whom why will with would you your yours yourself yourselves s t d ll m re ve
""".split())
NEGATIONS = frozenset({"no", "not", "never", "nor", "none", "nothing", "nobody", "neither", "nowhere", "cannot"})
assert not STOP_WORDS & NEGATIONS

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_NUMBER = re.compile(r"\d+(?:st|nd|rd|th|s|k|m|am|pm)?|\d[\d.,:/-]*\d")

#: score (the calibrated probability) a served answer needs before its query may become a phrasing. On
#: CLINC150 with MiniLM (docs/results.md "Phrasing mining") 0.9 keeps 98% of what the answer threshold
#: 0.5 would propose at 0.978 precision instead of 0.976; 0.99 reaches 0.990 but halves the proposals.
DEFAULT_MIN_SCORE = 0.9

#: evidence kinds, strongest first
EVIDENCE_FEEDBACK_FAQ_ID = "feedback_faq_id"
EVIDENCE_FEEDBACK_CORRECT = "feedback_correct"
EVIDENCE_KEY = "key"
EVIDENCE_SIAMESE = "siamese"

#: the Siamese matcher's probability (query against the FAQ's best phrasing) that stands in for an equal key
DEFAULT_MIN_AGREE = 0.9


def tokens(text: str) -> list[str]:
    """Lowercased words; a contraction's "n't" becomes a separate "not" (so "don't" keeps its negation)."""
    out: list[str] = []
    for word in _WORD.findall(text.lower().replace("\u2019", "'")):
        if word.endswith("n't"):
            stem = word[:-3]
            out.extend([{"wo": "will", "ca": "can", "sha": "shall"}.get(stem, stem), "not"])
        else:
            out.extend(p for p in word.split("'") if p)
    return out


def content_words(text: str) -> list[str]:
    """`tokens` without stop words and numbers (negations stay)."""
    return [t for t in tokens(text)
            if t in NEGATIONS or (t not in STOP_WORDS and not _NUMBER.fullmatch(t) and not t.isdigit())]


def bow_key(text: str) -> str:
    """The order-insensitive bag-of-words key: the distinct content words, sorted, space-joined.
    "" when nothing is left (such a text agrees with nothing)."""
    return " ".join(sorted(set(content_words(text))))


def phrasing_form(text: str) -> str:
    """The form two phrasings are compared in to tell whether one is already in the KB: whitespace
    collapsed as the store does, case and surrounding punctuation ignored."""
    return normalize_question(text).lower().strip(" .?!,;:\"'")


@dataclass(frozen=True)
class LoggedQuery:
    """The part of a query-log row mining uses."""

    query: str
    faq_id: str | None  # the FAQ served as the answer; None = no answer
    score: float | None  # the best match's score (also logged when there was no answer)
    feedback_correct: bool | None = None
    feedback_faq_id: str | None = None


@dataclass
class PhrasingProposal:
    faq_id: str
    question: str  # the most frequent spelling of the query (whitespace normalised)
    count: int = 0  # logged queries supporting it
    evidence: Counter = field(default_factory=Counter)  # evidence kind -> queries
    scores: list[float] = field(default_factory=list)
    matched_phrasing: str | None = None  # the KB phrasing with the same key, if any

    def as_dict(self) -> dict[str, Any]:
        return {"faq_id": self.faq_id, "question": self.question, "count": self.count,
                "evidence": dict(self.evidence),
                "score_max": round(max(self.scores), 4) if self.scores else None,
                "score_mean": round(sum(self.scores) / len(self.scores), 4) if self.scores else None,
                "matched_phrasing": self.matched_phrasing}


@dataclass
class MiningStats:
    logged: int = 0
    considered: int = 0  # rows with some evidence for an existing FAQ
    already_phrasing: int = 0  # ... whose query is already a phrasing of that FAQ
    phrasing_of_other_faq: int = 0  # ... whose query is a phrasing of another FAQ (would duplicate it)
    rejected_by_feedback: int = 0  # ... contradicted by a negative feedback on the same query and FAQ
    conflicting: int = 0  # proposals dropped because the same phrasing was proposed for several FAQs

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def _kb_index(kb: Mapping[str, Sequence[str]]) -> tuple[dict[str, dict[str, str]], dict[str, set[str]]]:
    """(faq_id -> {key: first phrasing with it}, phrasing form -> FAQs holding it)."""
    keys: dict[str, dict[str, str]] = {}
    owners: dict[str, set[str]] = {}
    for faq_id, questions in kb.items():
        per = keys.setdefault(faq_id, {})
        for q in questions:
            k = bow_key(q)
            if k:
                per.setdefault(k, q)
            owners.setdefault(phrasing_form(q), set()).add(faq_id)
    return keys, owners


def mine_phrasings(log: Iterable[LoggedQuery], kb: Mapping[str, Sequence[str]], min_score: float,
                   stats: MiningStats | None = None,
                   agree: Callable[[Sequence[tuple[str, str]]], Sequence[float]] | None = None,
                   min_agree: float = DEFAULT_MIN_AGREE) -> list[PhrasingProposal]:
    """New phrasings for existing FAQs (`kb`: faq_id -> its phrasings), most supported first.

    A logged query supports FAQ f when a user named f (`feedback_faq_id`), confirmed the answer f
    (`feedback_correct`), or the service answered f with score >= `min_score` AND a second opinion
    agrees: the query's key equals the key of one of f's phrasings, or (when given) the pair scorer
    `agree` ((query, faq_id) pairs -> probabilities; the Siamese matcher) gives >= `min_agree`. A
    confident score alone also accepts near misses between neighbouring FAQs, the key alone ignores what
    the encoder knows; together they are precise. A negative feedback on the served answer vetoes that
    (query, FAQ) pair.
    """
    stats = stats if stats is not None else MiningStats()
    keys, owners = _kb_index(kb)
    log = list(log)

    def confident(row: LoggedQuery) -> bool:
        return row.faq_id in kb and row.feedback_correct is None and row.score is not None and row.score >= min_score

    agreement: dict[tuple[str, str], float] = {}
    if agree is not None:  # one batched call for the confident rows the key does not settle
        asks = list(dict.fromkeys(
            (text, str(row.faq_id)) for row in log if row.feedback_faq_id is None and confident(row)
            for text in [normalize_question(row.query)] if text and keys[str(row.faq_id)].get(bow_key(text)) is None))
        agreement = dict(zip(asks, (float(p) for p in agree(asks)))) if asks else {}
    found: dict[tuple[str, str], PhrasingProposal] = {}
    spellings: dict[tuple[str, str], Counter] = {}
    vetoed: set[tuple[str, str]] = set()
    for row in log:
        stats.logged += 1
        text = normalize_question(row.query)
        if not text:
            continue
        form = phrasing_form(text)
        if row.feedback_correct is False and row.faq_id is not None:
            vetoed.add((row.faq_id, form))
        target: str | None = None
        evidence: str | None = None
        matched: str | None = None
        if row.feedback_faq_id is not None and row.feedback_faq_id in kb:
            target, evidence = row.feedback_faq_id, EVIDENCE_FEEDBACK_FAQ_ID
        elif row.feedback_correct is True and row.faq_id in kb:
            target, evidence = row.faq_id, EVIDENCE_FEEDBACK_CORRECT
        elif confident(row):
            k = bow_key(text)
            matched = keys[row.faq_id].get(k) if k else None
            if matched is not None:
                target, evidence = row.faq_id, EVIDENCE_KEY
            elif agreement.get((text, row.faq_id), 0.0) >= min_agree:
                target, evidence = row.faq_id, EVIDENCE_SIAMESE
        if target is None:
            continue
        stats.considered += 1
        holders = owners.get(form, set())
        if target in holders:
            stats.already_phrasing += 1
            continue
        if holders:
            stats.phrasing_of_other_faq += 1
            continue
        p = found.get((target, form))
        if p is None:
            p = found[(target, form)] = PhrasingProposal(target, text)
            spellings[(target, form)] = Counter()
        p.count += 1
        p.evidence[evidence] += 1
        spellings[(target, form)][text] += 1
        if row.score is not None and row.faq_id == target:
            p.scores.append(float(row.score))
        if p.matched_phrasing is None:
            k = bow_key(text)
            p.matched_phrasing = matched or (keys[target].get(k) if k else None)
    for pair in vetoed & found.keys():
        stats.rejected_by_feedback += found.pop(pair).count
    by_form: dict[str, list[PhrasingProposal]] = {}
    for (faq_id, form), p in found.items():
        p.question = spellings[(faq_id, form)].most_common(1)[0][0]
        by_form.setdefault(form, []).append(p)
    result: list[PhrasingProposal] = []
    for group in by_form.values():
        if len(group) == 1:
            result.append(group[0])
            continue
        # one phrasing under several FAQs makes them ambiguous: only user feedback may settle it
        confirmed = [p for p in group if p.evidence[EVIDENCE_FEEDBACK_FAQ_ID] or p.evidence[EVIDENCE_FEEDBACK_CORRECT]]
        if len(confirmed) == 1:
            result.append(confirmed[0])
            stats.conflicting += len(group) - 1
        else:
            stats.conflicting += len(group)
    result.sort(key=lambda p: (-p.count, p.faq_id, p.question))
    return result


@dataclass
class Cluster:
    key: str
    queries: Counter  # distinct query text -> times logged

    @property
    def size(self) -> int:
        return sum(self.queries.values())

    def as_dict(self) -> dict[str, Any]:
        return {"size": self.size, "distinct": len(self.queries), "key": self.key,
                "queries": [{"query": q, "count": n} for q, n in self.queries.most_common()]}


def is_unanswered(row: LoggedQuery, low_score: float | None = None) -> bool:
    """No answer served, an answer the user rejected without naming a better one, or (with
    `low_score`) an answer below that score."""
    if row.feedback_faq_id is not None or row.feedback_correct is True:
        return False
    if row.faq_id is None or row.feedback_correct is False:
        return True
    return low_score is not None and (row.score is None or row.score < low_score)


def cluster_unanswered(log: Iterable[LoggedQuery], *, low_score: float | None = None, min_size: int = 2,
                       embed: Callable[[list[str]], Any] | None = None, cosine: float = 0.85) -> list[Cluster]:
    """Clusters of unanswered queries, biggest first; only those with at least `min_size` logged queries.

    Queries are grouped by `bow_key` (queries with an empty key by their phrasing form). With `embed`
    (texts -> unit-norm vectors), groups are then merged greedily, biggest first: a group joins the first
    bigger group whose most frequent query is within `cosine` of its own, so near-duplicates worded
    differently ("cancel my order" / "stop the order") count together.
    """
    groups: dict[str, Counter] = {}
    for row in log:
        if not is_unanswered(row, low_score):
            continue
        text = normalize_question(row.query)
        if not text:
            continue
        key = bow_key(text) or phrasing_form(text)
        groups.setdefault(key, Counter())[text] += 1
    clusters = [Cluster(k, c) for k, c in groups.items()]
    clusters.sort(key=lambda c: (-c.size, c.key))
    if embed is not None and len(clusters) > 1:
        import numpy as np

        vecs = np.asarray(embed([c.queries.most_common(1)[0][0] for c in clusters]), dtype=np.float32)
        leaders: list[int] = []
        merged: list[Cluster] = []
        for i, c in enumerate(clusters):
            if leaders:
                sims = vecs[leaders] @ vecs[i]
                j = int(np.argmax(sims))
                if sims[j] >= cosine:
                    merged[j].queries.update(c.queries)
                    continue
            leaders.append(i)
            merged.append(Cluster(c.key, Counter(c.queries)))
        clusters = sorted(merged, key=lambda c: (-c.size, c.key))
    return [c for c in clusters if c.size >= min_size]
