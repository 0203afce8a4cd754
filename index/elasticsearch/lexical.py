"""BM25 over question variants on Elasticsearch, the lexical engine beside tantivy (`index/lexical.py` has the
contract both follow, and opens either): one index per build version, `<prefix>-<version>`, so a rebuild never
touches the index being served; client and server majors must match (the client is pinned to 8.x)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from index.bm25 import (
    ANALYZER_NAME, MAX_TOKEN_CHARS, STEMMERS, TEXT_REWRITES, LexicalHit, LexicalIndex, LexicalUnavailable, analyzer_of,
    field_of, sorted_hits,
)
from index.elasticsearch.client import ES_MAJOR, new_client, where

log = logging.getLogger(__name__)


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
# the other languages as tantivy reads them (index/lexical.py `analyzer_for`): split at every character that is
# not a letter or digit (tantivy's simple tokenizer), drop overlong tokens, lower-case, fold accents, Snowball
ES_SETTINGS["analysis"]["tokenizer"] = {"faq_alphanumeric": {"type": "pattern", "pattern": "[^\\p{L}\\p{N}]+"}}
ES_SETTINGS["analysis"]["filter"]["faq_max_token"] = {"type": "length", "max": MAX_TOKEN_CHARS}
for _lang, _stemmer in STEMMERS.items():
    if _lang == "en":
        continue
    ES_SETTINGS["analysis"]["filter"][f"faq_{_stemmer}_stemmer"] = {"type": "snowball", "language": _stemmer.title()}
    ES_SETTINGS["analysis"]["analyzer"][analyzer_of(_lang)] = {
        "type": "custom", "tokenizer": "faq_alphanumeric",
        "filter": ["faq_max_token", "lowercase", "asciifolding", f"faq_{_stemmer}_stemmer"]}
ES_MAPPINGS = {
    "dynamic": "strict",
    "properties": {
        "variant_id": {"type": "long"},
        "faq_id": {"type": "keyword"},
        **{field_of(lang): {"type": "text", "analyzer": analyzer_of(lang)} for lang in STEMMERS},
    },
}


class ElasticsearchLexicalIndex(LexicalIndex):
    """One Elasticsearch index (`index_name`) on the server at `url`, through the official client."""

    engine = "elasticsearch"

    def __init__(self, url: str, index_name: str, timeout_s: float = 5.0, client: Any = None,
                 languages: Sequence[str] = ("en",)):
        self.languages = tuple(languages)
        self.url = url
        self.index_name = index_name
        self.location = index_name
        self.timeout_s = timeout_s
        # no retries: an unreachable server must give a quick, clear 503, not a long stall
        self.client = client or new_client(url, timeout_s)
        self._version_checked = False

    def _where(self) -> str:
        return where(self.url)

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
                field = field_of(getattr(doc, "language", "en"))
                yield {"_index": self.index_name, "_id": str(int(doc.variant_id)),
                       "_source": {"variant_id": int(doc.variant_id), "faq_id": str(doc.faq_id), field: doc.question}}

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
        fields = [field_of(lang) for lang in self.languages]
        # several languages: each field's own analyzer reads the query, scores summed as tantivy sums them
        match: dict[str, Any] = {"fields": fields} if len(fields) == 1 else {"fields": fields, "type": "most_fields"}
        for text in queries:
            body.append({"index": self.index_name})
            body.append({"query": {"multi_match": {"query": text, **match}}, "size": size,
                         "_source": ["variant_id", "faq_id", *fields]})
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
            out.append(sorted_hits(
                LexicalHit(int(h["_source"]["variant_id"]), h["_source"]["faq_id"],
                           next(h["_source"][f] for f in fields if f in h["_source"]), float(h["_score"]))
                for h in response["hits"]["hits"]))
        return out

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass



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


@dataclass(frozen=True)
class EsLexicalIndexes:
    """The BM25 indexes of a registry's versions, as one of its stores (index/artifacts.py `VersionStore`): a
    version the registry prunes, or a build that never became a version, loses its index here."""

    url: str
    prefix: str = "faq"
    timeout_s: float = 10.0

    def delete_versions(self, versions: Sequence[str]) -> list[str]:
        names = {version: es_index_name(self.prefix, version) for version in versions}
        deleted = set(delete_es_indexes(self.url, list(names.values()), self.timeout_s))
        return [version for version, name in names.items() if name in deleted]

    def prune(self, pruned: Sequence[str], live: set[str]) -> list[str]:
        # only the pruned versions' indexes: `<prefix>-<version>` does not say which KB an index belongs
        # to, so one without a version here may be another KB's
        return self.delete_versions(pruned)
