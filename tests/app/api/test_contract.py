"""The /match contract with real components: a temporary SQLite store, MiniLM and a real Annoy build.

Covers the response fields, grouping by FAQ, calibrated scores (checked against the manifest's
calibration recomputed from the encoder), threshold behaviour, batch matching, the query log and
feedback, health/readiness, OpenAPI docs and the Prometheus exposition.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.api.main import create_app
from app.match.assembly import build_pipeline
from app.match import Pipeline
from index.candidates import group_hits, retrieve_depth
from app.store import KbRecord
from index.artifacts import BuildRegistry
from index.retriever import Retriever
from tests.helpers.api import KB, build, kb_records, make_settings, make_store


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, encoder):
    """One served app over the built KB, shared by the read-only tests of this module. It scores by the
    build's cosine curve, which these tests recompute; the decision model is tested in test_decision.py."""
    settings = make_settings(tmp_path_factory.mktemp("contract"), scoring="calibration")
    store = make_store(settings)
    manifest = build(store, encoder, settings)
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        yield client, store, manifest, settings


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def test_match_fields_grouping_and_calibrated_scores(service, encoder):
    client, _, manifest, settings = service
    r = client.post("/match", json={"query": "I forgot my password, how can I reset it?", "top_k": 8})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"request_id", "query", "arm", "index_version", "answer", "matches", "timings_ms", "cached",
                         "decision", "options", "threshold", "expected_precision", "context", "chitchat", "language", "reason",
                         "deployment"}
    assert body["query"] == "I forgot my password, how can I reset it?" and body["context"] == {"applied": "none", "note": None}
    assert body["language"] == "en" and body["reason"] is None
    assert body["chitchat"] is None
    assert body["arm"] == "ann" and body["index_version"] == manifest["version"]
    assert set(body["timings_ms"]) == {"encode", "retrieve", "rerank", "decide", "total"}
    assert body["timings_ms"]["total"] >= body["timings_ms"]["encode"] > 0

    matches = body["matches"]
    faq_ids = [m["faq_id"] for m in matches]
    assert len(faq_ids) == len(set(faq_ids)) == 8, "one entry per FAQ"
    assert faq_ids[0] == "reset_password"
    assert all(set(m) == {"faq_id", "question", "answer", "score", "metadata", "tags", "source", "follow_ups"}
               for m in matches)
    assert (top_fields := {k: matches[0][k] for k in ("metadata", "tags", "source", "follow_ups")}) == {
        "metadata": {}, "tags": [], "source": None, "follow_ups": []}, top_fields
    scores = [m["score"] for m in matches]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    top = matches[0]
    assert top["question"] in KB["reset_password"][1] and top["answer"] == KB["reset_password"][0]

    # Each score is sigmoid(a*s+b): this KB has real answers, so s = (1-w)*cos of the FAQ's best phrasing
    # + w*cos of its answer (FAQ_ANSWER_WEIGHT w = 0.6; FAQ_POOL_VARIANTS unset = 1 with answers), with the
    # build's curve for that weight; the question shown is its best phrasing.
    assert settings.pool_variants is None and settings.answer_weight == 0.6
    cal = manifest["calibration"]["answer_weights"]["0.60"]["1"]
    qvec = encoder.encode([body["query"]])[0]
    for m in matches[:3]:  # the top FAQs' best phrasings are all within the retrieval depth
        variants = KB[m["faq_id"]][1]
        cosines = encoder.encode(variants) @ qvec
        assert m["question"] == variants[int(np.argmax(cosines))]
        answer_cos = float(encoder.encode([KB[m["faq_id"]][0]])[0] @ qvec)
        pooled = 0.4 * float(cosines.max()) + 0.6 * answer_cos
        assert m["score"] == pytest.approx(sigmoid(cal["a"] * pooled + cal["b"]), abs=2e-3)


