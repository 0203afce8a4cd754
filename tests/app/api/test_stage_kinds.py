"""`faq serve` with FAQ_RERANKER naming each kind of re-ranking folder: a `faq train reranker` cross-encoder,
a `faq train mmaicm` matcher, a `faq train analogy` model and a `faq train siamese` matcher. The service
must start (KbState asks the pipeline for its stages),
serve `rerank: true` with the folder's stage, and answer 409 when the folder does not load; all four
comma-separated in one FAQ_RERANKER chain in that order.

Real parts: a temporary SQLite store, MiniLM, one Annoy build (carrying the Siamese matcher's phrasing
vectors, as `faq index build` with that folder in FAQ_RERANKER does), and tiny seeded folders written by
each model's own save code (the tiniest configs the model tests use; scores are meaningless, the folder
formats, loading, calibration and pooling are the real ones)."""
from __future__ import annotations

import shutil

import pytest
from fastapi.testclient import TestClient

from app.api.main import create_app
from app.stages import vector_stages
from index.artifacts import BuildRegistry
from app.release import build_current
from tests.helpers.api import make_settings, make_store
from tests.helpers.stages import KINDS

QUERIES = ["I can't remember my password", "when will my parcel arrive"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("stage-kinds")
    return {kind: make(root / kind) for kind, (make, _) in KINDS.items()}


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder, folders):  # noqa: F811
    """One store and one build for every kind: the build carries the Siamese folder's phrasing vectors
    (the other kinds ignore them)."""
    settings = make_settings(tmp_path_factory.mktemp("stage-kinds-data"), rerank_k=6)
    store = make_store(settings)
    stages = vector_stages(settings.model_copy(update={"reranker": str(folders["siamese"])}))
    build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5, stage_vectors=stages)
    return settings, store


def _client(served, encoder, reranker: str) -> TestClient:  # noqa: F811
    settings, store = served
    return TestClient(create_app(settings.model_copy(update={"reranker": reranker}), store=store, encoder=encoder))


@pytest.mark.parametrize("kind", list(KINDS))
def test_rerank_true_runs_the_configured_stage(kind, served, encoder, folders):  # noqa: F811
    with _client(served, encoder, str(folders[kind])) as client:
        service = client.app.state.service
        assert service.stage_problem is None
        assert [type(s) for s in service.stages] == [KINDS[kind][1]]
        changed = False
        for query in QUERIES:
            r = client.post("/match", json={"query": query, "top_k": 5, "rerank": True})
            assert r.status_code == 200, r.text
            body = r.json()
            plain = client.post("/match", json={"query": query, "top_k": 5}).json()
            assert body["arm"] == "ann+rerank" and plain["arm"] == "ann"
            assert body["timings_ms"]["rerank"] > 0 and plain["timings_ms"]["rerank"] == 0
            # the stage's probability decides; the build's table describes the decision model, not the stage
            assert body["decision"] in ("answer", "clarify", "abstain") and body["expected_precision"] is None
            assert (body["answer"] is not None) == (body["decision"] == "answer")
            scores = [m["score"] for m in body["matches"]]
            assert len(scores) == 5 and all(0.0 <= s <= 1.0 for s in scores)
            assert scores == sorted(scores, reverse=True)
            first = {m["faq_id"]: m["score"] for m in plain["matches"]}
            changed |= any(abs(m["score"] - first[m["faq_id"]]) > 1e-4
                           for m in body["matches"] if m["faq_id"] in first)
        assert changed, "the stage's probabilities must move at least one candidate's score"
        batch = client.post("/match/batch", json={"queries": [{"query": q, "rerank": True} for q in QUERIES]})
        assert batch.status_code == 200, batch.text
        assert all(res["arm"] == "ann+rerank" for res in batch.json()["results"])


@pytest.mark.parametrize("kind", ["mmaicm", "siamese"])
def test_a_broken_folder_of_any_kind_is_a_409_not_a_crash(kind, served, encoder, folders, tmp_path):  # noqa: F811
    broken = shutil.copytree(folders[kind], tmp_path / "broken")
    (broken / "model.safetensors").unlink()
    with _client(served, encoder, str(broken)) as client:
        assert client.app.state.service.stages == []
        assert client.post("/match", json={"query": "refund"}).status_code == 200
        r = client.post("/match", json={"query": "refund", "rerank": True})
        assert r.status_code == 409 and "could not be loaded" in r.json()["error"]


CHAIN = ["cross-encoder", "siamese", "analogy", "mmaicm"]  # the last pools (fusion weight 0.5) with the ones before


def test_comma_separated_folders_chain_every_kind_in_order(served, encoder, folders):  # noqa: F811
    """FAQ_RERANKER="a,b,...": one stage per folder in that order, each pooling with the score the one
    before it left; the chain answers otherwise than its last stage alone."""
    chain = ",".join(str(folders[kind]) for kind in CHAIN)
    with _client(served, encoder, str(folders[CHAIN[-1]])) as client:
        alone = [client.post("/match", json={"query": q, "top_k": 5, "rerank": True}).json() for q in QUERIES]
    with _client(served, encoder, chain) as client:
        service = client.app.state.service
        assert service.stage_problem is None
        assert [type(s) for s in service.stages] == [KINDS[kind][1] for kind in CHAIN]
        moved, bodies = False, []
        for query, last in zip(QUERIES, alone):
            r = client.post("/match", json={"query": query, "top_k": 5, "rerank": True})
            assert r.status_code == 200, r.text
            body = r.json()
            bodies.append(body)
            assert body["arm"] == "ann+rerank" and body["timings_ms"]["rerank"] > 0
            scores = [m["score"] for m in body["matches"]]
            assert len(scores) == 5 and all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
            by_id = {m["faq_id"]: m["score"] for m in last["matches"]}
            moved |= any(abs(m["score"] - by_id[m["faq_id"]]) > 1e-4 for m in body["matches"] if m["faq_id"] in by_id)
        assert moved, "the stages before the last one must change what the last one pools with"
        batch = client.post("/match/batch", json={"queries": [{"query": q, "rerank": True} for q in QUERIES]})
        assert batch.status_code == 200, batch.text
        assert [[m["faq_id"] for m in res["matches"]] for res in batch.json()["results"]] == \
            [[m["faq_id"] for m in body["matches"]] for body in bodies]
