"""Lexical (BM25) retrieval over question variants: the classic baseline's recall stage.

One interface, `LexicalIndex`, two engines with the same semantics:

- `TantivyLexicalIndex`: embedded (the default), a tantivy index in the build folder
  (`index_dir/<version>/lexical/`), written with the rest of the build and renamed into place with it;
- `ElasticsearchLexicalIndex`: a real Elasticsearch through the official `elasticsearch` client
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
  precision on the same documents (tests/test_lexical.py checks it);
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
import re
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

log = logging.getLogger(__name__)

ENGINES = ("tantivy", "elasticsearch")
#: BM25 candidates handed to the re-ranking stage (the paper's Elasticsearch recall depth)
DEFAULT_RECALL_K = 30
#: first search depth in variants for k FAQs, and the deepest re-search
MIN_DEPTH = 100
DEPTH_FACTOR = 4
MAX_DEPTH = 4000
#: folder of the tantivy index inside a build folder
TANTIVY_DIR = "lexical"
ANALYZER_NAME = "faq_english"
#: Lucene's English stop words: what Elasticsearch's `english` analyzer removes (`_english_`)
ENGLISH_STOP_WORDS = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with"
).split()
#: client major version this code talks to (pyproject pins elasticsearch>=8.19,<9)
ES_MAJOR = 8


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


def _sorted_hits(hits: Iterable[LexicalHit]) -> list[LexicalHit]:
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


# -- tantivy --------------------------------------------------------------------------------------
#: (Elasticsearch/Java pattern, Python pattern, replacement group numbers), applied in order, each one
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


def _tantivy_schema() -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("variant_id", stored=True, indexed=True)
    builder.add_text_field("faq_id", stored=True, tokenizer_name="raw")
    # BM25 needs term frequencies, not positions (no phrase queries)
    builder.add_text_field("question", stored=True, tokenizer_name=ANALYZER_NAME, index_option="freq")
    return builder.build()


class TantivyLexicalIndex(LexicalIndex):
    """An embedded tantivy index in a folder (a build's `lexical/`)."""

    engine = "tantivy"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.location = str(self.path)
        self._analyzer = english_analyzer()
        self._opened: tuple[Any, Any] | None = None  # (tantivy.Index, Searcher) once opened
        self._lock = threading.Lock()

    # -- building ------------------------------------------------------------------------------
    def build(self, docs: Iterable[Any], heap_bytes: int = 64_000_000) -> int:
        import tantivy

        if self.path.exists() and any(self.path.iterdir()):
            raise FileExistsError(f"{self.path}: not empty; a lexical index is built into a new folder")
        self.path.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(_tantivy_schema(), path=str(self.path), reuse=False)
        index.register_tokenizer(ANALYZER_NAME, self._analyzer)
        n = 0
        writer = index.writer(heap_size=heap_bytes, num_threads=1)
        for doc in docs:
            writer.add_document(tantivy.Document(
                variant_id=int(doc.variant_id), faq_id=str(doc.faq_id),
                question=normalise_text(doc.question)))
            n += 1
        writer.commit()
        writer.wait_merging_threads()
        self._opened = None  # reopened read-only on first search
        return n

    # -- searching -----------------------------------------------------------------------------
    def _open(self) -> tuple[Any, Any]:
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
                index.register_tokenizer(ANALYZER_NAME, self._analyzer)  # analyzers are not stored with the index
                self._opened = (index, index.searcher())
            return self._opened

    def count(self) -> int:
        return int(self._open()[1].num_docs)

    def analyze(self, text: str) -> list[str]:
        return list(self._analyzer.analyze(normalise_text(text)))

    def _search_batch(self, queries: Sequence[str], size: int) -> list[list[LexicalHit]]:
        import tantivy

        index, searcher = self._open()
        schema = index.schema
        out = []
        for text in queries:
            terms = self.analyze(text)
            if not terms:  # only stop words / punctuation: nothing can match
                out.append([])
                continue
            # one SHOULD clause per analysed token, repeats included (as Elasticsearch's match query)
            query = tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "question", t, index_option="freq")) for t in terms])
            hits = []
            for score, address in searcher.search(query, size, count=False).hits:
                doc = searcher.doc(address)
                hits.append(LexicalHit(int(doc["variant_id"][0]), doc["faq_id"][0], doc["question"][0], float(score)))
            out.append(_sorted_hits(hits))
        return out

    def close(self) -> None:
        self._opened = None


# -- Elasticsearch -----------------------------------------------------------------------------
def es_index_name(prefix: str, version: str) -> str:
    """The Elasticsearch index of one build version (ES index names must be lower case)."""
    return f"{prefix}-{version}".lower()


