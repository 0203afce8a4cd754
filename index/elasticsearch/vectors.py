"""Elasticsearch as the vector store of a build (`FAQ_VECTOR_STORE=elasticsearch`; the default `annoy` keeps
everything in the build folder).

What lives where:
- one Elasticsearch index per KB and build version, `<prefix>-vec-<kb>-<version>` (lower case), written once
  by the build and never again: a document per phrasing (`kind` "phrasing": `kb`, `version`, `faq_id`,
  `variant_id`, `vector`) and one per encoded answer (`kind` "answer", no `variant_id`); `vector` is a
  `dense_vector` with `similarity: cosine`, `index: true` and an explicit `index_options` (`int8_hnsw` by
  default, `hnsw` for full-precision graphs: `INDEX_TYPES`);
- the alias `<prefix>-vec-<kb>` names the KB's current version in Elasticsearch. It moves with `current`
  (`EsBuildRegistry.activate`, also the rollback path) in one `_aliases` call that removes the old target
  and adds the new one, so a reader of the alias never sees zero or two versions;
- the build folder stays complete (Annoy, vectors, id map, calibration): verification, calibration, the
  activation gate and FAQ_VECTOR_STORE=annoy keep working from it unchanged.

Serving: `EsBuildRegistry.load_retriever` opens the build folder with an `EsPhrasingSearch` as the
Retriever's backend. Each query is one kNN search (`knn` with `k`, `num_candidates` and a `filter` on kb,
version and kind, tombstoned variants excluded) against the version's own index, not the alias: a
Retriever's delta segment and tombstones are computed against one build's id map, and a request still
holding the previous Retriever during a swap must keep searching the previous version. The hits' stored
vectors come back in `_source` and the Retriever computes the exact cosines itself. Elasticsearch's
`_score` for cosine is (1 + cos) / 2, and with `int8_hnsw` it comes from the quantized vectors, so
it is neither exact nor bit-equal to the in-process cosine that calibration, pooling and thresholds were
fitted on; `OVERSAMPLE` times the wanted hits are fetched and re-ranked by the exact cosine so that a
quantization error near the cut does not drop a true neighbour. Answer vectors are read from the build
folder as before (the answer segment must follow live KB edits in process anyway); the answer documents
in Elasticsearch are for other readers of the index and for a later move of that segment.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from index.artifacts import VERSION_RE, BuildRegistry, IndexVerificationError, VersionStore
from index.elasticsearch.client import ES_MAJOR, new_client, redact, where
from index.elasticsearch.lexical import EsLexicalIndexes

log = logging.getLogger(__name__)

VECTOR_STORES = ("annoy", "elasticsearch")
#: HNSW graph parameters written into the mapping explicitly (Elasticsearch's defaults) so that a
#: server default changing between releases cannot change a build's recall silently
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 100
#: `index_options` by name. int8_hnsw: 4x less memory for the searched vectors (float vectors are kept on
#: disk beside them), recommended by Elasticsearch from 384 dimensions; hnsw: full-precision graph.
INDEX_TYPES = {
    "int8_hnsw": {"type": "int8_hnsw", "m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION},
    "hnsw": {"type": "hnsw", "m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION},
}
DEFAULT_INDEX_TYPE = "int8_hnsw"
#: hits fetched per wanted hit, re-ranked by exact cosine (quantized scores misorder near-ties)
OVERSAMPLE = 2
#: least HNSW candidates per shard; more explored candidates = higher recall for a little latency
MIN_NUM_CANDIDATES = 100
#: Elasticsearch refuses num_candidates (and so k) above this
MAX_NUM_CANDIDATES = 10_000
#: FAQ ids a kNN filter names at most (Elasticsearch refuses a terms query over index.max_terms_count, 65,536)
MAX_FILTER_TERMS = 60_000
#: tombstoned variant ids sent as a `must_not` filter; beyond this many the search over-fetches by their
#: number instead (a request body of 10k ids is already ~100 kB; a rebuild folds tombstones away)
MAX_EXCLUDED_IDS = 10_000
#: phrasings searched for themselves when a build's index is verified, and the share that must find
#: their own vector (HNSW is approximate: one miss in 20 is tolerated, two are not)
VERIFY_SAMPLE = 20
SELF_HIT_FLOOR = 0.95
#: bulk requests of a build may take longer than a served search (FAQ_ES_TIMEOUT_S)
BUILD_TIMEOUT_S = 120.0
KINDS = ("phrasing", "answer")
#: in index_dir: the version that was current before the latest activation. Servers swap to a new current
#: only at their next poll and requests hold their Retriever to the end, so until then they still search
#: that version's index: pruning keeps it (a pruned folder is safe, its Annoy file stays mapped; a deleted
#: index is not)
PREVIOUS_FILE = ".vector-previous"


class VectorStoreUnavailable(RuntimeError):
    """Elasticsearch cannot answer for the vector store (unreachable, index missing, refused a request)."""


def vec_index_name(prefix: str, kb: str, version: str) -> str:
    """The index of one KB's build version (Elasticsearch index names are lower case)."""
    return f"{prefix}-vec-{kb}-{version}".lower()


