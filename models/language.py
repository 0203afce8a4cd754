"""Which language a query is written in, offline: `detect(text) -> Detection` (ISO 639-1 codes).

The identifier is lingua (`lingua-language-detector`, Apache-2.0: character n-gram models shipped inside
the wheel, nothing downloaded), asked to choose among `SUPPORTED` only: the fewer languages it weighs, the
fewer short queries it confuses, and the less memory it holds. Chat queries are short, lowercase, without
accents and full of brand names, so a detection carries its confidence and its word count, and the callers
decide what a weak one may change (a KB's `languages` gate refuses only what is clearly another language:
`is_foreign`).

Trade-off, measured in docs/results.md: lingua's high-accuracy models (n-grams of 1-5 characters) are the
ones that hold on 3-word queries, and cost about 28 MB per language in memory; the low-accuracy mode
(trigrams) holds in 3 MB per language and misses more short queries.
"""
from __future__ import annotations

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
    """lingua restricted to `languages`; thread-safe (lingua's detector is), built once per process by
    `detector()`."""

    def __init__(self, languages: tuple[str, ...] = SUPPORTED, low_accuracy: bool = False):
        from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

        unknown = [c for c in languages if c not in SUPPORTED]
        if unknown:
            raise ValueError(f"languages {unknown} are not supported; the supported ones are {', '.join(SUPPORTED)}")
        self.languages = tuple(languages)
        chosen = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in self.languages]
        builder = LanguageDetectorBuilder.from_languages(*chosen)
        if low_accuracy:
            builder = builder.with_low_accuracy_mode()
        self._lingua = builder.with_preloaded_language_models().build()

    def detect(self, text: str) -> Detection:
        words = len(text.split())
        values = self._lingua.compute_language_confidence_values(text) if words else []
        scores = {v.language.iso_code_639_1.name.lower(): float(v.value) for v in values}
        if not scores or max(scores.values()) <= 0.0:  # no letters lingua knows (digits, emoji): say English
            return Detection("en", 0.0, words, scores)
        best = max(scores, key=lambda code: scores[code])
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
