"""Which encoder builds and serves: FAQ_ENCODER, else the one recorded in the current build."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.api.main import create_app
from app.settings import Settings
from index.artifacts import BuildRegistry
from app.release import build_current
from models.encoders.load import default_msem_dir, load_encoder
from tests.helpers.api import make_settings, make_store


def test_encoder_spec_precedence(tmp_path, monkeypatch):
    import models.encoders.mpnet

    from app.match.assembly import default_encoder, encoder_spec

    monkeypatch.setattr(models.encoders.mpnet, "available", lambda cache_dir=None: False)
    assert encoder_spec(Settings(data_dir=tmp_path)) == "minilm"  # without the mpnet packages: the fast base
    monkeypatch.setattr(models.encoders.mpnet, "available", lambda cache_dir=None: True)
    assert encoder_spec(Settings(data_dir=tmp_path)) == "mpnet"  # the accurate base is the default
    assert encoder_spec(Settings(data_dir=tmp_path), {"encoder_spec": "/models/x"}) == "/models/x"
    assert encoder_spec(Settings(data_dir=tmp_path, encoder="/models/y"), {"encoder_spec": "/models/x"}) == "/models/y"
    assert default_encoder(Settings(data_dir=tmp_path, encoder="/models/y")) == "mpnet"  # what fine-tuning must beat


def test_mpnet_cache_follows_the_data_dir_unless_set(tmp_path):
    assert Settings(data_dir=tmp_path).mpnet_cache == tmp_path / "models"
    assert Settings(data_dir=tmp_path, model_cache=tmp_path / "m").mpnet_cache == tmp_path / "m"


def test_unknown_or_unshipped_encoder_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="model folder"):
        load_encoder(str(tmp_path / "nothing-here"))
    if not (default_msem_dir() / "config.json").exists():
        with pytest.raises(ValueError, match="no shipped MSEM"):
            load_encoder("msem")


def test_service_serves_with_the_encoder_that_built_the_index(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path, encoder=None)
    store = make_store(settings)
    manifest = build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5, encoder_spec="minilm")
    assert manifest["encoder_spec"] == "minilm"
    with TestClient(create_app(settings, store=store)) as client:  # no encoder given: taken from the manifest
        service = client.app.state.service
        assert service.encoder.id == manifest["encoder_id"]
        body = client.post("/match", json={"query": "I want my money back"}).json()
    assert body["index_version"] == manifest["version"] and body["matches"][0]["faq_id"] == "refund"


def test_service_follows_the_build_runtime_and_refuses_int8_against_fp32(tmp_path, encoder,  # noqa: F811
                                                                         shared_model_cache):
    """A build records how its encoder ran; the service follows it, and an explicit runtime whose vectors
    differ (int8 vs fp32) is refused with the setting that fixes it."""
    from app.match.assembly import encoder_runtime

    settings = make_settings(tmp_path, encoder=None)
    store = make_store(settings)
    manifest = build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5, encoder_spec="minilm")
    assert manifest["encoder_runtime"] == "torch"
    assert encoder_runtime(settings, manifest) == "torch" and encoder_runtime(settings) == "auto"
    assert encoder_runtime(settings, {"version": "old"}) == "torch"  # built before runtimes were recorded
    mismatched = settings.model_copy(update={"encoder_runtime": "onnx-int8",
                                             "model_cache": shared_model_cache})
    with TestClient(create_app(mismatched, store=store)) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        assert "runtime 'torch'" in r.json()["reason"] and "FAQ_ENCODER_RUNTIME=torch" in r.json()["reason"]
    with TestClient(create_app(settings, store=store)) as client:
        body = client.get("/readyz").json()
        assert body["ready"] and body["encoder_runtime"] == "torch"


def test_settings_reject_an_unknown_runtime():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="FAQ_ENCODER_RUNTIME must be"):
        Settings(encoder_runtime="tensorrt")
    assert Settings(encoder_runtime="").encoder_runtime is None  # compose's ${FAQ_ENCODER_RUNTIME:-}


def test_balanced_service_defers_the_build_encoder_only_when_it_runs_the_builds(tmp_path):
    """With a query encoder, queries never use the build's encoder: it is deferred when the service runs the
    build's encoder and runtime (unset, or set to the same, `auto` included), else loaded at start-up."""
    from app.match.assembly import DeferredEncoder, build_encoder_for

    built = {"encoder_spec": "minilm", "encoder_id": "all-MiniLM-L6-v2", "dim": 384, "encoder_runtime": "onnx-int8"}
    for same in ({}, {"encoder": "minilm"}, {"encoder_runtime": "auto", "device": "cpu"},
                 {"encoder_runtime": "onnx-int8"}):
        encoder = build_encoder_for(Settings(data_dir=tmp_path, **same), built, True)
        assert isinstance(encoder, DeferredEncoder) and not encoder.loaded, same
        assert encoder.encode([]).shape == (0, 384) and not encoder.loaded  # nothing to encode loads nothing
    torch_built = {**built, "encoder_runtime": "torch"}
    assert not isinstance(build_encoder_for(Settings(data_dir=tmp_path, encoder_runtime="torch"), torch_built, False),
                          DeferredEncoder)  # no query encoder: the build's encoder answers queries
    other = build_encoder_for(Settings(data_dir=tmp_path, encoder_runtime="torch"), built, True)
    assert not isinstance(other, DeferredEncoder)  # another runtime than the build's: loaded (and refused) now
    wrong = DeferredEncoder(lambda: other, id="all-mpnet-base-v2", dim=768, runtime="onnx-int8")
    with pytest.raises(RuntimeError, match="FAQ_ENCODER"):
        wrong.encode(["a KB edit"])