def vec_alias(prefix: str, kb: str) -> str:
    """The alias naming a KB's current version."""
    return f"{prefix}-vec-{kb}".lower()


def version_of(index_name: str, prefix: str, kb: str) -> str | None:
    """The version an index name belongs to, when it is one of this KB's vector indexes. The KB part must
    be followed by exactly a version: KB `a` must not claim `<prefix>-vec-a-b-<version>` of KB `a-b`."""
    head = f"{prefix}-vec-{kb}-".lower()
    if not index_name.startswith(head):
        return None
    rest = index_name[len(head):]
    # versions are upper-case T and Z in a lower-cased name: 20261122t010203z-a1b2c3
    version = f"{rest[:8]}T{rest[9:15]}Z{rest[16:]}" if len(rest) > 16 else ""
    return version if VERSION_RE.match(version) and version.lower() == rest else None


def vec_mappings(dim: int, index_type: str, kb: str, version: str) -> dict:
    if index_type not in INDEX_TYPES:
        raise ValueError(f"unknown vector index type {index_type!r}; valid: {', '.join(INDEX_TYPES)}")
    return {
        "dynamic": "strict",
        # what the index holds, readable without knowing the naming scheme
        "_meta": {"kb": kb, "version": version, "dim": dim, "written_by": "faq-match"},
        "properties": {
            "kb": {"type": "keyword"},
            "version": {"type": "keyword"},
            "kind": {"type": "keyword"},
            "faq_id": {"type": "keyword"},
            "variant_id": {"type": "long"},
            "vector": {"type": "dense_vector", "dims": int(dim), "similarity": "cosine", "index": True,
                       "index_options": dict(INDEX_TYPES[index_type])},
        },
    }


#: one shard: a KB's build is small next to a shard's comfortable size (tens of GB), and one HNSW graph
#: per segment is searched fastest; replicas are a deployment decision (docs/elasticsearch.md)
VEC_SETTINGS = {
    "number_of_shards": 1,
    "number_of_replicas": 0,
    # written once, then read only: no periodic refreshes (one explicit refresh after the bulk load)
    "refresh_interval": "-1",
}


def _answer_id(faq_id: str) -> str:
    import hashlib

    doc_id = f"a:{faq_id}"
    # Elasticsearch refuses _id values over 512 bytes
    return doc_id if len(doc_id.encode()) <= 512 else "a#" + hashlib.sha256(faq_id.encode()).hexdigest()


