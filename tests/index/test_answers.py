"""Answer evidence (index/answers.py): which KBs use it, what a build stores, how the retriever keeps it
live, and how the pipeline mixes it in. Real store, real MiniLM, the 30-FAQ test KB."""
from __future__ import annotations

import json

import numpy as np
import pytest

from app.match import Pipeline
from index import artifacts
from index.answers import WEIGHT_GRID, AnswerVectors, answer_policy, combine, is_placeholder, nearest_weight
from index.artifacts import BuildRegistry, verify_build_dir
from app.release import build_current
from index.calibration import calibration_for
from index.candidates import answer_hits
from index.retriever import Retriever
from kb.records import KbRecord


def test_placeholders_and_the_kb_level_policy():
    assert is_placeholder("[intent: balance]") and is_placeholder("  ") and is_placeholder(None)
    assert not is_placeholder("Refunds take 14 days [see terms].")
    # intent KBs exported with the label as the answer: one word says nothing the phrasings do not
    assert is_placeholder("alarm_query") and is_placeholder("card-arrival") and is_placeholder(" billing.refund ")
    assert not is_placeholder("Yes, within 14 days.")
    real = {"a": ("Use the reset link.", []), "b": ("Call us.", []), "c": ("[intent: c]", [])}
    policy = answer_policy(real)
    assert policy.used and policy.faq_ids == ["a", "b"] and policy.n_placeholder == 1
    off = answer_policy({f"i{n}": (f"[intent: i{n}]", []) for n in range(10)})
    assert not off.used and off.faq_ids == [] and "placeholders" in off.reason
    assert off.report()["used"] is False and off.report()["n_faqs"] == 10


def test_weights_round_to_the_calibrated_grid_and_mix():
    assert WEIGHT_GRID[0] == 0.0 and WEIGHT_GRID[-1] == 0.9
    assert nearest_weight(0.33) == 0.35 and nearest_weight(0.9) == 0.9
    assert combine(0.8, 0.4, 0.25) == pytest.approx(0.7)
    assert combine(0.8, None, 0.5) == 0.8 and combine(0.8, 0.1, 0.0) == 0.8
    vectors = np.eye(3, dtype=np.float32)
    av = AnswerVectors(["x", "y", "z"], vectors)
    cos = av.cosines(np.array([[0.1, 0.9, 0.3]], dtype=np.float32))[0]
    assert av.top(cos, 2) == ["y", "z"] and av.top(cos, 10) == ["y", "z", "x"]
    with pytest.raises(ValueError):
        AnswerVectors(["x"], vectors)


@pytest.fixture
def built(store, index_kb_records, minilm_encoder, tmp_path):
    store.import_records(index_kb_records)
    registry = BuildRegistry(tmp_path / "indexes")
    manifest = build_current(store, minilm_encoder, registry, n_trees=10, search_k=-1, batch_size=32)
    return store, registry, manifest


def test_build_encodes_answers_and_calibrates_the_mixed_score(built, minilm_encoder):
    store, registry, manifest = built
    folder = registry.current_dir()
    assert manifest["answers"] == {"used": True, "n_faqs": 30, "n_encoded": 30, "n_placeholder": 0,
                                   "reason": manifest["answers"]["reason"]}
    vectors = np.load(folder / artifacts.ANSWERS_FILE)
    rows = [json.loads(line) for line in (folder / artifacts.ANSWER_MAP_FILE).read_text().splitlines()]
    assert vectors.dtype == np.float16 and vectors.shape == (30, 384) and len(rows) == 30
    refund = next(i for i, r in enumerate(rows) if r["faq_id"] == "refund")
    assert rows[refund]["answer"] == store.snapshot().faqs["refund"][0]
    expected = minilm_encoder.encode([rows[refund]["answer"]])[0]
    assert float(vectors[refund].astype(np.float32) @ expected) == pytest.approx(1.0, abs=2e-3)
    curves = manifest["calibration"]["answer_weights"]
    assert set(curves) == {f"{w:.2f}" for w in WEIGHT_GRID if w > 0} and set(curves["0.50"]) == {"1", "2", "3", "4", "5"}
    mixed = calibration_for(manifest, pool=2, answer_weight=0.52)
    assert (mixed.a, mixed.b) == (curves["0.50"]["2"]["a"], curves["0.50"]["2"]["b"])
    assert calibration_for(manifest, pool=2).a == manifest["calibration"]["pooled"]["2"]["a"]
    assert curves["0.50"]["1"]["a"] > 0

    (folder / artifacts.ANSWERS_FILE).unlink()  # a build whose manifest promises answers it lacks fails verification
    report = verify_build_dir(folder, recall=False)
    assert not report.ok and any(artifacts.ANSWERS_FILE in e for e in report.errors)


