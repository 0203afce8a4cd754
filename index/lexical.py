"""Lexical (BM25) retrieval over question variants: the classic baseline's recall stage.

One interface, `LexicalIndex` (index/bm25.py, with what both engines share), two engines with the same semantics:

- `TantivyLexicalIndex`: embedded (the default), a tantivy index in the build folder
  (`index_dir/<version>/lexical/`), written with the rest of the build and renamed into place with it;
- `ElasticsearchLexicalIndex` (index/elasticsearch/lexical.py): a real Elasticsearch through the official `elasticsearch` client
  (`FAQ_ES_URL`), one index per build version (`<prefix>-<version>`), so a rebuild never touches the
  index being served; client and server majors must match (the client is pinned to 8.x).

Same semantics on both:
- one document per question variant: `variant_id`, `faq_id` (keyword) and `question` (English analyzer);
- English analysis, one pipeline written twice: the same three regex rewrites (`TEXT_REWRITES`: drop a
  possessive `'s`; join `don't`, `3.5`, `foo_bar`, `progress.i`; join `1,000`), then lower-case,
  Lucene's English stop words (`_english_`) and the Porter2 ("snowball English") stemmer. In
  Elasticsearch it is a custom analyzer (the rewrites as `pattern_replace` char filters, the standard
  tokenizer); in tantivy `normalise_text` + `english_analyzer()` (simple tokenizer). This is
  Elasticsearch's built-in `english` analyzer with Porter2 in place of Porter (tantivy has only
  Porter2), and with the rewrites both tokenizers cut the same words;
- BM25 (k1 1.2, b 0.75, one shard so the statistics are the whole KB's): scores agree to float
  precision on the same documents (tests/index/test_lexical.py checks it);
- the query is an OR over its analysed terms (`multi_match` on `question`), ties broken by variant_id;
- `search(queries, k)` answers at the FAQ level like the ANN path: variants are grouped by `faq_id` and
  the `k` FAQs with the best variant are kept (K = 30 by default, the paper's ES recall depth); the
  search goes deeper than `k` variants until `k` distinct FAQs are covered (FAQs with many phrasings
  can fill the first page alone).

Errors: an engine that cannot answer (server unreachable, index missing, wrong server version) raises
`LexicalUnavailable` with a message saying what to do; the service turns it into a 503 for the lexical
arms only.
"""
from __future__ import annotations

import logging
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from index.bm25 import (
    ANALYZER_NAME, DEFAULT_RECALL_K, ENGLISH_STOP_WORDS, MAX_TOKEN_CHARS, STEMMERS, TEXT_REWRITES, LexicalDoc,
    LexicalHit, LexicalIndex, LexicalUnavailable, analyzer_of, normalise_text, sorted_hits, top_faqs,
)
from index.elasticsearch.client import redact

#: what importers of the engines take from here, though index/bm25.py defines it
__all__ = [
    "ANALYZER_NAME", "DEFAULT_RECALL_K", "ENGINES", "ENGLISH_STOP_WORDS", "TANTIVY_DIR", "TEXT_REWRITES", "LexicalDoc",
    "LexicalHit", "LexicalIndex", "LexicalUnavailable", "TantivyLexicalIndex", "build_lexical", "english_analyzer",
    "normalise_text", "open_lexical", "resolve_engine", "top_faqs",
]

log = logging.getLogger(__name__)

ENGINES = ("tantivy", "elasticsearch")
#: folder of the tantivy index inside a build folder
TANTIVY_DIR = "lexical"


def analyzer_for(language: str) -> Any:
    """The tantivy analyzer of a language (index/bm25.py `analyzer_of` says what each does)."""
    if language == "en":
        return english_analyzer()
    import tantivy

    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer(STEMMERS[language]))
        .build()
    )


@lru_cache(maxsize=None)
def content_analyzer(language: str) -> Any:
    """A non-English language's content words as the decision model counts them: lower case, its stop words,
    accents folded, its Snowball stem. In the Romance languages the stop words go again once folded (users often
    type "como" for "cómo"); not in German, where folding makes words of stop words ("ändern" -> "andern")."""
    import tantivy

    name = STEMMERS[language]
    builder = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
               .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
               .filter(tantivy.Filter.lowercase())
               .filter(tantivy.Filter.stopword(name))
               .filter(tantivy.Filter.ascii_fold()))
    if language in ("es", "fr", "it", "pt"):
        builder = builder.filter(tantivy.Filter.stopword(name))
    return builder.filter(tantivy.Filter.stemmer(name)).build()


def english_analyzer() -> Any:
    """tantivy's equivalent of Elasticsearch's `english` analyzer (stop words and stemming)."""
    import tantivy

    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(255))  # ES' standard tokenizer splits at 255 chars
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.custom_stopword(ENGLISH_STOP_WORDS))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _tantivy_schema(language: str) -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("variant_id", stored=True, indexed=True)
    builder.add_text_field("faq_id", stored=True, tokenizer_name="raw")
    # BM25 needs term frequencies, not positions (no phrase queries)
    builder.add_text_field("question", stored=True, tokenizer_name=analyzer_of(language), index_option="freq")
    return builder.build()


