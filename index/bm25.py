"""The BM25 contract both lexical engines implement (tantivy in `lexical.py`, Elasticsearch in
`elasticsearch/lexical.py`): what a hit and a document are, the FAQ-level search over variant hits, and the
text rewrites both analyzers run so that they cut the same words. `lexical.py` says what the engines share.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

#: BM25 candidates handed to the re-ranking stage (the paper's Elasticsearch recall depth)
DEFAULT_RECALL_K = 30
#: first search depth in variants for k FAQs, and the deepest re-search
MIN_DEPTH = 100
DEPTH_FACTOR = 4
MAX_DEPTH = 4000
ANALYZER_NAME = "faq_english"
#: Lucene's English stop words: what Elasticsearch's `english` analyzer removes (`_english_`)
ENGLISH_STOP_WORDS = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with"
).split()


#: the lexical arm's languages and their Snowball stemmers (the same algorithms in tantivy and Elasticsearch);
#: a phrasing is analysed in its KB's language (`language` of its LexicalDoc), each in a field of its own
STEMMERS = {"en": "english", "es": "spanish", "de": "german", "fr": "french", "it": "italian", "pt": "portuguese",
            "nl": "dutch"}
#: tokens longer than this are dropped (Elasticsearch's standard tokenizer cuts at 255 characters)
MAX_TOKEN_CHARS = 255


def field_of(language: str) -> str:
    """The text field of a language's phrasings: English keeps `question`, as before there were others."""
    return "question" if language == "en" else f"question_{language}"


def analyzer_of(language: str) -> str:
    """English: the `english`-like analyzer with its rewrites and stop words; the others split at every
    character that is not a letter or digit, lower-case, fold accents (users type "contrasena" for
    "contraseña") and stem with Snowball."""
    return ANALYZER_NAME if language == "en" else f"faq_{STEMMERS[language]}"


class LexicalUnavailable(RuntimeError):
    """The lexical engine cannot answer (unreachable, index missing, version mismatch)."""


@dataclass(frozen=True)
class LexicalHit:
    variant_id: int
    faq_id: str
    question: str
    bm25: float


@dataclass(frozen=True)
class LexicalDoc:
    """What is indexed: one question variant (`app.store.VariantRow` has the same fields)."""

    variant_id: int
    faq_id: str
    question: str
    language: str = "en"  # which analyzer reads it (STEMMERS)


def sorted_hits(hits: Iterable[LexicalHit]) -> list[LexicalHit]:
    # both engines break score ties the same way, so their rankings are comparable
    return sorted(hits, key=lambda h: (-h.bm25, h.variant_id))


def top_faqs(hits: Sequence[LexicalHit], k: int) -> list[LexicalHit]:
    """Variant hits (best first) -> the best hit of each FAQ, at most `k` FAQs, best first."""
    best: dict[str, LexicalHit] = {}
    for hit in hits:
        if hit.faq_id not in best:
            best[hit.faq_id] = hit
            if len(best) == k:
                break
    return list(best.values())



class LexicalIndex(ABC):
    """BM25 over question variants. Engines implement `_search_batch` (variant level) and `build`."""

    engine: str = ""
    #: where the index lives: a folder (tantivy) or an index name (Elasticsearch)
    location: str = ""

    @abstractmethod
    def build(self, docs: Iterable[Any]) -> int:
        """Index `docs` (objects with variant_id, faq_id, question) into a NEW index; returns the count."""

    @abstractmethod
    def count(self) -> int:
        """Documents in the index."""

    @abstractmethod
    def _search_batch(self, queries: Sequence[str], size: int) -> list[list[LexicalHit]]:
        """Per query, at most `size` variant hits, best first."""

    def health(self) -> str | None:
        """None when the index can answer, else why not (cheap; used by /readyz)."""
        try:
            self.count()
        except LexicalUnavailable as exc:
            return str(exc)
        return None

    def close(self) -> None:  # noqa: B027  (optional: only engines holding connections override it)
        """Release the engine's resources (connections)."""

    def search_variants(self, query: str, size: int) -> list[LexicalHit]:
        return self._search_batch([query], size)[0]

    def search(self, queries: Sequence[str], k: int = DEFAULT_RECALL_K) -> list[list[LexicalHit]]:
        """Per query, the variant hits of its `k` best FAQs (BM25 of each FAQ's best variant), best first.

        Every variant hit of those FAQs within the searched depth is returned (a re-ranking stage can
        score each phrasing); `top_faqs(hits, k)` gives the FAQ ranking.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        depth = max(DEPTH_FACTOR * k, MIN_DEPTH)
        hits = self._search_batch(queries, depth)

        def short(i: int) -> bool:  # the page was full but still covers fewer than k FAQs
            return len(hits[i]) >= depth and len({h.faq_id for h in hits[i]}) < k

        pending = [i for i in range(len(queries)) if short(i)]
        while pending and depth < MAX_DEPTH:
            depth = min(depth * 4, MAX_DEPTH)
            for i, deeper in zip(pending, self._search_batch([queries[i] for i in pending], depth)):
                hits[i] = deeper
            pending = [i for i in pending if short(i)]
        out = []
        for query_hits in hits:
            keep = {h.faq_id for h in top_faqs(query_hits, k)}
            out.append([h for h in query_hits if h.faq_id in keep])
        return out



#: left-to-right pass without overlaps (Java's replaceAll = Python's re.sub): `John's` -> `John`;
#: `don't` -> `dont`, `3.5` -> `35`, `foo_bar` -> `foobar`; `1,000` -> `1000`. Without them the standard
#: tokenizer keeps `don't` whole while tantivy's simple tokenizer splits it into `don` + `t`.
_WORD_ES = r"[\p{L}\p{N}_]"
_APOSTROPHES = "'\u2019"  # the characters themselves, not escapes: regex dialects spell escapes differently
TEXT_REWRITES = (
    (rf"({_WORD_ES})[{_APOSTROPHES}][sS]\b", rf"(\w)[{_APOSTROPHES}][sS]\b", (1,)),
    (rf"({_WORD_ES})[{_APOSTROPHES}._]({_WORD_ES})", rf"(\w)[{_APOSTROPHES}._](\w)", (1, 2)),
    (r"(\p{N}),(\p{N})", r"(\d),(\d)", (1, 2)),
)
_PY_REWRITES = [(re.compile(py), "".join(f"\\{g}" for g in groups)) for _, py, groups in TEXT_REWRITES]


def normalise_text(text: str) -> str:
    """The char-filter stage of the analyzer (Elasticsearch runs the same rewrites server-side)."""
    for pattern, replacement in _PY_REWRITES:
        text = pattern.sub(replacement, text)
    return text