class EsVectorStore:
    """One KB's vector indexes and alias on the Elasticsearch at `url`, through the official client."""

    def __init__(self, url: str, prefix: str = "faq", kb: str = "default", timeout_s: float = 5.0,
                 index_type: str = DEFAULT_INDEX_TYPE, client: Any = None):
        if index_type not in INDEX_TYPES:
            raise ValueError(f"unknown vector index type {index_type!r}; valid: {', '.join(INDEX_TYPES)}")
        self.url = url
        self.prefix = prefix
        self.kb = kb
        self.timeout_s = timeout_s
        self.index_type = index_type
        self.alias = vec_alias(prefix, kb)
        # no retries: a search that cannot be answered must fail fast, not stall the request behind it
        self.client = client or new_client(url, timeout_s)
        self._version_checked = False

    def index_name(self, version: str) -> str:
        return vec_index_name(self.prefix, self.kb, version)

    def where(self) -> str:
        return where(self.url)

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a client call; transport and server failures become VectorStoreUnavailable saying what failed."""
        from elastic_transport import TransportError
        from elasticsearch import ApiError, NotFoundError

        try:
            if not self._version_checked:
                self._check_version()
            return fn(*args, **kwargs)
        except VectorStoreUnavailable:
            raise
        except NotFoundError as exc:
            raise VectorStoreUnavailable(f"{self.where()}: not found ({what}): {exc}") from exc
        except TransportError as exc:
            raise VectorStoreUnavailable(f"{self.where()} is unreachable ({what}): {type(exc).__name__}: {exc}") from exc
        except ApiError as exc:
            raise VectorStoreUnavailable(f"{self.where()} refused {what}: {exc}") from exc

    def _check_version(self) -> None:
        number = str(self.client.info()["version"]["number"])
        if int(number.split(".")[0]) != ES_MAJOR:
            raise VectorStoreUnavailable(
                f"{self.where()} runs {number} but the client speaks {ES_MAJOR}.x: run an Elasticsearch {ES_MAJOR}.x server")
        self._version_checked = True

    # -- building ------------------------------------------------------------------------------------
    def build(self, version: str, variant_ids: Sequence[int], faq_ids: Sequence[str], vectors: np.ndarray,
              answer_faq_ids: Sequence[str] = (), answer_vectors: np.ndarray | None = None,
              chunk_size: int = 500) -> dict:
        """Write one version's phrasing (and answer) vectors into a NEW index, refresh, verify counts and
        that phrasings find themselves -> the manifest's `vector_store` block. Raises VectorStoreUnavailable
        (the half-written index is deleted) or IndexVerificationError."""
        from elasticsearch import helpers

        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(variant_ids) or len(faq_ids) != len(variant_ids):
            raise ValueError(f"{len(variant_ids)} ids, {len(faq_ids)} faq_ids, vectors {vectors.shape} do not match")
        answers = np.zeros((0, vectors.shape[1]), np.float32) if answer_vectors is None else np.asarray(answer_vectors, np.float32)
        if len(answers) != len(answer_faq_ids):
            raise ValueError(f"{len(answer_faq_ids)} answer faq_ids for {len(answers)} answer vectors")
        name = self.index_name(version)
        dim = int(vectors.shape[1])
        started = time.perf_counter()

        def actions() -> Iterable[dict]:
            head = {"kb": self.kb, "version": version}
            # tolist(): each float32 as the Python float of the same value, whose shortest repr reads back to
            # it exactly, so the vector a search returns is bit-equal to the one the build encoded
            for vid, fid, vec in zip(variant_ids, faq_ids, vectors):
                yield {"_index": name, "_id": f"p:{int(vid)}",
                       "_source": {**head, "kind": "phrasing", "faq_id": str(fid), "variant_id": int(vid),
                                   "vector": vec.tolist()}}
            for fid, vec in zip(answer_faq_ids, answers):
                yield {"_index": name, "_id": _answer_id(str(fid)),
                       "_source": {**head, "kind": "answer", "faq_id": str(fid), "vector": vec.tolist()}}

        def run() -> None:
            slow = self.client.options(request_timeout=max(self.timeout_s, BUILD_TIMEOUT_S))
            slow.indices.create(index=name, settings=VEC_SETTINGS, mappings=vec_mappings(dim, self.index_type, self.kb, version))
            for ok, item in helpers.streaming_bulk(slow, actions(), chunk_size=chunk_size, raise_on_error=False,
                                                   raise_on_exception=True):
                if not ok:
                    raise VectorStoreUnavailable(f"{self.where()} rejected a document of {name!r}: {item}")
            slow.indices.refresh(index=name)
            # one segment = one HNSW graph to walk per search; the index is never written again
            slow.indices.forcemerge(index=name, max_num_segments=1)

        try:
            self.call(f"bulk indexing into {name}", run)
            counts = self.counts(version)
            expected = {"phrasing": len(variant_ids), "answer": len(answers)}
            if counts != expected:
                raise IndexVerificationError(f"{name}: holds {counts}, {expected} were sent")
            self_hits = self._self_hits(version, vectors)
            if self_hits < SELF_HIT_FLOOR:
                raise IndexVerificationError(
                    f"{name}: only {self_hits:.0%} of {min(VERIFY_SAMPLE, len(vectors))} sampled phrasings find their own "
                    "vector in a kNN search")
        except BaseException:
            self.delete_versions([version])
            raise
        return {
            "engine": "elasticsearch", "index": name, "alias": self.alias, "kb": self.kb, "url": redact(self.url),
            "index_options": dict(INDEX_TYPES[self.index_type]), "similarity": "cosine",
            "n_phrasings": len(variant_ids), "n_answers": len(answers), "self_hits": self_hits,
            "build_s": round(time.perf_counter() - started, 4),
        }

    def counts(self, version: str) -> dict[str, int]:
        """Documents of each kind in a version's index (for this KB and version)."""
        name = self.index_name(version)
        out = {}
        for kind in KINDS:
            query = {"bool": {"filter": [{"term": {"kb": self.kb}}, {"term": {"version": version}},
                                         {"term": {"kind": kind}}]}}
            out[kind] = int(self.call(f"count of {name}", self.client.count, index=name, query=query)["count"])
        return out

    def _self_hits(self, version: str, vectors: np.ndarray) -> float:
        """Share of sampled phrasings whose own vector (or an identical one: the same text in two FAQs)
        comes back from a kNN search for it."""
        if not len(vectors):
            return 1.0
        rows = np.random.default_rng(0).choice(len(vectors), size=min(VERIFY_SAMPLE, len(vectors)), replace=False)
        results = self.searcher(version, len(vectors)).search(vectors[rows], 10)
        found = sum(1 for q, (_, got) in zip(vectors[rows], results) if len(got) and float(np.max(got @ q)) >= 1 - 1e-5)
        return found / len(rows)

    # -- serving -------------------------------------------------------------------------------------
    def searcher(self, version: str, n_phrasings: int, with_vectors: bool = True) -> "EsPhrasingSearch":
        return EsPhrasingSearch(self, version, n_phrasings, with_vectors)

    def check_version_index(self, version: str, manifest: dict) -> None:
        """Refuse a version whose index is missing or does not hold what its manifest says (before it is
        served or made current)."""
        block = manifest.get("vector_store") or {}
        if block.get("engine") != "elasticsearch":
            raise IndexVerificationError(
                f"{version} was built without Elasticsearch vectors (FAQ_VECTOR_STORE was annoy): rebuild it with "
                "FAQ_VECTOR_STORE=elasticsearch, or serve it with FAQ_VECTOR_STORE=annoy")
        if block.get("kb") not in (None, self.kb):
            raise IndexVerificationError(f"{version} belongs to KB {block.get('kb')!r}, not {self.kb!r}")
        expected = {"phrasing": int(block.get("n_phrasings", -1)), "answer": int(block.get("n_answers", 0))}
        try:
            counts = self.counts(version)
        except VectorStoreUnavailable as exc:
            raise IndexVerificationError(f"{version}: its vector index {self.index_name(version)!r} cannot be read: {exc}") from exc
        if counts != expected:
            raise IndexVerificationError(f"{version}: {self.index_name(version)!r} holds {counts}, its manifest says {expected}")

    # -- the alias -----------------------------------------------------------------------------------
    def alias_targets(self) -> list[str]:
        """Index names the KB's alias points at now (one, or none before the first activation)."""
        from elasticsearch import NotFoundError

        def get() -> list[str]:
            try:
                return sorted(self.client.indices.get_alias(name=self.alias).body)
            except NotFoundError:
                return []

        return self.call(f"alias {self.alias}", get)

    def current_version(self) -> str | None:
        targets = [version_of(t, self.prefix, self.kb) for t in self.alias_targets()]
        return next((v for v in targets if v), None)

    def activate(self, version: str) -> list[str]:
        """Point the KB's alias at `version`'s index: one `_aliases` call, removing it from whatever index
        holds it and adding it to the new one, applied atomically. Returns the indexes it left."""
        new = self.index_name(version)
        old = [t for t in self.alias_targets() if t != new]
        actions = [{"remove": {"index": t, "alias": self.alias}} for t in old]
        actions.append({"add": {"index": new, "alias": self.alias}})
        response = self.call(f"alias swap {self.alias} -> {new}", self.client.indices.update_aliases, actions=actions)
        body = getattr(response, "body", response)
        # servers from 8.14 report per-action failures in a 200 response instead of failing the request
        if body.get("errors"):
            raise VectorStoreUnavailable(f"{self.where()} refused the alias swap {self.alias} -> {new}: "
                                         f"{body.get('action_results')}")
        return old

    # -- deleting ------------------------------------------------------------------------------------
    def versions(self) -> list[str]:
        """Versions of this KB that have an index, oldest first."""
        pattern = f"{self.prefix}-vec-{self.kb}-*".lower()
        names = self.call(f"listing {pattern}", self.client.indices.get, index=pattern, allow_no_indices=True,
                           expand_wildcards="open,closed").body
        return sorted(v for v in (version_of(n, self.prefix, self.kb) for n in names) if v)

    def delete_versions(self, versions: Iterable[str]) -> list[str]:
        """Delete the indexes of these versions (best effort: a failure is logged) -> the versions deleted."""
        deleted = []
        for version in versions:
            name = self.index_name(version)
            try:
                self.call(f"deleting {name}", self.client.indices.delete, index=name, ignore_unavailable=True)
                deleted.append(version)
            except VectorStoreUnavailable as exc:
                log.warning("could not delete the vector index %s: %s", name, exc)
        return deleted

    def prune(self, pruned: Sequence[str], live: set[str]) -> list[str]:
        """As a registry's store (index/artifacts.py `VersionStore`): the indexes of `pruned` versions and
        of versions the registry no longer has (orphans of a crash), never those of `live` ones."""
        try:
            stale = sorted((set(pruned) | set(self.versions())) - live)
        except VectorStoreUnavailable as exc:
            log.warning("vector indexes of pruned versions not deleted: %s", exc)
            return []
        return self.delete_versions(stale)

    def delete_all(self) -> list[str]:
        """Delete every vector index of this KB (its alias goes with them): for deleting the KB."""
        return self.delete_versions(self.versions())

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


