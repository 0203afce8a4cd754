"""Elasticsearch as the vector store (index/elasticsearch/vectors.py), against the noida-db Elasticsearch-API emulator
over HTTP on loopback (`es_emulator_url`), with the real MiniLM: a build writes its vectors into a new index
per version, the alias follows `current` (activation, rollback), kNN serving gives the in-process results,
pruning and KB deletion remove indexes."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from index.artifacts import BuildRegistry, IndexVerificationError
from app.release import build_current
from index.elasticsearch.vectors import (
    EsBuildRegistry, EsVectorStore, VectorStoreUnavailable, version_of, delete_kb_vectors, load_retriever,
    open_registry, vec_alias, vec_index_name,
)
from index.retriever import Retriever

QUERIES = ["I can't remember my password", "when does my parcel get here", "how to get my money back",
           "switch to a dark theme", "can I pay with a credit card", "is there an app for android"]


@pytest.fixture
def prefix() -> str:
    """A prefix of its own per test: the emulator is shared by the whole run."""
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture
def es_store(es_emulator_url, prefix):
    store = EsVectorStore(es_emulator_url, prefix, "default", timeout_s=10)
    yield store
    store.delete_all()
    store.close()


@pytest.fixture
def kb_store(store, index_kb_records):
    store.import_records(index_kb_records)
    return store


def build(store, encoder, registry, **kw):
    return build_current(store, encoder, registry, n_trees=10, search_k=-1, batch_size=32, **kw)


def served(registry, store, encoder, version=None):
    return load_retriever(registry, version or registry.current()).with_kb(store.snapshot(), encoder)


def in_process(registry, store, encoder, version=None):
    plain = BuildRegistry(registry.index_dir)
    return load_retriever(plain, version or registry.current()).with_kb(store.snapshot(), encoder)


def assert_same_hits(a, b):
    assert [h.variant_id for h in a] == [h.variant_id for h in b]
    assert [h.cosine for h in a] == pytest.approx([h.cosine for h in b], abs=1e-6)


def test_names_are_lower_case_and_a_kb_claims_only_its_own_indexes():
    version = "20261122T010203Z-a1b2c3"
    assert vec_index_name("FAQ", "default", version) == "faq-vec-default-20261122t010203z-a1b2c3"
    assert vec_alias("faq", "sales") == "faq-vec-sales"
    assert version_of(vec_index_name("faq", "a", version), "faq", "a") == version
    # KB "a" must not take KB "a-b"'s indexes for its own (deleting KB "a" must leave "a-b" alone)
    assert version_of(vec_index_name("faq", "a-b", version), "faq", "a") is None
    assert version_of("faq-vec-a-20261122t010203z-a1b2c3-x", "faq", "a") is None


def test_build_writes_a_new_index_with_the_mapping_and_moves_the_alias(kb_store, minilm_encoder, tmp_path, es_store):
    registry = EsBuildRegistry(tmp_path / "indexes", es_store)
    manifest = build(kb_store, minilm_encoder, registry)
    version = manifest["version"]
    block = manifest["vector_store"]
    assert block["index"] == es_store.index_name(version) and block["alias"] == es_store.alias
    assert block["n_phrasings"] == 68 and block["n_answers"] == 30 and block["self_hits"] == 1.0
    assert es_store.counts(version) == {"phrasing": 68, "answer": 30}
    assert registry.current() == version and es_store.current_version() == version
    assert es_store.alias_targets() == [es_store.index_name(version)]

    mapping = es_store.client.indices.get_mapping(index=block["index"]).body[block["index"]]["mappings"]
    vector = mapping["properties"]["vector"]
    assert vector["type"] == "dense_vector" and vector["dims"] == 384 and vector["similarity"] == "cosine"
    assert vector["index"] is True and vector["index_options"]["type"] == "int8_hnsw"
    assert {mapping["properties"][f]["type"] for f in ("kb", "version", "kind", "faq_id")} == {"keyword"}
    assert mapping["_meta"]["kb"] == "default" and mapping["_meta"]["version"] == version

    # the stored vectors are the build's own, bit for bit (the exact cosines rely on it)
    hit = es_store.client.search(index=block["index"], query={"term": {"variant_id": kb_store.snapshot().variants[0].variant_id}},
                                 _source=["vector"]).body["hits"]["hits"][0]
    built = Retriever.load(registry.path(version))
    assert np.array_equal(np.array(hit["_source"]["vector"], dtype=np.float32), built.vectors_of([kb_store.snapshot().variants[0].variant_id])[0][0])


@pytest.mark.parametrize("index_type", ["int8_hnsw", "hnsw"])
def test_knn_serving_equals_the_in_process_search_with_edits(kb_store, minilm_encoder, tmp_path, es_emulator_url, prefix,
                                                             index_type):
    es = EsVectorStore(es_emulator_url, prefix, "default", timeout_s=10, index_type=index_type)
    try:
        registry = EsBuildRegistry(tmp_path / "indexes", es)
        build(kb_store, minilm_encoder, registry)
        vecs = minilm_encoder.encode(QUERIES)
        remote, local = served(registry, kb_store, minilm_encoder), in_process(registry, kb_store, minilm_encoder)
        assert remote._exact is None and local._exact is not None  # no in-process copy when ES searches
        for k in (1, 5, 20, 100):
            for a, b in zip(remote.search(vecs, k), local.search(vecs, k)):
                assert_same_hits(a, b)
        # ids only, vectors from the build folder: the same hits
        version = registry.current()
        ids_only = Retriever.load(registry.path(version), backend=es.searcher(version, 68, with_vectors=False))
        for a, b in zip(ids_only.with_kb(kb_store.snapshot(), minilm_encoder).search(vecs, 20), local.search(vecs, 20)):
            assert_same_hits(a, b)

        # KB edits: the delta segment stays in process, tombstoned phrasings never come back from ES
        kb_store.create_faq("pet-policy", "Dogs are welcome.", ["Can I bring my dog to the store?"])
        kb_store.update_faq("refund", questions=["Can I get a refund?", "Is it possible to receive a reimbursement?"])
        kb_store.delete_faq("dark-mode")
        remote, local = served(registry, kb_store, minilm_encoder), in_process(registry, kb_store, minilm_encoder)
        assert (remote.n_delta, remote.n_tombstones) == (2, 3)
        vecs = minilm_encoder.encode(QUERIES + ["are pets allowed in your shop", "How do I ask for my money back?"])
        for a, b in zip(remote.search(vecs, 10), local.search(vecs, 10)):
            assert_same_hits(a, b)
            assert "dark-mode" not in {h.faq_id for h in a}
        assert remote.search(vecs[-2:-1], 1)[0][0].faq_id == "pet-policy"
    finally:
        es.delete_all()
        es.close()


def test_swap_rollback_prune_and_kb_deletion(kb_store, minilm_encoder, tmp_path, es_store, es_emulator_url, prefix):
    registry = EsBuildRegistry(tmp_path / "indexes", es_store)
    first = build(kb_store, minilm_encoder, registry)["version"]
    kb_store.create_faq("pet-policy", "Dogs are welcome.", ["Can I bring my dog to the store?"])
    second = build(kb_store, minilm_encoder, registry)["version"]
    assert es_store.versions() == [first, second]
    assert registry.current() == second and es_store.alias_targets() == [es_store.index_name(second)]

    # rollback (`faq index activate`): the folder pointer and the alias move back together
    registry.activate(first)
    assert registry.current() == first and es_store.alias_targets() == [es_store.index_name(first)]
    registry.activate(second)
    assert es_store.current_version() == second

    # the previous version stays searchable (requests holding its retriever) until it is pruned
    third = build(kb_store, minilm_encoder, registry, keep_versions=2)["version"]
    assert registry.versions() == [second, third] and es_store.versions() == [second, third]
    assert es_store.current_version() == third

    # a rolled-back-to version is what servers search until their next poll: once a newer build replaces it,
    # its folder may go but its index stays while it is the previous current one
    registry.activate(second)
    fourth = build(kb_store, minilm_encoder, registry, keep_versions=2)["version"]
    assert registry.versions() == [third, fourth] and registry.previous() == second
    assert es_store.versions() == [second, third, fourth]
    fifth = build(kb_store, minilm_encoder, registry, keep_versions=2)["version"]
    assert es_store.versions() == registry.versions() == [fourth, fifth]

    # another KB's indexes survive this KB's deletion
    other = EsVectorStore(es_emulator_url, prefix, "default-2", timeout_s=10)
    try:
        other.client.indices.create(index=other.index_name(fifth))
        assert delete_kb_vectors(es_emulator_url, prefix, "default") == [fourth, fifth]
        assert es_store.versions() == [] and es_store.alias_targets() == []
        assert other.versions() == [fifth]
    finally:
        other.delete_all()
        other.close()


def test_activation_refuses_a_build_without_es_vectors_and_a_missing_index(kb_store, minilm_encoder, tmp_path, es_store):
    plain = BuildRegistry(tmp_path / "indexes")
    annoy_only = build(kb_store, minilm_encoder, plain)["version"]
    registry = EsBuildRegistry(tmp_path / "indexes", es_store)
    kb_store.create_faq("pet-policy", "Dogs are welcome.", ["Can I bring my dog to the store?"])
    with_es = build(kb_store, minilm_encoder, registry)["version"]
    with pytest.raises(IndexVerificationError, match="built without Elasticsearch vectors"):
        registry.activate(annoy_only)
    assert registry.current() == with_es and es_store.current_version() == with_es
    es_store.client.indices.delete(index=es_store.index_name(with_es))
    with pytest.raises(IndexVerificationError, match="cannot be read"):
        registry.load_retriever(with_es)


def test_a_failed_build_leaves_no_index(kb_store, minilm_encoder, tmp_path, es_store, monkeypatch):
    import index.build

    registry = EsBuildRegistry(tmp_path / "indexes", es_store)

    def broken(*args, **kwargs):
        raise RuntimeError("calibration broke")

    monkeypatch.setattr(index.build, "calibrate", broken)
    with pytest.raises(RuntimeError, match="calibration broke"):
        build(kb_store, minilm_encoder, registry)
    assert registry.versions() == [] and es_store.versions() == []


def test_an_unreachable_server_raises_vector_store_unavailable(kb_store, minilm_encoder, tmp_path, es_store):
    registry = EsBuildRegistry(tmp_path / "indexes", es_store)
    build(kb_store, minilm_encoder, registry)
    retriever = served(registry, kb_store, minilm_encoder)
    dead = EsVectorStore("http://127.0.0.1:9", es_store.prefix, "default", timeout_s=1)
    retriever._backend.store = dead
    with pytest.raises(VectorStoreUnavailable, match="unreachable"):
        retriever.search(minilm_encoder.encode(["refund"]), 5)


def test_open_registry_follows_the_settings(tmp_path, es_emulator_url):
    from app.settings import Settings

    plain = open_registry(Settings(data_dir=tmp_path))
    assert type(plain) is BuildRegistry
    es = open_registry(Settings(data_dir=tmp_path, vector_store="elasticsearch", es_url=es_emulator_url, kb="sales"))
    assert isinstance(es, EsBuildRegistry) and es.vector_store.alias == "faq-vec-sales"
    assert es.index_dir == tmp_path / "kbs" / "sales" / "indexes"
    with pytest.raises(ValueError, match="needs FAQ_ES_URL"):
        open_registry(Settings(data_dir=tmp_path, vector_store="elasticsearch"))


def test_a_build_fails_cleanly_when_elasticsearch_is_down(kb_store, minilm_encoder, tmp_path):
    registry = EsBuildRegistry(tmp_path / "indexes", EsVectorStore("http://127.0.0.1:9", "t", "default", timeout_s=1))
    with pytest.raises(VectorStoreUnavailable, match="unreachable"):
        build(kb_store, minilm_encoder, registry)
    assert registry.versions() == [] and registry.current() is None and registry.unfinished() == []


def test_searches_never_fail_while_the_alias_swaps_back_and_forth(kb_store, minilm_encoder, tmp_path, es_store):
    import threading

    registry = EsBuildRegistry(tmp_path / "indexes", es_store)
    first = build(kb_store, minilm_encoder, registry)["version"]
    kb_store.create_faq("pet-policy", "Dogs are welcome.", ["Can I bring my dog to the store?"])
    second = build(kb_store, minilm_encoder, registry)["version"]
    vecs = minilm_encoder.encode(QUERIES)
    holder = {"retriever": served(registry, kb_store, minilm_encoder)}
    stop, failures, done = threading.Event(), [], {"served": 0, "alias": 0}

    def through_the_retriever() -> None:
        while not stop.is_set():
            try:
                assert holder["retriever"].search(vecs, 5)[0]
                done["served"] += 1
            except Exception as exc:  # noqa: BLE001 - every failure counts
                failures.append(repr(exc))

    def through_the_alias() -> None:
        knn = {"field": "vector", "query_vector": vecs[0].tolist(), "k": 5, "num_candidates": 50}
        while not stop.is_set():
            try:
                hits = es_store.client.search(index=es_store.alias, knn=knn, size=5, _source=["version"]).body["hits"]["hits"]
                assert len({h["_source"]["version"] for h in hits}) == 1
                done["alias"] += 1
            except Exception as exc:  # noqa: BLE001 - every failure counts
                failures.append(repr(exc))

    threads = [threading.Thread(target=through_the_retriever), threading.Thread(target=through_the_alias)]
    for thread in threads:
        thread.start()
    try:
        for version in [first, second] * 5:
            registry.activate(version)
            holder["retriever"] = served(registry, kb_store, minilm_encoder)  # the service's swap
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert failures == [] and done["served"] > 0 and done["alias"] > 0
    assert registry.current() == second == es_store.current_version()


def test_a_filtered_knn_search_equals_the_in_process_one(store, index_kb_records, minilm_encoder, tmp_path, es_store):
    """The filter's FAQ ids go to Elasticsearch as the kNN `filter`: the engine returns the best phrasings
    inside it, however few, and they are the in-process exact search's."""
    from dataclasses import replace

    from kb.filters import parse_filter

    faqs = sorted({r.faq_id for r in index_kb_records})
    kept = set(faqs[::5])
    records, seen = [], set()
    for r in index_kb_records:
        first = r.faq_id not in seen
        seen.add(r.faq_id)
        records.append(replace(r, metadata={"area": "kept" if r.faq_id in kept else "other"} if first else None))
    store.import_records(records)
    registry = EsBuildRegistry(tmp_path / "indexes", es_store)
    build(store, minilm_encoder, registry)
    flt = parse_filter({"all": [{"key": "area", "value": "KEPT"}]})
    remote, local = served(registry, store, minilm_encoder), in_process(registry, store, minilm_encoder)
    vecs = minilm_encoder.encode(QUERIES)
    for k in (1, 5, 50):
        for a, b in zip(remote.search(vecs, k, remote.select(flt)), local.search(vecs, k, local.select(flt))):
            assert_same_hits(a, b)
            assert {h.faq_id for h in a} <= kept and len(a) == min(k, len(local.select(flt).items))