def test_defaults_and_top_k(service):
    client, _, _, settings = service
    body = client.post("/match", json={"query": "when does my parcel arrive"}).json()
    assert len(body["matches"]) == settings.default_top_k == 5
    body = client.post("/match", json={"query": "when does my parcel arrive", "top_k": 1}).json()
    assert [m["faq_id"] for m in body["matches"]] == ["shipping_time"]
    body = client.post("/match", json={"query": "when does my parcel arrive", "top_k": 50}).json()
    assert len(body["matches"]) == len(KB), "at most one entry per FAQ even when top_k exceeds the KB"


def test_threshold_decides_the_answer(service):
    client, _, _, settings = service
    query = "can I pay by PayPal"
    best = client.post("/match", json={"query": query, "threshold": 0.0}).json()
    assert best["answer"] == {k: v for k, v in best["matches"][0].items() if k != "question"}
    score = best["matches"][0]["score"]
    assert 0.0 < score < 1.0
    just_above = client.post("/match", json={"query": query, "threshold": min(1.0, score + 1e-6)}).json()
    assert just_above["answer"] is None and just_above["matches"], "matches are still returned without an answer"
    at = client.post("/match", json={"query": query, "threshold": score}).json()
    assert at["answer"] is not None and at["answer"]["faq_id"] == "payment_methods"
    # default threshold (0.5): an unrelated query gets no answer
    unrelated = client.post("/match", json={"query": "quantum chromodynamics of gluon plasma"}).json()
    assert unrelated["matches"][0]["score"] < settings.default_threshold
    assert unrelated["answer"] is None


def test_batch_encodes_all_and_matches_single_results(service):
    client, _, _, _ = service
    queries = ["I want my money back", "what time do you open", "how to close my account"]
    r = client.post("/match/batch", json={"queries": [{"query": q, "top_k": 3} for q in queries]})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [res["query"] for res in results] == queries
    assert [res["matches"][0]["faq_id"] for res in results] == ["refund", "opening_hours", "delete_account"]
    assert len({res["request_id"] for res in results}) == 3, "each query is its own logged request"
    for q, res in zip(queries, results):
        single = client.post("/match", json={"query": q, "top_k": 3}).json()
        assert [m["faq_id"] for m in single["matches"]] == [m["faq_id"] for m in res["matches"]]
        for a, b in zip(single["matches"], res["matches"]):
            assert a["score"] == pytest.approx(b["score"], abs=1e-4)
    # per-item options are honoured inside one batch
    mixed = client.post("/match/batch", json={"queries": [{"query": queries[0], "top_k": 1},
                                                          {"query": queries[1], "top_k": 4, "threshold": 1.0}]}).json()
    assert len(mixed["results"][0]["matches"]) == 1 and len(mixed["results"][1]["matches"]) == 4
    assert mixed["results"][1]["answer"] is None


def test_the_built_pipeline_is_what_the_api_serves(service, encoder):
    """Evaluations get their pipeline from `build_pipeline` as the service does: it ranks exactly like /match."""
    client, _, manifest, settings = service
    retriever = client.app.state.service.retriever
    matcher = build_pipeline(settings, encoder, lambda: retriever)
    assert matcher.pool_variants == settings.pool_variants == client.app.state.service.pipeline.pool_variants
    assert matcher.served_pool(retriever) == 1 and matcher.served_answer_weight(retriever) == 0.6
    result = matcher.match(["how long is delivery"], top_k=3, threshold=0.5)[0]
    api = client.post("/match", json={"query": "how long is delivery", "top_k": 3}).json()
    assert [m.faq_id for m in result.matches] == [m["faq_id"] for m in api["matches"]]
    assert result.index_version == manifest["version"]
    assert retrieve_depth(3) == 20 and retrieve_depth(10) == 40
    # a fixed retriever works too (no provider callable)
    loaded = Retriever.load(BuildRegistry(settings.index_dir).current_dir())
    assert Pipeline(encoder, loaded.with_kb(client.app.state.service.store.snapshot(), encoder)).match(
        ["how long is delivery"], top_k=3)[0].matches[0].faq_id == result.matches[0].faq_id