def test_a_kb_of_placeholder_answers_builds_and_matches_as_before(store, minilm_encoder, tmp_path):
    from tests.helpers.kb import INDEX_TEST_FAQS

    store.import_records([KbRecord(f, q, f"[intent: {f}]", []) for f, _, qs in INDEX_TEST_FAQS for q in qs])
    registry = BuildRegistry(tmp_path / "indexes")
    said: list[str] = []
    manifest = build_current(store, minilm_encoder, registry, n_trees=10, search_k=-1, batch_size=32, report=said.append)
    assert manifest["answers"]["used"] is False and "answer_weights" not in manifest["calibration"]
    assert any("answer evidence is off" in line for line in said)
    assert not (registry.current_dir() / artifacts.ANSWERS_FILE).exists()
    retriever = Retriever.load(registry.current_dir()).with_kb(store.snapshot(), minilm_encoder)
    assert retriever.answer_vectors is None
    queries = ["I can't remember my password", "when does my parcel get here", "is there a phone number"]
    with_w = Pipeline(minilm_encoder, retriever, answer_weight=0.5).match(queries, top_k=5)
    without = Pipeline(minilm_encoder, retriever, answer_weight=0.0).match(queries, top_k=5)
    assert [[(m.faq_id, m.score) for m in r.matches] for r in with_w] == \
           [[(m.faq_id, m.score) for m in r.matches] for r in without]
    auto = Pipeline(minilm_encoder, retriever, pool_variants=None, answer_weight=0.5)
    assert auto.served_answer_weight(retriever) == 0.0 and auto.served_pool(retriever) == 2


def test_retriever_keeps_answers_live_through_kb_edits(built, minilm_encoder):
    store, registry, _ = built
    base = Retriever.load(registry.current_dir())
    assert len(base.answer_vectors) == 30
    store.update_faq("refund", answer="We never give refunds, sorry.")
    store.delete_faq("invoice")
    store.create_faq("gift-cards", "Gift cards can be bought in the shop and never expire.", ["Do you sell gift cards?"])
    live = base.with_kb(store.snapshot(), minilm_encoder)
    av = live.answer_vectors
    assert "invoice" not in av.row_of and "gift-cards" in av.row_of and len(av) == 30
    for faq_id, text in (("refund", "We never give refunds, sorry."),
                         ("gift-cards", "Gift cards can be bought in the shop and never expire.")):
        assert float(av.vectors[av.row_of[faq_id]] @ minilm_encoder.encode([text])[0]) == pytest.approx(1.0, abs=1e-4)
    unchanged = av.row_of["shipping-time"]
    assert np.allclose(av.vectors[unchanged], base.answer_vectors.vectors[base.answer_vectors.row_of["shipping-time"]])
    assert [q for _, q in live.faq_variants("gift-cards")] == ["Do you sell gift cards?"]
    assert live.faq_variants("invoice") == []