@dataclass
class EsPhrasingSearch:
    """kNN over one version's phrasings: the Retriever's backend for the build part of a search."""

    store: EsVectorStore
    version: str
    n_phrasings: int
    #: False: hits come back as ids only and the Retriever takes their vectors from the build folder (Annoy's
    #: fp32 copy, the same values): less to send and parse per hit, but the serving host then needs the folder's
    #: vectors too
    with_vectors: bool = True

    @property
    def index_name(self) -> str:
        return self.store.index_name(self.version)

    def search(self, vecs: np.ndarray, want: int, exclude: Sequence[int] = (),
               faq_ids: Sequence[str] | None = None) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Per query, (variant_ids, their stored vectors or None without `with_vectors`) of about OVERSAMPLE *
        `want` nearest phrasings of this version, minus the `exclude`d variant ids, in Elasticsearch's order
        (approximate: re-rank them). `faq_ids`: only those FAQs' phrasings, in the kNN `filter`, so the
        engine searches inside them (a filter of few documents is searched exhaustively)."""
        vecs = np.asarray(vecs, dtype=np.float32)
        if vecs.ndim == 1:
            vecs = vecs[None, :]
        if not len(vecs) or want < 1:
            return [(np.zeros(0, np.int64), np.zeros((0, vecs.shape[-1]), np.float32)) for _ in vecs]
        excluded = list(exclude) if len(exclude) <= MAX_EXCLUDED_IDS else []
        extra = 0 if excluded or not len(exclude) else len(exclude)  # too many to send: over-fetch instead
        k = min(max(OVERSAMPLE * want, want + 10) + extra, self.n_phrasings, MAX_NUM_CANDIDATES)
        k = max(k, 1)
        num_candidates = min(max(2 * k, MIN_NUM_CANDIDATES), MAX_NUM_CANDIDATES)
        flt: dict[str, Any] = {"filter": [{"term": {"kb": self.store.kb}}, {"term": {"version": self.version}},
                                          {"term": {"kind": "phrasing"}}]}
        if excluded:
            flt["must_not"] = [{"terms": {"variant_id": [int(v) for v in excluded]}}]
        if faq_ids is not None and len(faq_ids) <= MAX_FILTER_TERMS:  # more: the caller's own check filters
            flt["filter"].append({"terms": {"faq_id": [str(f) for f in faq_ids]}})
        body: list[dict] = []
        for vec in vecs:
            body.append({"index": self.index_name})
            body.append({"knn": {"field": "vector", "query_vector": vec.tolist(), "k": k,
                                 "num_candidates": num_candidates, "filter": {"bool": flt}},
                         "size": k, "_source": ["variant_id", "vector"] if self.with_vectors else ["variant_id"]})
        responses = self.store.call(f"kNN search of {self.index_name}", self.store.client.msearch,
                                     searches=body)["responses"]
        out = []
        for response in responses:
            if "error" in response:
                error = response["error"]
                reason = error.get("reason") if isinstance(error, dict) else error
                raise VectorStoreUnavailable(f"{self.store.where()} failed a kNN search on {self.index_name!r}: {reason}")
            hits = response["hits"]["hits"]
            ids = np.array([int(h["_source"]["variant_id"]) for h in hits], dtype=np.int64)
            if not self.with_vectors:
                out.append((ids, None))
                continue
            matrix = (np.array([h["_source"]["vector"] for h in hits], dtype=np.float32) if hits
                      else np.zeros((0, vecs.shape[1]), np.float32))
            out.append((ids, matrix))
        return out


# -- the registry that keeps Elasticsearch in step with the build folders -------------------------------
class EsBuildRegistry(BuildRegistry):
    """`BuildRegistry` whose versions also live in Elasticsearch: builds write their vectors there
    (index/build.py reads `vector_store`), activation moves the alias with `current`, pruning deletes the
    indexes of pruned (and orphaned) versions, and retrievers search there."""

    def __init__(self, index_dir: str | Path, vector_store: EsVectorStore, stores: Sequence[VersionStore] = ()):
        super().__init__(index_dir, (vector_store, *stores))
        self.vector_store = vector_store

    def activate(self, version: str, verify: bool = True) -> dict:
        manifest = self.read_manifest(version)
        self.vector_store.check_version_index(version, manifest)  # before anything moves
        previous = self.current()
        manifest = super().activate(version, verify=verify)
        try:
            self.vector_store.activate(version)
        except VectorStoreUnavailable:
            # `current` and the alias must agree: put `current` back where it was
            if previous is not None and previous != version:
                with self.lock():
                    self._switch_current(previous)
            raise
        if previous is not None and previous != version:
            tmp = self.index_dir / f"{PREVIOUS_FILE}.tmp-{os.getpid()}"
            tmp.write_text(previous + "\n", encoding="utf-8")
            os.replace(tmp, self.index_dir / PREVIOUS_FILE)  # a concurrent prune reads the old or the new name
        return manifest

    def previous(self) -> str | None:
        """The version that was current before the latest activation (see PREVIOUS_FILE)."""
        try:
            text = (self.index_dir / PREVIOUS_FILE).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return text if VERSION_RE.match(text) else None

    def still_searched(self) -> set[str]:
        previous = self.previous()
        return set() if previous is None else {previous}

    def load_retriever(self, version: str, mmap: bool = True) -> Any:
        from index.retriever import Retriever

        manifest = self.read_manifest(version)
        self.vector_store.check_version_index(version, manifest)
        backend = self.vector_store.searcher(version, int(manifest["vector_store"]["n_phrasings"]))
        return Retriever.load(self.path(version), mmap=mmap, backend=backend)


def load_retriever(registry: BuildRegistry, version: str, mmap: bool = True) -> Any:
    """The served view of `version`: through the registry's vector store when it has one, else in process."""
    if isinstance(registry, EsBuildRegistry):
        return registry.load_retriever(version, mmap=mmap)
    from index.retriever import Retriever

    return Retriever.load(registry.path(version), mmap=mmap)