def test_group_hits_keeps_best_variant_and_skips_deleted_faqs():
    from index.calibration import Calibration
    from index.retriever import Hit

    hits = [Hit(1, "a", "a1", 0.9), Hit(2, "a", "a2", 0.8), Hit(3, "gone", "g", 0.85), Hit(4, "b", "b1", 0.7)]
    out = group_hits(hits, {"a": ("A", []), "b": ("B", [])}, Calibration(10.0, -5.0), top_k=5)
    assert [(m.faq_id, m.question) for m in out] == [("a", "a1"), ("b", "b1")]
    assert out[0].score == pytest.approx(sigmoid(10 * 0.9 - 5))


def test_group_hits_pools_a_faqs_best_phrasings():
    from index.calibration import Calibration
    from index.retriever import Hit

    answers = {"a": ("A", []), "b": ("B", []), "c": ("C", [])}
    # "a" has one stray close phrasing, "b" several close ones: pooled, "b" wins
    hits = [Hit(1, "a", "a1", 0.90), Hit(2, "b", "b1", 0.88), Hit(3, "b", "b2", 0.87), Hit(4, "b", "b3", 0.86),
            Hit(5, "a", "a2", 0.60), Hit(6, "c", "c1", 0.50)]
    cal = Calibration(10.0, -5.0)
    assert [m.faq_id for m in group_hits(hits, answers, cal, top_k=3)] == ["a", "b", "c"]
    out = group_hits(hits, answers, cal, top_k=3, pool=3, counts={"a": 3, "b": 3, "c": 1})
    assert [m.faq_id for m in out] == ["b", "a", "c"]
    assert out[0].cosine == pytest.approx(0.87) and out[0].question == "b1"
    assert out[0].score == pytest.approx(sigmoid(10 * 0.87 - 5))
    # a's third phrasing was not retrieved: it counts at the list's lowest cosine (0.50), an upper bound
    assert out[1].cosine == pytest.approx((0.90 + 0.60 + 0.50) / 3)
    # a FAQ with fewer phrasings than the pool averages what it has (c: one phrasing)
    assert out[2].cosine == pytest.approx(0.50)
    # without counts, the hits seen are all there is
    assert group_hits(hits, answers, cal, top_k=3, pool=3)[1].cosine == pytest.approx((0.90 + 0.60) / 2)


def test_retriever_variant_counts_follow_the_kb(service, encoder):
    client, store, _, settings = service
    loaded = Retriever.load(BuildRegistry(settings.index_dir).current_dir())
    snapshot = store.snapshot()
    expected: dict[str, int] = {}
    for v in snapshot.variants:
        expected[v.faq_id] = expected.get(v.faq_id, 0) + 1
    assert loaded.with_kb(snapshot, encoder).variant_counts == expected
    matcher = Pipeline(encoder, loaded.with_kb(snapshot, encoder), pool_variants=3)
    result = matcher.match(["how long is delivery"], top_k=3)[0]
    assert result.matches and all(0.0 <= m.score <= 1.0 for m in result.matches)
    with pytest.raises(ValueError, match="pool_variants"):
        Pipeline(encoder, loaded, pool_variants=0)


def test_query_log_and_feedback(service):
    client, store, _, _ = service
    from app.db.models import QueryLog

    body = client.post("/match", json={"query": "refund policy", "session_id": "s-1"}).json()
    r = client.post("/feedback", json={"request_id": body["request_id"], "correct": True, "faq_id": "refund"})
    assert r.status_code == 200 and r.json() == {"request_id": body["request_id"], "recorded": True}
    with store.engine.connect() as conn:
        row = conn.execute(select(QueryLog).where(QueryLog.request_id == body["request_id"])).one()
    assert row.query == "refund policy" and row.session_id == "s-1" and row.arm == "ann"
    assert row.faq_id == body["answer"]["faq_id"] and row.feedback_correct is True and row.feedback_faq_id == "refund"
    assert row.index_version == body["index_version"] and row.latency_ms > 0

    r = client.post("/feedback", json={"request_id": "no-such-request", "correct": False})
    assert r.status_code == 404 and "no-such-request" in r.json()["error"]