def test_an_edited_answer_put_back_gets_the_builds_vector_again(built, minilm_encoder):
    """A refresh of a refreshed retriever (a KB poll, production on a publication) compares with the build's own
    answers: an answer edited and then put back (a rollback) is the build's vector again, not encoded anew."""
    store, registry, _ = built
    base = Retriever.load(registry.current_dir())
    original = store.get_faq("refund").answer
    store.update_faq("refund", answer="We never give refunds, sorry.")
    edited = base.with_kb(store.snapshot(), minilm_encoder)
    store.update_faq("refund", answer=original)

    class Refuses:
        id = minilm_encoder.id

        def encode(self, texts, **kwargs):
            raise AssertionError(f"encoded again: {texts}")

    restored = edited.with_kb(store.snapshot(), Refuses())
    av, built_av = restored.answer_vectors, base.answer_vectors
    assert np.array_equal(av.vectors[av.row_of["refund"]], built_av.vectors[built_av.row_of["refund"]])


def test_answer_recall_adds_faqs_the_phrasings_missed_scored_exactly(built, minilm_encoder):
    store, registry, _ = built
    retriever = Retriever.load(registry.current_dir()).with_kb(store.snapshot(), minilm_encoder)
    q = minilm_encoder.encode(["support@example.com"])[0]
    cos = retriever.answer_vectors.cosines(q[None, :])[0]
    hits = answer_hits(retriever, retriever.answer_vectors, cos, q, [], top_k=1)
    assert hits and hits[0].faq_id == "contact-support"
    assert [h.cosine for h in hits] == sorted((h.cosine for h in hits), reverse=True)
    for h in hits:  # every phrasing of a recalled FAQ, with its true cosine
        assert h.cosine == pytest.approx(float(q @ minilm_encoder.encode([h.question])[0]), abs=2e-3)
    assert sum(h.faq_id == "contact-support" for h in hits) == 3


def test_answer_evidence_answers_a_query_only_the_answer_words(built, minilm_encoder):
    """"the tracking link in my email" is worded like track-order's answer, not its phrasings: phrasings
    alone rank the FAQ first but below the threshold; with the answer as evidence it is answered."""
    store, registry, manifest = built
    retriever = Retriever.load(registry.current_dir()).with_kb(store.snapshot(), minilm_encoder)
    query = "the tracking link in my email"
    plain = Pipeline(minilm_encoder, retriever, answer_weight=0.0).match([query], top_k=3)[0]
    mixed = Pipeline(minilm_encoder, retriever, answer_weight=0.5).match([query], top_k=3)[0]
    assert plain.matches[0].faq_id == "track-order" and plain.answer is None
    assert all(m.answer_cosine is None for m in plain.matches)
    top = mixed.matches[0]
    assert top.faq_id == "track-order" and mixed.answer == top and top.answer_cosine is not None
    q = minilm_encoder.encode([query])[0]
    phrasing = max(float(q @ minilm_encoder.encode([text])[0]) for _, text in retriever.faq_variants("track-order"))
    assert top.cosine == pytest.approx(0.5 * phrasing + 0.5 * top.answer_cosine, abs=2e-3)
    assert top.score == pytest.approx(calibration_for(manifest, pool=1, answer_weight=0.5).probability(top.cosine))
    assert top.answer_cosine > phrasing
    auto = Pipeline(minilm_encoder, retriever, pool_variants=None, answer_weight=0.52)
    assert auto.served_answer_weight(retriever) == 0.5 and auto.served_pool(retriever) == 1


def test_the_mixed_prior_keeps_a_typical_match_where_the_phrasing_prior_put_it():
    from index.calibration import Calibration, mixed_prior

    prior = Calibration(12.0, -9.0)
    for w in (0.3, 0.6, 0.9):
        mixed = mixed_prior(prior, w, own_answer=0.45)
        for cos in (0.5, 0.75, 0.9):  # a query whose answer cosine is the typical one scores as before
            s = (1 - w) * cos + w * 0.45
            assert mixed.probability(s) == pytest.approx(prior.probability(cos))
    assert mixed_prior(prior, 0.5, None).a == 24.0
