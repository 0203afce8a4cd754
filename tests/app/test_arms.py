"""The four arms in the service, with real components (SQLite store, MiniLM, Annoy, tantivy, and the
noida-db Elasticsearch-API emulator over loopback HTTP).

- `arm` per request: ann and lexical answer with calibrated scores; lexical = BM25 candidates scored
  with the same vectors and calibration, so a query both arms recall gets the same score;
- the index build writes the lexical index under the same version (tantivy in the folder, ES index
  `<prefix>-<version>`);
- FAQ_AB_SPLIT assigns arms sticky per session_id and every /match is logged with its arm;
- `+rerank` arms without a re-ranker answer 409; Elasticsearch going down makes the lexical arms
  503 and /readyz report the degraded part while the ann arm keeps answering 200.
"""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.api.main import create_app
from app.match.arms import ARMS, parse_split
from index.candidates import lexical_hits
from app.db.models import QueryLog
from app.match import Pipeline, MatchQuery
from index.artifacts import BuildRegistry
from app.release import build_current
from index.elasticsearch.lexical import ElasticsearchLexicalIndex, es_index_name
from index.lexical import TANTIVY_DIR, TantivyLexicalIndex
from index.retriever import Retriever
from tests.helpers.api import KB, make_settings, make_store
from tests.helpers.es import start_es_emulator, stop_es_emulator


def build_with(store, encoder, settings, es_url=None) -> dict:  # noqa: F811
    return build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5, es_url=es_url,
                       es_index_prefix=settings.es_index_prefix)


@pytest.fixture(scope="module")
def tantivy_service(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("arms"))
    store = make_store(settings)
    manifest = build_with(store, encoder, settings)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        yield client, store, manifest, settings


def test_build_writes_the_lexical_index_under_the_same_version(tantivy_service):
    _, _, manifest, settings = tantivy_service
    build_dir = BuildRegistry(settings.index_dir).path(manifest["version"])
    n_variants = sum(len(qs) for _, qs in KB.values())
    assert manifest["lexical"]["tantivy"] == {**manifest["lexical"]["tantivy"], "dir": TANTIVY_DIR, "n_docs": n_variants}
    assert "elasticsearch" not in manifest["lexical"]  # no FAQ_ES_URL
    assert TantivyLexicalIndex(build_dir / TANTIVY_DIR).count() == n_variants


def test_ann_and_lexical_arms_per_request(tantivy_service):
    client, _, _, _ = tantivy_service
    query = "How do I reset my password?"
    ann = client.post("/match", json={"query": query, "arm": "ann", "top_k": 3}).json()
    lexical = client.post("/match", json={"query": query, "arm": "lexical", "top_k": 3}).json()
    assert ann["arm"] == "ann" and lexical["arm"] == "lexical"
    assert lexical["matches"][0]["faq_id"] == ann["matches"][0]["faq_id"] == "reset_password"
    # same variant, same stored vector, same calibration -> the same calibrated score
    assert lexical["matches"][0]["score"] == pytest.approx(ann["matches"][0]["score"], abs=1e-5)
    assert lexical["answer"]["faq_id"] == "reset_password"
    assert lexical["index_version"] == ann["index_version"]
    # the lexical arm only sees what BM25 recalls: no shared word, no candidates, no answer
    none = client.post("/match", json={"query": "xylophone gluon plasma", "arm": "lexical"}).json()
    assert none["matches"] == [] and none["answer"] is None
    # while the ann arm always ranks every FAQ
    assert len(client.post("/match", json={"query": "xylophone gluon plasma"}).json()["matches"]) == 5


def test_lexical_scores_are_calibrated_cosines_of_bm25_candidates(tantivy_service, encoder):  # noqa: F811
    client, store, manifest, settings = tantivy_service
    retriever = client.app.state.service.retriever
    lexical = client.app.state.service.lexical_for(retriever)
    query = "can I pay with a credit card"
    vec = encoder.encode([query])
    [hits] = lexical_hits(lexical, retriever, [query], vec, k=30)
    [bm25] = lexical.search([query], k=30)
    assert {h.variant_id for h in hits} == {h.variant_id for h in bm25}
    # cosine = the query vector . the variant's stored vector (= what ANN computes for that variant)
    ann_hits = {h.variant_id: h.cosine for h in retriever.search(vec, 24)[0]}
    for h in hits:
        assert h.cosine == pytest.approx(ann_hits[h.variant_id], abs=1e-5)
    api = client.post("/match", json={"query": query, "arm": "lexical", "top_k": 10}).json()
    assert {m["faq_id"] for m in api["matches"]} == {h.faq_id for h in hits}


def test_rerank_arms_without_a_reranker_are_409(tantivy_service):
    client, _, _, _ = tantivy_service
    if getattr(client.app.state.service, "reranker", None) is not None:
        pytest.skip("a re-ranker is installed in this environment")
    for body in ({"query": "refund", "arm": "ann+rerank"}, {"query": "refund", "arm": "lexical+rerank"},
                 {"query": "refund", "arm": "lexical", "rerank": True}):
        r = client.post("/match", json=body)
        assert r.status_code == 409 and "no re-ranker installed" in r.json()["error"], body