ES_SETTINGS = {
    # one shard: BM25 statistics are the whole KB's (as in tantivy), not a shard's sample
    "number_of_shards": 1,
    "number_of_replicas": 0,
    # the built-in `english` analyzer rebuilt as a custom one: the TEXT_REWRITES as char filters (tantivy
    # runs them in Python) and the Porter2 stemmer (tantivy's English stemmer) in place of Porter
    "analysis": {
        "filter": {
            "faq_english_stop": {"type": "stop", "stopwords": "_english_"},
            "faq_english_stemmer": {"type": "stemmer", "language": "porter2"},
        },
        "char_filter": {
            f"faq_rewrite_{i}": {"type": "pattern_replace", "pattern": es_pattern,
                                 "replacement": "".join(f"${g}" for g in groups)}
            for i, (es_pattern, _, groups) in enumerate(TEXT_REWRITES)
        },
        "analyzer": {
            ANALYZER_NAME: {
                "type": "custom", "char_filter": [f"faq_rewrite_{i}" for i in range(len(TEXT_REWRITES))],
                "tokenizer": "standard", "filter": ["lowercase", "faq_english_stop", "faq_english_stemmer"],
            },
        },
    },
}
ES_MAPPINGS = {
    "dynamic": "strict",
    "properties": {
        "variant_id": {"type": "long"},
        "faq_id": {"type": "keyword"},
        "question": {"type": "text", "analyzer": ANALYZER_NAME},
    },
}