def doc_languages(questions: Sequence[str], languages: Sequence[str] | None) -> list[str]:
    """Which analyzer reads each phrasing. A KB of one language (its `languages` setting, else the language
    most of its phrasings are written in) is read in that language throughout, so an English KB is analysed
    exactly as always; a KB of several reads each phrasing in the one of them it is detected in."""
    from collections import Counter

    from models.language import LanguageDetector, detector

    wanted = [code for code in (languages or ()) if code in STEMMERS]
    if len(wanted) == 1:
        return [wanted[0]] * len(questions)
    if not wanted:
        found = Counter(detector().detect(q).language for q in questions)
        top = found.most_common(1)[0][0] if found else "en"
        return [top if top in STEMMERS else "en"] * len(questions)
    among = LanguageDetector(tuple(wanted))
    return [among.detect(q).language for q in questions]


class _TantivyPart:
    """One language's phrasings in a tantivy index of their own, so its BM25 statistics are that
    language's, as Elasticsearch keeps them per field."""

    def __init__(self, path: Path, language: str):
        self.path, self.language = path, language
        self.analyzer = analyzer_for(language)
        self._opened: tuple[Any, Any] | None = None  # (tantivy.Index, Searcher) once opened
        self._lock = threading.Lock()

    def build(self, docs: Sequence[Any], heap_bytes: int) -> int:
        import tantivy

        if self.path.exists() and any(self.path.iterdir()):
            raise FileExistsError(f"{self.path}: not empty; a lexical index is built into a new folder")
        self.path.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(_tantivy_schema(self.language), path=str(self.path), reuse=False)
        index.register_tokenizer(analyzer_of(self.language), self.analyzer)
        writer = index.writer(heap_size=heap_bytes, num_threads=1)
        for doc in docs:
            writer.add_document(tantivy.Document(variant_id=int(doc.variant_id), faq_id=str(doc.faq_id),
                                                 question=self.text(doc.question)))
        writer.commit()
        writer.wait_merging_threads()
        self._opened = None  # reopened read-only on first search
        return len(docs)

    def text(self, text: str) -> str:
        return normalise_text(text) if self.language == "en" else text

    def open(self) -> tuple[Any, Any]:
        """(index, searcher), opened once; callers keep the pair, so a concurrent close() cannot pull
        it from under a search in progress."""
        opened = self._opened
        if opened is not None:
            return opened
        import tantivy

        with self._lock:
            if self._opened is None:
                if not (self.path / "meta.json").is_file():
                    raise LexicalUnavailable(
                        f"no lexical index at {self.path}: the build predates lexical indexing; run `faq index build`")
                index = tantivy.Index.open(str(self.path))
                index.register_tokenizer(analyzer_of(self.language), self.analyzer)  # not stored with the index
                self._opened = (index, index.searcher())
            return self._opened

    def search(self, text: str, size: int) -> list[LexicalHit]:
        import tantivy

        terms = list(self.analyzer.analyze(self.text(text)))
        if not terms:  # only stop words / punctuation: nothing can match
            return []
        index, searcher = self.open()
        # one SHOULD clause per analysed token, repeats included (as Elasticsearch's match query)
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(index.schema, "question", t, index_option="freq")) for t in terms])
        hits = []
        for score, address in searcher.search(query, size, count=False).hits:
            doc = searcher.doc(address)
            hits.append(LexicalHit(int(doc["variant_id"][0]), doc["faq_id"][0], doc["question"][0], float(score)))
        return hits


class TantivyLexicalIndex(LexicalIndex):
    """An embedded tantivy index in a folder (a build's `lexical/`). An English KB's is the folder itself;
    a KB read in other languages has one index per language in `lexical/<language>/`, each query read by
    every one of them and their hits merged by score (Elasticsearch's `most_fields` over a field per
    language: a phrasing is in one of them only)."""

    engine = "tantivy"

    def __init__(self, path: str | Path, languages: Sequence[str] = ("en",)):
        self.path = Path(path)
        self.location = str(self.path)
        self.languages = tuple(languages)
        single = self.languages == ("en",)
        self._parts = {lang: _TantivyPart(self.path if single else self.path / lang, lang) for lang in self.languages}

    # -- building ------------------------------------------------------------------------------
    def build(self, docs: Iterable[Any], heap_bytes: int = 64_000_000) -> int:
        if self.path.exists() and any(self.path.iterdir()):
            raise FileExistsError(f"{self.path}: not empty; a lexical index is built into a new folder")
        by_language: dict[str, list[Any]] = {lang: [] for lang in self.languages}
        for doc in docs:
            language = getattr(doc, "language", "en")
            if language not in by_language:
                raise ValueError(f"a {language!r} phrasing for an index of {', '.join(self.languages)}")
            by_language[language].append(doc)
        return sum(part.build(by_language[lang], heap_bytes) for lang, part in self._parts.items())

    # -- searching -----------------------------------------------------------------------------
    def count(self) -> int:
        return sum(int(part.open()[1].num_docs) for part in self._parts.values())

    def analyze(self, text: str, language: str = "en") -> list[str]:
        part = self._parts.get(language) or _TantivyPart(self.path, language)
        return list(part.analyzer.analyze(part.text(text)))

    def _search_batch(self, queries: Sequence[str], size: int) -> list[list[LexicalHit]]:
        return [sorted_hits(h for part in self._parts.values() for h in part.search(text, size))[:size]
                for text in queries]

    def close(self) -> None:
        for part in self._parts.values():
            part._opened = None


