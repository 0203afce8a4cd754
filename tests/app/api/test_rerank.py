"""`/match` with `rerank: true` through the real service: a temporary store, MiniLM, an Annoy build and a
tiny real re-ranker folder (FAQ_RERANKER). The served scores must be the re-ranker's own probabilities for
the candidates' best phrasings, in that order; without a re-ranker (or with a broken folder) the answer is
a 409 that says what to do."""
from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.api.main import create_app
from models.matchers.cross_encoder import load_reranker
from tests.helpers.reranker import make_tiny_reranker
from tests.helpers.api import build, make_settings, make_store


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    return make_tiny_reranker(tmp_path_factory.mktemp("rr") / "tiny")


def _client(tmp_path, encoder, **settings_overrides):
    settings = make_settings(tmp_path, **settings_overrides)
    store = make_store(settings)
    build(store, encoder, settings)
    return TestClient(create_app(settings, store=store, encoder=encoder))


def test_rerank_true_scores_with_the_installed_reranker(tmp_path, encoder, reranker_dir):
    with _client(tmp_path, encoder, reranker=str(reranker_dir), rerank_k=6) as client:
        query = "I can't remember my password"
        plain = client.post("/match", json={"query": query, "top_k": 3}).json()
        r = client.post("/match", json={"query": query, "top_k": 3, "rerank": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["arm"] == "ann+rerank" and plain["arm"] == "ann"
        assert body["timings_ms"]["rerank"] > 0 and plain["timings_ms"]["rerank"] == 0
        matches = body["matches"]
        assert len(matches) == 3
        # the scores are the re-ranker's calibrated probabilities of (query, best phrasing), best first
        model = load_reranker(reranker_dir)
        expected = model.score(query, [m["question"] for m in matches])
        np.testing.assert_allclose([m["score"] for m in matches], expected, atol=0.02)  # int8: batch-mates move it a little
        assert [m["score"] for m in matches] == sorted((m["score"] for m in matches), reverse=True)
        assert all(0.0 <= m["score"] <= 1.0 for m in matches)
        # the explicit arm is the same thing
        same = client.post("/match", json={"query": query, "top_k": 3, "arm": "ann+rerank"}).json()
        assert [m["faq_id"] for m in same["matches"]] == [m["faq_id"] for m in matches]


def test_rerank_without_a_reranker_is_a_clear_409(tmp_path, encoder):
    with _client(tmp_path, encoder) as client:
        r = client.post("/match", json={"query": "refund", "rerank": True})
        assert r.status_code == 409
        assert "FAQ_RERANKER" in r.json()["error"] and "faq train reranker" in r.json()["error"]
        assert client.post("/match", json={"query": "refund"}).status_code == 200


def test_a_broken_reranker_folder_does_not_stop_the_service(tmp_path, encoder):
    with _client(tmp_path, encoder, reranker=str(tmp_path / "nowhere")) as client:
        assert client.post("/match", json={"query": "refund"}).status_code == 200
        r = client.post("/match", json={"query": "refund", "rerank": True})
        assert r.status_code == 409 and "could not be loaded" in r.json()["error"]


def test_rerank_k_is_validated():
    from pydantic import ValidationError

    from app.settings import Settings

    with pytest.raises(ValidationError, match="rerank_k"):
        Settings(rerank_k=0)
    with pytest.raises(ValidationError, match="FAQ_RERANK_RUNTIME"):
        Settings(rerank_runtime="gpu")


def test_rerank_runtime_setting_picks_fp32_onnx(tmp_path, encoder, reranker_dir):
    with _client(tmp_path, encoder, reranker=str(reranker_dir), rerank_k=6, rerank_runtime="onnx") as client:
        assert client.app.state.service.stages[0].scorer.runtime.name == "onnx"
        query = "I can't remember my password"
        matches = client.post("/match", json={"query": query, "top_k": 3, "rerank": True}).json()["matches"]
        expected = load_reranker(reranker_dir, runtime="onnx").score(query, [m["question"] for m in matches])
        np.testing.assert_allclose([m["score"] for m in matches], expected, atol=1e-5)  # fp32: exact


def test_rerank_weight_zero_serves_the_first_stage_probability(tmp_path, encoder, reranker_dir):
    """FAQ_RERANK_WEIGHT=0: the pool is the calibrated cosine alone, so the scores are the ann arm's when it
    scores by the same curve (FAQ_SCORING=calibration; stages pool with the first stage's curve)."""
    with _client(tmp_path, encoder, reranker=str(reranker_dir), rerank_k=8, rerank_weight=0.0,
                 scoring="calibration") as client:
        query = "when do you open"
        plain = client.post("/match", json={"query": query, "top_k": 8}).json()
        pooled = client.post("/match", json={"query": query, "top_k": 8, "rerank": True}).json()
        # the same FAQs with the same scores; FAQs far below the threshold can tie within float32 rounding of
        # the pool, where the re-ranked list orders by faq_id, so the order is compared where scores differ
        assert {m["faq_id"] for m in pooled["matches"]} == {m["faq_id"] for m in plain["matches"]}
        plain_score = {m["faq_id"]: m["score"] for m in plain["matches"]}
        np.testing.assert_allclose([m["score"] for m in pooled["matches"]], [plain_score[m["faq_id"]] for m in pooled["matches"]],
                                   atol=1e-5)
        assert [m["faq_id"] for m in pooled["matches"][:3]] == [m["faq_id"] for m in plain["matches"][:3]]
