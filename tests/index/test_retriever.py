"""Retriever (index/retriever.py): search over a build, and KB edits (add / edit / delete) visible
through the delta segment and tombstones without a rebuild. Real store, real MiniLM."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from index.artifacts import BuildRegistry
from app.release import build_current
from index.retriever import Hit, Retriever


@pytest.fixture
def built(store, index_kb_records, minilm_encoder, tmp_path):
    """(store, registry) with the test KB imported and one build current."""
    store.import_records(index_kb_records)
    registry = BuildRegistry(tmp_path / "indexes")
    build_current(store, minilm_encoder, registry, n_trees=10, search_k=-1, batch_size=32)
    return store, registry


def fresh(store, registry, encoder, cache=None) -> Retriever:
    return Retriever.load(registry.index_dir / "current").with_kb(store.snapshot(), encoder, cache)


def top_faq(retriever: Retriever, encoder, query: str, k: int = 5) -> list[Hit]:
    return retriever.search(encoder.encode([query]), k)[0]


def test_search_finds_paraphrases_best_first(built, minilm_encoder):
    store, registry = built
    retriever = fresh(store, registry, minilm_encoder)
    assert retriever.version == registry.current() and retriever.dim == 384
    assert retriever.n_delta == 0 and retriever.n_tombstones == 0
    queries = ["I can't remember my password", "when does my parcel get here", "how to get my money back"]
    results = retriever.search(minilm_encoder.encode(queries), k=5)
    assert [hits[0].faq_id for hits in results] == ["reset-password", "shipping-time", "refund"]
    for hits in results:
        assert len(hits) == 5 and all(isinstance(h, Hit) for h in hits)
        assert [h.cosine for h in hits] == sorted((h.cosine for h in hits), reverse=True)
    # cosines are real dot products of the query with the variant's vector
    q = minilm_encoder.encode(["I can't remember my password"])[0]
    best = results[0][0]
    assert best.cosine == pytest.approx(float(q @ minilm_encoder.encode([best.question])[0]), abs=1e-4)
    assert retriever.answers["refund"][0].startswith("Refunds are issued")


def test_added_edited_and_deleted_faqs_are_visible_without_rebuild(built, minilm_encoder):
    store, registry = built
    store.create_faq("pet-policy", "Dogs are welcome in all our stores.", ["Can I bring my dog to the store?"])
    store.update_faq("refund", answer="Refunds within 30 days.",
                     questions=["Can I get a refund?", "Is it possible to receive a reimbursement?"])
    store.delete_faq("dark-mode")
    cache: dict[str, np.ndarray] = {}
    retriever = fresh(store, registry, minilm_encoder, cache)
    # 2 new variants in the delta (the new FAQ and the added refund phrasing); the removed refund phrasing
    # and both dark-mode variants are tombstoned
    assert retriever.n_delta == 2 and retriever.n_tombstones == 3
    # the cache holds what the build lacks: the new phrasings and the new or edited answers
    assert set(cache) == {"Can I bring my dog to the store?", "Is it possible to receive a reimbursement?",
                          "Dogs are welcome in all our stores.", "Refunds within 30 days."}

    hits = top_faq(retriever, minilm_encoder, "are pets allowed in your shop")
    assert hits[0].faq_id == "pet-policy" and hits[0].question == "Can I bring my dog to the store?"
    hits = top_faq(retriever, minilm_encoder, "I'd like a reimbursement")
    assert hits[0].question == "Is it possible to receive a reimbursement?"
    assert retriever.answers["refund"][0] == "Refunds within 30 days."  # edited answer shows immediately

    removed = "How do I ask for my money back?"
    for hits in retriever.search(minilm_encoder.encode([removed, "switch to a dark theme"]), k=20):
        assert removed not in {h.question for h in hits}
        assert "dark-mode" not in {h.faq_id for h in hits}
    assert "dark-mode" not in retriever.answers

    # the original retriever (what a server held before the refresh) is unchanged: hot swap, no mutation
    old = Retriever.load(registry.index_dir / "current")
    assert top_faq(old, minilm_encoder, "switch to a dark theme")[0].faq_id == "dark-mode"


def test_cache_avoids_re_encoding_and_is_trimmed(built, minilm_encoder):
    store, registry = built
    store.create_faq("pet-policy", "Dogs welcome.", ["Can I bring my dog to the store?"])
    cache: dict[str, np.ndarray] = {}
    fresh(store, registry, minilm_encoder, cache)
    vec = cache["Can I bring my dog to the store?"]
    store.create_faq("parking", "Free parking at every store.", ["Is there parking at the store?"])
    fresh(store, registry, minilm_encoder, cache)
    assert cache["Can I bring my dog to the store?"] is vec  # reused, not re-encoded
    store.delete_faq("pet-policy")
    retriever = fresh(store, registry, minilm_encoder, cache)
    assert set(cache) == {"Is there parking at the store?", "Free parking at every store."} and retriever.n_delta == 1


def test_rebuild_folds_the_delta_in(built, minilm_encoder):
    store, registry = built
    store.create_faq("pet-policy", "Dogs welcome.", ["Can I bring my dog to the store?"])
    store.delete_faq("dark-mode")
    before = fresh(store, registry, minilm_encoder)
    assert (before.n_delta, before.n_tombstones) == (1, 2)
    build_current(store, minilm_encoder, registry, n_trees=10, batch_size=32)
    after = fresh(store, registry, minilm_encoder)
    assert after.version != before.version and (after.n_delta, after.n_tombstones) == (0, 0)
    assert after.kb_revision == store.revision() == after.manifest["kb_revision"]
    assert top_faq(after, minilm_encoder, "are pets allowed in your shop")[0].faq_id == "pet-policy"


def test_many_tombstones_still_return_k_live_hits(built, minilm_encoder):
    store, registry = built
    keep = {"reset-password", "refund", "warranty"}
    for faq_id in list(store.snapshot().faqs):
        if faq_id not in keep:
            store.delete_faq(faq_id)
    retriever = fresh(store, registry, minilm_encoder)
    n_live = len(store.snapshot().variants)
    assert retriever.n_tombstones == retriever.n_build_variants - n_live
    (hits,) = retriever.search(minilm_encoder.encode(["switch to a dark theme"]), k=n_live + 5)
    assert len(hits) == n_live and {h.faq_id for h in hits} == keep


def test_concurrent_searches_from_threads_agree_with_serial(built, minilm_encoder):
    store, registry = built
    store.create_faq("pet-policy", "Dogs welcome.", ["Can I bring my dog to the store?"])
    store.delete_faq("dark-mode")
    retriever = fresh(store, registry, minilm_encoder)
    queries = minilm_encoder.encode([f"question number {i} about {topic}" for i in range(8)
                                     for topic in ("passwords", "shipping", "pets", "refunds", "themes")])
    serial = [retriever.search(q[None, :], 10)[0] for q in queries]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(3):
            threaded = list(pool.map(lambda q: retriever.search(q[None, :], 10)[0], queries))
            assert threaded == serial


def test_guards(built, minilm_encoder, tmp_path):
    store, registry = built
    retriever = Retriever.load(registry.index_dir / "current")
    with pytest.raises(ValueError, match="was built with encoder 'all-MiniLM-L6-v2' but 'other-encoder'"):
        retriever.with_kb(store.snapshot(), SimpleNamespace(id="other-encoder", dim=384))
    # the build ran PyTorch: int8 vectors are refused, fp32 ONNX (equal to 1e-4) is not
    assert retriever.manifest["encoder_runtime"] == "torch"
    with pytest.raises(ValueError, match="FAQ_ENCODER_RUNTIME=torch"):
        retriever.with_kb(store.snapshot(), SimpleNamespace(id=minilm_encoder.id, dim=384, runtime="onnx-int8"))
    assert retriever.with_kb(store.snapshot(), SimpleNamespace(
        id=minilm_encoder.id, dim=384, runtime="onnx", encode=minilm_encoder.encode)).version == retriever.version
    with pytest.raises(ValueError, match=r"expected shape \(q, 384\)"):
        retriever.search(np.zeros((1, 5), dtype=np.float32), 3)
    with pytest.raises(ValueError, match="k must be"):
        retriever.search(np.zeros((1, 384), dtype=np.float32), 0)
    with pytest.raises(FileNotFoundError, match="not an index build"):
        Retriever.load(tmp_path)


def test_exact_search_of_a_small_build_agrees_with_annoy(built, minilm_encoder, monkeypatch):
    """Small builds are searched by one matrix product; larger ones through Annoy. On the test KB (small
    enough for Annoy's search_k to reach every item) both give the same hits, tombstones included."""
    import index.retriever as retriever_module

    store, registry = built
    exact = Retriever.load(registry.index_dir / "current")
    monkeypatch.setattr(retriever_module, "EXACT_MAX_CELLS", 0)
    annoy = Retriever.load(registry.index_dir / "current")
    assert exact._exact is not None and annoy._exact is None
    queries = minilm_encoder.encode(["money back please", "parcel tracking", "how do I log in", "delete my data"])

    def same(a, b):
        assert [[h.variant_id for h in row] for row in a] == [[h.variant_id for h in row] for row in b]
        np.testing.assert_allclose([h.cosine for row in a for h in row], [h.cosine for row in b for h in row], atol=1e-5)

    same(exact.search(queries, 7), annoy.search(queries, 7))
    store.delete_faq("refund")  # tombstones: refund's phrasings leave both
    snapshot = store.snapshot()
    exact, annoy = exact.with_kb(snapshot, minilm_encoder), annoy.with_kb(snapshot, minilm_encoder)
    assert exact._exact is not None  # with_kb copies share the build's matrix
    same(exact.search(queries, 7), annoy.search(queries, 7))
    assert "refund" not in {h.faq_id for row in exact.search(queries, 50) for h in row}
    # a deeper search of the same queries (what `deepen` does) reuses the scores: same order, longer
    deeper = exact.search(queries, 12)
    same([row[:7] for row in deeper], exact.search(queries, 7))