# -- choosing and opening an engine ---------------------------------------------------------------
def resolve_engine(engine: str | None, es_url: str | None) -> str:
    """'auto'/None -> elasticsearch when a URL is configured, else tantivy."""
    if engine in (None, "", "auto"):
        return "elasticsearch" if es_url else "tantivy"
    if engine not in ENGINES:
        raise ValueError(f"unknown lexical engine {engine!r}; valid: auto, {', '.join(ENGINES)}")
    if engine == "elasticsearch" and not es_url:
        raise ValueError("the elasticsearch lexical engine needs FAQ_ES_URL")
    return engine


def open_lexical(build_dir: str | Path, manifest: dict, engine: str, *, es_url: str | None = None,
                 es_prefix: str = "faq", es_timeout_s: float = 5.0) -> LexicalIndex:
    """The lexical index of one build, on `engine` (see `resolve_engine`)."""
    info = (manifest or {}).get("lexical") or {}
    languages = tuple(info.get("languages") or ("en",))
    if engine == "tantivy":
        rel = (info.get("tantivy") or {}).get("dir", TANTIVY_DIR)
        return TantivyLexicalIndex(Path(build_dir) / rel, languages)
    if engine == "elasticsearch":
        if not es_url:
            raise LexicalUnavailable("the elasticsearch lexical engine needs FAQ_ES_URL")
        from index.elasticsearch.lexical import ElasticsearchLexicalIndex, es_index_name

        name = (info.get("elasticsearch") or {}).get("index") or es_index_name(es_prefix, manifest["version"])
        return ElasticsearchLexicalIndex(es_url, name, timeout_s=es_timeout_s, languages=languages)
    raise ValueError(f"unknown lexical engine {engine!r}")


def build_lexical(staging: Path, version: str, docs: Sequence[Any], *, es_url: str | None = None,
                  es_prefix: str = "faq", es_timeout_s: float = 30.0, languages: Sequence[str] | None = None) -> dict:
    """Build the lexical indexes of one build version -> the manifest's `lexical` block.

    tantivy always (embedded, small, in the build folder); Elasticsearch as well when `es_url` is set.
    A failed Elasticsearch build does not fail the build (the ANN index is the product; the lexical
    arms of this version then answer 503 and /readyz says why): the block records the error.
    """
    import time

    from collections import Counter

    read_as = doc_languages([d.question for d in docs], languages)
    docs = [LexicalDoc(int(d.variant_id), str(d.faq_id), d.question, lang) for d, lang in zip(docs, read_as)]
    used = Counter(read_as)
    kept = tuple(sorted(used, key=lambda lang: (lang != "en", lang))) or ("en",)
    block: dict[str, Any] = {"analyzer": "english (Porter2 stemmer)" if kept == ("en",) else
                             "per language: " + ", ".join(f"{lang} (Snowball {STEMMERS[lang]})" for lang in kept),
                             "recall_k": DEFAULT_RECALL_K, "languages": {lang: used[lang] for lang in kept}}
    t = time.perf_counter()
    n = TantivyLexicalIndex(Path(staging) / TANTIVY_DIR, kept).build(docs)
    block["tantivy"] = {"dir": TANTIVY_DIR, "n_docs": n, "build_s": round(time.perf_counter() - t, 4)}
    if es_url:
        from index.elasticsearch.lexical import ElasticsearchLexicalIndex, es_index_name

        name = es_index_name(es_prefix, version)
        es = ElasticsearchLexicalIndex(es_url, name, timeout_s=es_timeout_s, languages=kept)
        t = time.perf_counter()
        try:
            n_es = es.build(docs)
            block["elasticsearch"] = {"index": name, "url": redact(es_url), "n_docs": n_es,
                                      "build_s": round(time.perf_counter() - t, 4)}
        except LexicalUnavailable as exc:
            log.warning("Elasticsearch index %s not built: %s", name, exc)
            block["elasticsearch"] = {"index": name, "url": redact(es_url), "error": str(exc)}
        finally:
            es.close()
    return block