def test_batch_mixes_arms(tantivy_service):
    client, _, _, _ = tantivy_service
    r = client.post("/match/batch", json={"queries": [
        {"query": "I want my money back", "arm": "lexical"}, {"query": "I want my money back", "arm": "ann"}]})
    assert r.status_code == 200
    a, b = r.json()["results"]
    assert (a["arm"], b["arm"]) == ("lexical", "ann") and a["matches"][0]["faq_id"] == b["matches"][0]["faq_id"] == "refund"


def test_ab_split_is_sticky_per_session_and_logged(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path, ab_split="ann:50,lexical:50")
    store = make_store(settings)
    build_with(store, encoder, settings)
    split = parse_split(settings.ab_split)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        seen: dict[str, str] = {}
        for i in range(12):
            session = f"user-{i}"
            arms = {client.post("/match", json={"query": q, "session_id": session}).json()["arm"]
                    for q in ("refund please", "opening hours", "delete my account")}
            assert len(arms) == 1, f"session {session} switched arms: {arms}"
            seen[session] = arms.pop()
            assert seen[session] == split.assign(session)  # the documented hash, not process state
        assert set(seen.values()) == {"ann", "lexical"}
        # an explicit arm wins over the split
        assert client.post("/match", json={"query": "refund", "session_id": "user-0", "arm": "ann"}).json()["arm"] == "ann"
        client.app.state.service.query_log.flush()
        with store.engine.connect() as conn:
            rows = conn.execute(select(QueryLog.session_id, QueryLog.arm)
                                .where(QueryLog.session_id.like("user-%")).order_by(QueryLog.id)).all()
    assert len(rows) == 37
    assert all(arm == seen[session] for session, arm in rows[:36])


def test_split_assignment_follows_the_weights():
    split = parse_split("ann:90,lexical:10")
    arms = [split.assign(f"session-{i}") for i in range(4000)]
    assert 0.07 < arms.count("lexical") / len(arms) < 0.13
    assert parse_split("ann:1,lexical:0").assign("x") == "ann"
    for bad, message in [("ann:90,bm25:10", "unknown arm 'bm25'"), ("ann", "needs a weight"), ("ann:-1", "needs a weight"),
                         ("ann:1,ann:2", "listed twice"), ("ann:0", "no arm with a weight")]:
        with pytest.raises(ValueError, match=message):
            parse_split(bad)
    assert set(ARMS) == {"ann", "ann+rerank", "lexical", "lexical+rerank"}


def test_elasticsearch_engine_and_outage(tmp_path, encoder):  # noqa: F811
    """Serve the lexical arm from Elasticsearch (the emulator), then stop it: lexical 503, /readyz degraded,
    ann still 200."""
    proc, es_url = start_es_emulator(tmp_path)
    try:
        settings = make_settings(tmp_path / "svc", es_url=es_url, es_timeout_s=2.0)
        store = make_store(settings)
        manifest = build_with(store, encoder, settings, es_url=es_url)
        name = es_index_name(settings.es_index_prefix, manifest["version"])
        n_variants = sum(len(qs) for _, qs in KB.values())
        assert manifest["lexical"]["elasticsearch"]["index"] == name == f"faq-{manifest['version']}".lower()
        assert ElasticsearchLexicalIndex(es_url, name).count() == n_variants
        with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
            assert client.app.state.service.lexical_for(client.app.state.service.retriever).engine == "elasticsearch"
            ok = client.post("/match", json={"query": "How long does shipping take?", "arm": "lexical"})
            assert ok.status_code == 200 and ok.json()["answer"]["faq_id"] == "shipping_time"
            assert client.get("/readyz").json()["degraded"] is None

            stop_es_emulator(proc)
            # a repeat is answered from the query cache (same build, same KB: the same BM25 answer) ...
            again = client.post("/match", json={"query": "How long does shipping take?", "arm": "lexical"})
            assert again.status_code == 200 and again.json()["cached"]
            # ... a new query needs Elasticsearch
            down = client.post("/match", json={"query": "When will my parcel arrive?", "arm": "lexical"})
            assert down.status_code == 503
            error = down.json()["error"]
            assert "lexical arms are unavailable" in error and "unreachable" in error and '"arm": "ann"' in error
            client.app.state.service._lexical_health = None  # /readyz caches the check for a few seconds
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["ready"] is True
            assert "unreachable" in ready.json()["degraded"]["lexical"]
            ann = client.post("/match", json={"query": "How long does shipping take?", "arm": "ann"})
            assert ann.status_code == 200 and ann.json()["answer"]["faq_id"] == "shipping_time"
    finally:
        stop_es_emulator(proc)