def vector_store_for(settings: Any) -> EsVectorStore | None:
    """The settings' vector store: None for `annoy` (the build folder alone), else the KB's EsVectorStore."""
    kind = getattr(settings, "vector_store", "annoy") or "annoy"
    if kind not in VECTOR_STORES:
        raise ValueError(f"FAQ_VECTOR_STORE must be one of {', '.join(VECTOR_STORES)}, got {kind!r}")
    if kind == "annoy":
        return None
    if not settings.es_url:
        raise ValueError("FAQ_VECTOR_STORE=elasticsearch needs FAQ_ES_URL")
    return EsVectorStore(settings.es_url, settings.es_index_prefix, settings.kb, settings.es_timeout_s)


def open_registry(settings: Any, lexical: bool = True) -> BuildRegistry:
    """The build registry of the settings' KB: a plain BuildRegistry, or an EsBuildRegistry when
    FAQ_VECTOR_STORE=elasticsearch. With FAQ_ES_URL it also owns the builds' BM25 indexes there, unless
    `lexical` is False (`faq index build --no-lexical` leaves them alone, Elasticsearch may be down)."""
    store = vector_store_for(settings)
    index_dir = Path(settings.index_dir)
    stores = (EsLexicalIndexes(settings.es_url, settings.es_index_prefix),) if lexical and settings.es_url else ()
    return BuildRegistry(index_dir, stores) if store is None else EsBuildRegistry(index_dir, store, stores)


def delete_kb_vectors(url: str, prefix: str, kb: str, timeout_s: float = 10.0) -> list[str]:
    """Delete every vector index (and so the alias) of KB `kb`: for KB deletion. Returns the versions deleted."""
    store = EsVectorStore(url, prefix, kb, timeout_s)
    try:
        return store.delete_all()
    finally:
        store.close()

