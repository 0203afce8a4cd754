"""Why a question matched, for the Try a question page: each shown FAQ's signals, and which of the
query's words weighed most.

The signals are the pipeline's own `FaqMatch` fields, taken from the results `service.match` ranked
(its `MatchTrace`), so the page explains the very answer that was logged, with no second match. The word
weights are occlusion: the query and every "query without word i" encoded in one encoder call, each
compared with the top FAQ's matched phrasing as the build stored it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from app.match.decider import native_language
from app.match import FaqMatch, MatchResult
from index.decision import words_of

#: occlusion encodes one text per word: beyond this the page says so rather than hold the encoder longer
MAX_OCCLUSION_WORDS = 32
#: shading buckets w0..w5 (CSS classes: the CSP forbids style attributes)
BUCKETS = 5


@dataclass(frozen=True)
class Signals:
    """One shown FAQ's evidence; None where the build or the arm has none."""

    faq_id: str
    phrasing_cosine: float | None
    answer_cosine: float | None
    cosine: float | None
    shared_words: tuple[str, ...]
    stage_score: float | None  # re-ranked arms: the last stage's probability (the shown score)
    first_score: float | None  # re-ranked arms: the first-stage probability the stages started from


@dataclass(frozen=True)
class WordWeight:
    word: str
    weight: float  # cosine with the phrasing lost when the word is left out (negative: the word pulled away)
    bucket: int  # 0..BUCKETS, relative to the heaviest word


@dataclass
class WordWeights:
    words: list[WordWeight] = field(default_factory=list)
    top: list[WordWeight] = field(default_factory=list)
    phrasing: str = ""  # the top FAQ's matched phrasing the cosines are taken with
    cosine: float | None = None  # the whole query's cosine with it
    ms: float = 0.0
    texts: int = 0  # in the one encoder call
    skipped: str | None = None  # why there are no weights


def signals_of(query: str, matches: Sequence[FaqMatch], language: str = "en") -> list[Signals]:
    """Each match's signals; the shared words read in `language`, as the decision model read them."""
    qwords = words_of(query, language)
    out = []
    for m in matches:
        reranked = m.first_score is not None
        shared = qwords & (words_of(m.question, language) | words_of(m.answer, language))
        out.append(Signals(faq_id=m.faq_id, phrasing_cosine=m.phrasing_cosine, answer_cosine=m.answer_cosine,
                           cosine=m.cosine, shared_words=tuple(sorted(shared)),
                           stage_score=m.score if reranked else None, first_score=m.first_score))
    return out


def _phrasing_vector(retriever: Any, match: FaqMatch) -> np.ndarray | None:
    """The stored vector of the phrasing that matched: what the ranking compared the query with (in
    balanced mode the FAQ side has its own encoder, so encoding the text again would not be the same)."""
    faq_variants = getattr(retriever, "faq_variants", None)
    if faq_variants is None:
        return None
    ids = [vid for vid, question in faq_variants(match.faq_id) if question == match.question]
    if not ids:
        return None
    vectors, found = retriever.vectors_of(ids[:1])
    return vectors[0] if bool(found[0]) else None


def _unit(vecs: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vecs, axis=-1, keepdims=True)
    return vecs / np.where(norms > 0, norms, 1.0)


def word_weights(pipeline: Any, retriever: Any, query: str, top: FaqMatch | None) -> WordWeights:
    """Occlusion weights of the query's words against `top`'s matched phrasing (blocking: run it in a thread)."""
    words = query.split()
    if top is None:
        return WordWeights(skipped="no FAQ matched, so there is nothing to weigh the words against")
    if len(words) > MAX_OCCLUSION_WORDS:
        return WordWeights(skipped=f"the question has {len(words)} words; word weights are worked out for at most "
                                   f"{MAX_OCCLUSION_WORDS}, so they were skipped", phrasing=top.question)
    if len(words) < 2:
        return WordWeights(skipped="a one-word question: that word is all of it", phrasing=top.question)
    t0 = time.perf_counter()
    phrasing = _phrasing_vector(retriever, top)
    texts = [query] + [" ".join(words[:i] + words[i + 1:]) for i in range(len(words))]
    if phrasing is None:  # a phrasing this retriever does not hold as built: encode its text in the same call
        texts.append(top.question)
    vecs = _unit(np.asarray(pipeline.encode(texts), dtype=np.float32))
    target = _unit(np.asarray(phrasing, dtype=np.float32)) if phrasing is not None else vecs[-1]
    cosines = vecs[: len(words) + 1] @ target
    full = float(cosines[0])
    drops = [full - float(c) for c in cosines[1:]]
    ms = (time.perf_counter() - t0) * 1000.0
    heaviest = max(drops)
    weighed = [WordWeight(word, drop, min(BUCKETS, max(0, round(BUCKETS * drop / heaviest))) if heaviest > 0 else 0)
               for word, drop in zip(words, drops)]
    ranked = sorted(weighed, key=lambda w: -w.weight)
    return WordWeights(words=weighed, top=[w for w in ranked[:3] if w.weight > 0], phrasing=top.question,
                       cosine=full, ms=ms, texts=len(texts))


@dataclass
class Explanation:
    signals: list[Signals]
    weights: WordWeights


def explain(pipeline: Any, retriever: Any, query: str, result: MatchResult) -> Explanation:
    top = result.matches[0] if result.matches else None
    language = native_language(query, retriever) or "en"  # the words the decision model read
    return Explanation(signals_of(query, result.matches, language), word_weights(pipeline, retriever, query, top))