def test_query_log_disabled(tmp_path, encoder):
    settings = make_settings(tmp_path, query_log=False)
    store = make_store(settings)
    build(store, encoder, settings)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        body = client.post("/match", json={"query": "refund policy"}).json()
        r = client.post("/feedback", json={"request_id": body["request_id"], "correct": True})
        assert r.status_code == 409 and "FAQ_QUERY_LOG" in r.json()["error"]
    from app.db.models import QueryLog

    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(QueryLog)).scalar() == 0


def test_health_readiness_docs(service):
    client, _, manifest, _ = service
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert ready.json()["index_version"] == manifest["version"]
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/match", "/match/batch", "/feedback", "/healthz", "/readyz", "/metrics"} <= set(paths)
    # every route again under /kbs/{kb}, the admin API included (KB tokens reach it without FAQ_ADMIN_TOKEN)
    assert {"/kbs/{kb}/match", "/kbs/{kb}/match/batch", "/kbs/{kb}/feedback", "/kbs/{kb}/admin/faqs",
            "/admin/faqs"} <= set(paths)


def test_metrics_exposition(service):
    client, _, manifest, _ = service
    client.post("/match", json={"query": "opening hours"})
    client.post("/match", json={"query": "xylophone tectonics", "threshold": 0.99})
    client.post("/match", json={"query": ""})
    text = client.get("/metrics").text
    assert client.get("/metrics").headers["content-type"].startswith("text/plain")
    assert 'faq_http_requests_total{method="POST",route="/match",status="200"}' in text
    assert 'faq_http_requests_total{method="POST",route="/match",status="422"}' in text
    for stage in ("encode", "retrieve", "rerank", "total"):
        assert f'faq_match_stage_seconds_bucket{{le="0.01",stage="{stage}"}}' in text
    assert "faq_match_no_answer_total" in text and "faq_match_no_answer_rate" in text
    assert f'version="{manifest["version"]}"' in text and "faq_index_info" in text
    assert "faq_index_delta_size 0.0" in text and "faq_index_loaded 1.0" in text
    assert "faq_encode_batch_size_bucket" in text
    no_answer = _metric(text, "faq_match_no_answer_total")
    assert no_answer >= 1 and _metric(text, "faq_match_queries_total") > no_answer


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in exposition")


def test_apps_have_private_registries(tmp_path, encoder):
    """Two apps in one process must not share (or collide on) metrics."""
    a = create_app(make_settings(tmp_path / "a"), store=None, encoder=encoder)
    b = create_app(make_settings(tmp_path / "b"), store=None, encoder=encoder)
    assert a.state.service.metrics.registry is not b.state.service.metrics.registry


def test_top_k_counts_faqs_even_when_one_faq_has_many_phrasings(tmp_path, encoder):
    # 40 phrasings of one FAQ fill the first retrieval depth (max(4*top_k, 20)) on their own
    settings = make_settings(tmp_path)
    crowd = [KbRecord("order_refund", f"how do I get a refund for order number {i}", "Order refunds take 5 days.", None)
             for i in range(40)]
    store = make_store(settings, kb_records() + crowd)
    build(store, encoder, settings)
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        body = client.post("/match", json={"query": "refund for my order", "top_k": 5}).json()
    ids = [m["faq_id"] for m in body["matches"]]
    assert ids[0] == "order_refund" and len(ids) == 5 and len(set(ids)) == 5