def test_matcher_offline_uses_the_same_arms(tantivy_service, encoder):  # noqa: F811
    """`faq eval ab` drives Pipeline directly: per-query arms in one call rank like the API."""
    client, store, manifest, settings = tantivy_service
    build_dir = BuildRegistry(settings.index_dir).path(manifest["version"])
    retriever = Retriever.load(build_dir).with_kb(store.snapshot(), encoder)
    lexical = TantivyLexicalIndex(build_dir / TANTIVY_DIR)
    matcher = Pipeline(encoder, retriever, lexical=lambda r: lexical)
    results = matcher.match_many([MatchQuery("refund policy", 3, 0.5, "lexical"), MatchQuery("refund policy", 3, 0.5, "ann")])
    api = client.post("/match", json={"query": "refund policy", "arm": "lexical", "top_k": 3}).json()
    assert [m.faq_id for m in results[0].matches] == [m["faq_id"] for m in api["matches"]]
    assert results[0].matches[0].faq_id == results[1].matches[0].faq_id == "refund"


@pytest.fixture(scope="module")
def tiny_reranker_dir(tmp_path_factory):
    """A tiny real cross-encoder folder (random weights: scores are meaningless, the code path is real)."""
    pytest.importorskip("models.matchers.cross_encoder")
    helpers = pytest.importorskip("tests.helpers.reranker")
    return helpers.make_tiny_reranker(tmp_path_factory.mktemp("reranker") / "tiny", onnx=False)


def test_rerank_arms_with_a_reranker(tmp_path, encoder, tiny_reranker_dir):  # noqa: F811
    from models.matchers.cross_encoder import load_reranker

    settings = make_settings(tmp_path, reranker=str(tiny_reranker_dir), rerank_k=6)
    store = make_store(settings)
    build_with(store, encoder, settings)
    reranker = load_reranker(tiny_reranker_dir)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        service = client.app.state.service
        query = "how can I get my money back"
        for body, arm in (({"arm": "ann+rerank"}, "ann+rerank"), ({"arm": "lexical+rerank"}, "lexical+rerank"),
                          ({"arm": "lexical", "rerank": True}, "lexical+rerank"), ({"rerank": True}, "ann+rerank")):
            r = client.post("/match", json={"query": query, "top_k": 3, "threshold": 0.0, **body})
            assert r.status_code == 200, r.text
            out = r.json()
            # the last two repeat the first two (the same arms): the query cache answers them
            assert out["arm"] == arm and (out["timings_ms"]["rerank"] > 0) != out["cached"]
            # the scores are the cross-encoder's probabilities of (query, the FAQ's best phrasing), best first
            expected = reranker.score(query, [m["question"] for m in out["matches"]])
            assert [m["score"] for m in out["matches"]] == pytest.approx(expected.tolist(), abs=1e-5)
            assert [m["score"] for m in out["matches"]] == sorted((m["score"] for m in out["matches"]), reverse=True)
            assert out["answer"]["faq_id"] == out["matches"][0]["faq_id"]
        # lexical+rerank re-scores BM25 candidates only
        [bm25] = service.lexical_for(service.retriever).search([query], k=30)
        lexical_rr = client.post("/match", json={"query": query, "arm": "lexical+rerank", "top_k": 10}).json()
        assert {m["faq_id"] for m in lexical_rr["matches"]} <= {h.faq_id for h in bm25}
        # the re-ranker sees max(rerank_k, top_k) candidates: 6 here
        assert len(client.post("/match", json={"query": query, "arm": "ann+rerank", "top_k": 8}).json()["matches"]) == 8
        assert len(client.post("/match", json={"query": query, "arm": "ann+rerank", "top_k": 2}).json()["matches"]) == 2


def test_build_survives_an_unreachable_elasticsearch(tmp_path, encoder):  # noqa: F811
    """The ANN index is the product: an Elasticsearch outage during `faq index build` is recorded in the
    manifest (and served as a 503 of the lexical arms), not a failed build."""
    settings = make_settings(tmp_path, es_url="http://127.0.0.1:9", es_timeout_s=1.0)
    store = make_store(settings)
    manifest = build_with(store, encoder, settings, es_url=settings.es_url)
    es = manifest["lexical"]["elasticsearch"]
    assert "unreachable" in es["error"] and es["index"] == f"faq-{manifest['version']}".lower()
    assert manifest["lexical"]["tantivy"]["n_docs"] == sum(len(qs) for _, qs in KB.values())
    assert BuildRegistry(settings.index_dir).current() == manifest["version"]
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        assert client.post("/match", json={"query": "refund", "arm": "lexical"}).status_code == 503
        assert client.post("/match", json={"query": "refund", "arm": "ann"}).status_code == 200
    # the embedded engine of the same build still works when chosen explicitly
    tantivy_settings = make_settings(tmp_path, es_url="http://127.0.0.1:9", lexical_engine="tantivy")
    with TestClient(create_app(tantivy_settings, store=store, encoder=encoder)) as client:
        assert client.post("/match", json={"query": "refund", "arm": "lexical"}).json()["matches"][0]["faq_id"] == "refund"
