"""Which language a query is written in, offline: `detect(text) -> Detection` (ISO 639-1 codes).

The identifier is py3langid (BSD-3-Clause; langid.py's naive Bayes over byte n-grams, its model inside the
wheel, nothing downloaded), asked to choose among `SUPPORTED` only: the fewer languages it weighs, the fewer
short queries it confuses. Chat queries are short, lowercase, without accents and full of brand names, so a
detection carries the probability of every candidate and its word count, and the callers decide what a weak
one may change (a KB's `languages` gate refuses only what is clearly another language: `is_foreign`).

Chosen over lingua (`lingua-language-detector`) on the realistic sets' queries in English, Spanish, German
and French (docs/results.md): more of them right (99.5% of those of 3+ words against lingua's 99.1% in its
high-accuracy mode and 96.2% in its low one), 0.06 ms a query, and about 100 MB less memory than lingua's
high-accuracy models.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

#: the languages a query is recognised in: those the multilingual encoder was trained on that also have a
#: stemmer in the lexical arm (tantivy's and Elasticsearch's analyzers), ISO 639-1
SUPPORTED: tuple[str, ...] = ("en", "es", "de", "fr", "it", "pt", "nl")
#: a query shorter than this many words is too short to refuse for its language (the identifier's error
#: rate on one- and two-word chat messages is several times its rate on longer ones)
MIN_WORDS_TO_REFUSE = 3
#: a detection is taken as another language only when none of the allowed ones gets this much confidence
ALLOWED_FLOOR = 0.12


@dataclass(frozen=True)
class Detection:
    language: str  # ISO 639-1 code of the most likely language
    confidence: float  # its share of the identifier's confidence, 0..1
    words: int  # whitespace-separated words in the text
    scores: dict[str, float] = field(default_factory=dict)  # every candidate language's confidence

    def is_foreign(self, allowed: tuple[str, ...] | list[str] | frozenset[str] | set[str]) -> bool:
        """True when the text is clearly in none of `allowed`: long enough to judge, its best language
        outside them, and no allowed one a plausible reading (a short or mixed message stays answered)."""
        if not allowed or self.language in allowed or self.words < MIN_WORDS_TO_REFUSE:
            return False
        return max((self.scores.get(code, 0.0) for code in allowed), default=0.0) < ALLOWED_FLOOR


class LanguageDetector:
    """py3langid restricted to `languages`; thread-safe (a detection only reads the model), built once per
    process by `detector()`."""

    def __init__(self, languages: tuple[str, ...] = SUPPORTED):
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        unknown = [c for c in languages if c not in SUPPORTED]
        if unknown:
            raise ValueError(f"languages {unknown} are not supported; the supported ones are {', '.join(SUPPORTED)}")
        self.languages = tuple(languages)
        self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=False)
        self._identifier.set_languages(list(self.languages))

    def detect(self, text: str) -> Detection:
        words = len(text.split())
        if not any(ch.isalpha() for ch in text):  # digits, emoji, punctuation: nothing to tell
            return Detection("en", 0.0, words, {})
        ranked = self._identifier.rank(text)  # (code, log-probability), best first
        top = ranked[0][1]
        weights = {code: math.exp(score - top) for code, score in ranked}
        total = sum(weights.values())
        scores = {code: w / total for code, w in weights.items()}
        best = ranked[0][0]
        return Detection(best, round(scores[best], 4), words, scores)


_DETECTOR: LanguageDetector | None = None
_LOCK = threading.Lock()


def detector() -> LanguageDetector:
    """The process's detector (its models take a second and a few hundred MB to load: once)."""
    global _DETECTOR
    with _LOCK:
        if _DETECTOR is None:
            _DETECTOR = LanguageDetector()
        return _DETECTOR


def detect(text: str) -> Detection:
    return detector().detect(text)
