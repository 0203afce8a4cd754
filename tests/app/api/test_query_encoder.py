"""Balanced mode through the service: `faq index build` records the query encoder (FAQ_QUERY_ENCODER), the
service encodes queries with it and the FAQ side with the build's encoder, and a query encoder fitted to
another encoder's space is refused by the build and by the service (/readyz names the setting). The
teacher here is the shipped MSEM model (cheap on a CPU); in production it is mpnet."""
from __future__ import annotations

import json

import pytest

from cli.main import main as faq

DEMO = "app/demo/faq.jsonl"


@pytest.fixture(scope="module")
def query_encoder_dir(tmp_path_factory, query_encoder_work):
    """A query encoder fitted (ridge) into the shipped MSEM model's space on the demo's phrasings."""
    from training.query_encoder import QueryEncoderConfig, train_query_encoder

    out = tmp_path_factory.mktemp("qe") / "msem-student"
    train_query_encoder(out, data_dir=None, kb_files=[DEMO], work=query_encoder_work,
                        config=QueryEncoderConfig(teacher="msem", base="minilm"), runtime="torch", device="cpu")
    return out


def _env(monkeypatch, **values):
    from app.settings import get_settings

    for name, value in values.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()


def test_build_records_it_and_the_service_queries_through_it(faq_env, monkeypatch, query_encoder_dir, capsys):
    from fastapi.testclient import TestClient

    from app.api.main import create_app

    _env(monkeypatch, FAQ_ENCODER="msem", FAQ_ENCODER_RUNTIME="torch", FAQ_QUERY_ENCODER=str(query_encoder_dir),
         FAQ_KB_POLL_SECONDS="0")
    assert faq(["kb", "import", DEMO]) == 0
    assert faq(["index", "build", "--no-progress"]) == 0
    assert "query encoder query:msem-student" in capsys.readouterr().out
    monkeypatch.delenv("FAQ_QUERY_ENCODER")  # the service finds it in the build's manifest
    _env(monkeypatch, FAQ_ADMIN_TOKEN="t0ken-for-edits-of-32-characters-x")
    auth = {"Authorization": "Bearer t0ken-for-edits-of-32-characters-x"}
    with TestClient(create_app()) as client:
        ready = client.get("/readyz").json()
        assert ready["ready"] and ready["query_encoder_id"].startswith("query:msem-student:")
        assert ready["encoder_id"].startswith("msem:")
        service = client.app.state.service
        assert service.pipeline.encoder.id == ready["query_encoder_id"]  # queries: the query encoder
        r = client.post("/match", json={"query": "I forgot my password, how do I get back in?"})
        assert r.status_code == 200 and r.json()["matches"][0]["faq_id"] == "login-forgot-password"
        # the FAQ side's encoder is only loaded once a KB edit has a text for it
        assert service.encoder.inner.loaded is False
        new = {"faq_id": "gift-cards", "answer": "Gift cards never expire and work on every plan.",
               "questions": ["Do gift cards expire?"]}
        assert client.post("/admin/faqs", json=new, headers=auth).status_code == 201
        assert service.encoder.inner.loaded is True
        r = client.post("/match", json={"query": "will my gift card run out?"})
        assert r.status_code == 200 and r.json()["matches"][0]["faq_id"] == "gift-cards"
    manifest = json.loads(next((faq_env.index_dir).glob("*/manifest.json")).read_text())
    assert manifest["query_encoder"]["teacher"] == manifest["encoder_id"]
    # the decision block's replayed queries went through the query side: its cosines, not the FAQ side's
    assert manifest["decision"]["references"]


def test_index_build_query_encoder_flag_records_it_too(faq_env, monkeypatch, query_encoder_dir, capsys):
    from index.artifacts import BuildRegistry

    _env(monkeypatch, FAQ_ENCODER="msem", FAQ_ENCODER_RUNTIME="torch", FAQ_KB_POLL_SECONDS="0")
    assert faq(["kb", "import", DEMO]) == 0
    assert faq(["index", "build", "--no-progress", "--query-encoder", str(query_encoder_dir)]) == 0
    registry = BuildRegistry(faq_env.index_dir)
    manifest = registry.read_manifest(registry.current())
    assert manifest["query_encoder"]["spec"] == str(query_encoder_dir.resolve())
    assert faq(["index", "build", "--no-progress", "--encoder", "minilm", "--query-encoder",
                str(query_encoder_dir)]) == 1  # fitted to MSEM: refused, naming the flag
    assert "--query-encoder" in capsys.readouterr().err
    assert registry.current() == manifest["version"]  # the served build is untouched


def test_a_query_encoder_of_another_space_is_refused(faq_env, monkeypatch, query_encoder_dir, capsys):
    from fastapi.testclient import TestClient

    from app.api.main import create_app

    _env(monkeypatch, FAQ_ENCODER="minilm", FAQ_ENCODER_RUNTIME="torch", FAQ_KB_POLL_SECONDS="0")
    assert faq(["kb", "import", DEMO]) == 0
    _env(monkeypatch, FAQ_QUERY_ENCODER=str(query_encoder_dir))
    assert faq(["index", "build", "--no-progress"]) == 1  # fitted to MSEM, the build would be MiniLM's
    assert "FAQ_QUERY_ENCODER" in capsys.readouterr().err
    monkeypatch.delenv("FAQ_QUERY_ENCODER")
    _env(monkeypatch)
    assert faq(["index", "build", "--no-progress"]) == 0  # a MiniLM build without one
    _env(monkeypatch, FAQ_QUERY_ENCODER=str(query_encoder_dir))
    with TestClient(create_app()) as client:
        r = client.get("/readyz")
        assert r.status_code == 503 and "FAQ_QUERY_ENCODER" in r.json()["reason"]
        assert client.post("/match", json={"query": "reset password"}).status_code == 503