class ElasticsearchLexicalIndex(LexicalIndex):
    """One Elasticsearch index (`index_name`) on the server at `url`, through the official client."""

    engine = "elasticsearch"

    def __init__(self, url: str, index_name: str, timeout_s: float = 5.0, client: Any = None):
        from elasticsearch import Elasticsearch

        self.url = url
        self.index_name = index_name
        self.location = index_name
        self.timeout_s = timeout_s
        # no retries: an unreachable server must give a quick, clear 503, not a long stall
        self.client = client or Elasticsearch(url, request_timeout=timeout_s, max_retries=0, retry_on_timeout=False)
        self._version_checked = False

    def _where(self) -> str:
        return f"Elasticsearch at {_redact(self.url)}"

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a client call; transport/server failures become LexicalUnavailable with a clear message."""
        from elastic_transport import TransportError
        from elasticsearch import ApiError, NotFoundError, UnsupportedProductError

        try:
            if not self._version_checked:
                self.check_version()
            return fn(*args, **kwargs)
        except LexicalUnavailable:
            raise
        except NotFoundError as exc:
            raise LexicalUnavailable(
                f"{self._where()} has no index {self.index_name!r} ({what}): run `faq index build` with FAQ_ES_URL set") from exc
        except UnsupportedProductError as exc:
            raise LexicalUnavailable(f"{self._where()} is not Elasticsearch: {exc}") from exc
        except TransportError as exc:  # connection refused, timeout, TLS ...
            raise LexicalUnavailable(f"{self._where()} is unreachable ({what}): {type(exc).__name__}: {exc}") from exc
        except ApiError as exc:
            raise LexicalUnavailable(f"{self._where()} refused {what}: {exc}") from exc

    def check_version(self) -> str:
        """The server's version; refuses a server whose major differs from the client's (pinned 8.x)."""
        from elastic_transport import TransportError
        from elasticsearch import ApiError

        try:
            number = str(self.client.info()["version"]["number"])
        except (TransportError, ApiError) as exc:
            raise LexicalUnavailable(f"{self._where()} is unreachable: {type(exc).__name__}: {exc}") from exc
        major = int(number.split(".")[0])
        if major != ES_MAJOR:
            raise LexicalUnavailable(
                f"{self._where()} runs {number} but the client speaks {ES_MAJOR}.x: run an Elasticsearch {ES_MAJOR}.x "
                "server (docker-compose.yml pins one) or pin the matching `elasticsearch` client")
        self._version_checked = True
        return number

    def build(self, docs: Iterable[Any], chunk_size: int = 1000) -> int:
        from elasticsearch import helpers

        def actions() -> Iterable[dict]:
            for doc in docs:
                yield {"_index": self.index_name, "_id": str(int(doc.variant_id)),
                       "_source": {"variant_id": int(doc.variant_id), "faq_id": str(doc.faq_id), "question": doc.question}}

        def run() -> int:
            self.client.indices.create(index=self.index_name, settings=ES_SETTINGS, mappings=ES_MAPPINGS)
            n = 0
            for ok, item in helpers.streaming_bulk(self.client, actions(), chunk_size=chunk_size, raise_on_error=False):
                if not ok:
                    raise LexicalUnavailable(f"{self._where()} rejected a document of {self.index_name!r}: {item}")
                n += 1
            self.client.indices.refresh(index=self.index_name)
            return n

        n = self._call("bulk indexing", run)
        indexed = self.count()
        if indexed != n:
            raise LexicalUnavailable(f"{self._where()}: {self.index_name!r} holds {indexed} documents, {n} were sent")
        return n

    def count(self) -> int:
        return int(self._call("count", self.client.count, index=self.index_name)["count"])

    def exists(self) -> bool:
        return bool(self._call("exists", self.client.indices.exists, index=self.index_name))

    def delete(self) -> None:
        self._call("delete", self.client.indices.delete, index=self.index_name, ignore_unavailable=True)

    def _search_batch(self, queries: Sequence[str], size: int) -> list[list[LexicalHit]]:
        body: list[dict] = []
        for text in queries:
            body.append({"index": self.index_name})
            body.append({"query": {"multi_match": {"query": text, "fields": ["question"]}}, "size": size,
                         "_source": ["variant_id", "faq_id", "question"]})
        out: list[list[LexicalHit]] = []
        if not queries:
            return out
        responses = self._call("search", self.client.msearch, searches=body)["responses"]
        for response in responses:
            if "error" in response:
                error = response["error"]
                reason = error.get("reason") if isinstance(error, dict) else error
                if isinstance(error, dict) and error.get("type") == "index_not_found_exception":
                    raise LexicalUnavailable(
                        f"{self._where()} has no index {self.index_name!r}: run `faq index build` with FAQ_ES_URL set")
                raise LexicalUnavailable(f"{self._where()} failed a search on {self.index_name!r}: {reason}")
            out.append(_sorted_hits(
                LexicalHit(int(h["_source"]["variant_id"]), h["_source"]["faq_id"], h["_source"]["question"], float(h["_score"]))
                for h in response["hits"]["hits"]))
        return out

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def _redact(url: str) -> str:
    """A URL without its credentials (for messages and manifests)."""
    return re.sub(r"//[^/@]*@", "//***@", url)


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
    if engine == "tantivy":
        rel = (info.get("tantivy") or {}).get("dir", TANTIVY_DIR)
        return TantivyLexicalIndex(Path(build_dir) / rel)
    if engine == "elasticsearch":
        if not es_url:
            raise LexicalUnavailable("the elasticsearch lexical engine needs FAQ_ES_URL")
        name = (info.get("elasticsearch") or {}).get("index") or es_index_name(es_prefix, manifest["version"])
        return ElasticsearchLexicalIndex(es_url, name, timeout_s=es_timeout_s)
    raise ValueError(f"unknown lexical engine {engine!r}")


def build_lexical(staging: Path, version: str, docs: Sequence[Any], *, es_url: str | None = None,
                  es_prefix: str = "faq", es_timeout_s: float = 30.0) -> dict:
    """Build the lexical indexes of one build version -> the manifest's `lexical` block.

    tantivy always (embedded, small, in the build folder); Elasticsearch as well when `es_url` is set.
    A failed Elasticsearch build does not fail the build (the ANN index is the product; the lexical
    arms of this version then answer 503 and /readyz says why): the block records the error.
    """
    import time

    block: dict[str, Any] = {"analyzer": "english (Porter2 stemmer)", "recall_k": DEFAULT_RECALL_K}
    t = time.perf_counter()
    n = TantivyLexicalIndex(Path(staging) / TANTIVY_DIR).build(docs)
    block["tantivy"] = {"dir": TANTIVY_DIR, "n_docs": n, "build_s": round(time.perf_counter() - t, 4)}
    if es_url:
        name = es_index_name(es_prefix, version)
        es = ElasticsearchLexicalIndex(es_url, name, timeout_s=es_timeout_s)
        t = time.perf_counter()
        try:
            n_es = es.build(docs)
            block["elasticsearch"] = {"index": name, "url": _redact(es_url), "n_docs": n_es,
                                      "build_s": round(time.perf_counter() - t, 4)}
        except LexicalUnavailable as exc:
            log.warning("Elasticsearch index %s not built: %s", name, exc)
            block["elasticsearch"] = {"index": name, "url": _redact(es_url), "error": str(exc)}
        finally:
            es.close()
    return block


def delete_es_indexes(es_url: str, names: Iterable[str], timeout_s: float = 10.0) -> list[str]:
    """Delete Elasticsearch indexes of pruned or failed builds (best effort) -> the names deleted."""
    deleted = []
    for name in names:
        es = ElasticsearchLexicalIndex(es_url, name, timeout_s=timeout_s)
        try:
            es.delete()
            deleted.append(name)
        except LexicalUnavailable as exc:
            log.warning("could not delete Elasticsearch index %s: %s", name, exc)
        finally:
            es.close()
    return deleted
