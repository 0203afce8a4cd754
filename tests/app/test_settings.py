"""app/settings.py: every FAQ_* value is parsed and checked at start-up, naming the variable."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.match.arms import arm_split, parse_split
from app.settings import ARMS, MIN_ADMIN_TOKEN_CHARS, Settings, split_weights

REPO = Path(__file__).resolve().parents[2]


def test_defaults_and_paths(tmp_path):
    s = Settings(data_dir=tmp_path)
    assert s.db_url == f"sqlite:///{(tmp_path / 'faq.db').as_posix()}" and s.index_dir == tmp_path / "indexes"
    assert s.pool_variants is None and s.answer_weight == 0.6 and s.default_arm == "ann" and s.ab_split is None and arm_split(s) is None


@pytest.mark.parametrize("field, value, message", [
    ("rerank_runtime", "tensorrt", "FAQ_RERANK_RUNTIME"),
    ("lexical_engine", "solr", "FAQ_LEXICAL_ENGINE"),
    ("default_arm", "bm25", "FAQ_DEFAULT_ARM"),
    ("ab_split", "ann:90,bm25:10", "unknown arm 'bm25'"),
    ("ab_split", "ann:x", "needs a weight"),
    ("ab_split", "ann:0", "no arm with a weight > 0"),
    ("pool_variants", 6, "less than or equal to 5"),
    ("answer_weight", 0.95, "less than or equal to 0.9"),
    ("answer_weight", -0.1, "greater than or equal to 0"),
    ("rerank_weight", 1.5, "less than or equal to 1"),
])
def test_bad_values_are_refused_with_the_variable_named(tmp_path, field, value, message):
    with pytest.raises(ValidationError, match=message):
        Settings(data_dir=tmp_path, **{field: value})


@pytest.mark.parametrize("token", ["x", "s3cret", "a" * (MIN_ADMIN_TOKEN_CHARS - 1)])
def test_a_short_admin_token_is_refused(tmp_path, token):
    with pytest.raises(ValidationError, match=f"FAQ_ADMIN_TOKEN must be at least 32 characters, got {len(token)}"):
        Settings(data_dir=tmp_path, admin_token=token)


def test_a_long_admin_token_is_kept_and_an_empty_one_is_unset(tmp_path):
    token = "a" * MIN_ADMIN_TOKEN_CHARS
    assert Settings(data_dir=tmp_path, admin_token=token).admin_token == token
    assert Settings(data_dir=tmp_path, admin_token="").admin_token is None


def test_faq_serve_refuses_a_short_admin_token_in_one_line(tmp_path):
    env = {**os.environ, "FAQ_DATA_DIR": str(tmp_path), "FAQ_ADMIN_TOKEN": "x" * 24}
    done = subprocess.run([sys.executable, "-m", "cli.main", "serve", "--port", "1"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: FAQ_ADMIN_TOKEN must be at least 32 characters, got 24: make one with `openssl rand -hex 24`"]
    assert not (tmp_path / "faq.db").exists(), "refused before anything was opened"


def test_the_split_is_normalised_and_sticky(tmp_path):
    s = Settings(data_dir=tmp_path, ab_split=" ann:90 , lexical:10 ,")
    assert s.ab_split == "ann:90,lexical:10" and split_weights(s.ab_split) == (("ann", 90), ("lexical", 10))
    split = arm_split(s)
    assert split == parse_split("ann:90,lexical:10") and {split.assign(f"s{i}") for i in range(200)} <= set(ARMS)
    assert all(split.assign("same session") == split.assign("same session") for _ in range(3))
    with pytest.raises(ValueError, match="listed twice"):
        split_weights("ann:1,ann:2")


def test_device_model_cache_and_torch_threads_reach_the_served_components(faq_env, db_url, shared_model_cache,
                                                                          monkeypatch):
    """FAQ_DEVICE, FAQ_MODEL_CACHE and FAQ_TORCH_THREADS from the environment, through a real app start:
    the encoder is loaded by the service (MiniLM, runtime auto). CUDA is made to look present, so only
    FAQ_DEVICE=cpu keeps "auto" on the CPU's int8 ONNX; its export is found in FAQ_MODEL_CACHE; the
    service sets FAQ_TORCH_THREADS."""
    import torch
    from fastapi.testclient import TestClient

    from app.api.main import create_app
    from app.settings import get_settings
    from migrations import runner

    runner.upgrade(db_url)
    for name, value in {"FAQ_DEVICE": "cpu", "FAQ_TORCH_THREADS": "1", "FAQ_ENCODER": "minilm",
                        "FAQ_KB_POLL_SECONDS": "0"}.items():
        monkeypatch.setenv(name, value)
    assert faq_env.model_cache == shared_model_cache  # FAQ_MODEL_CACHE, set by the fixture
    get_settings.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    set_threads, threads = torch.set_num_threads, torch.get_num_threads()
    calls: list[int] = []  # the service sets them in its start-up thread: recorded where they are set
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), set_threads(n))[1])
    try:
        with TestClient(create_app()) as client:
            service = client.app.state.service
            assert (service.settings.device, service.settings.torch_threads) == ("cpu", 1) and calls == [1]
            assert service.encoder.id == "all-MiniLM-L6-v2" and service.encoder.runtime == "onnx-int8"
            assert service.encoder.file.is_relative_to(shared_model_cache / "onnx")
    finally:
        set_threads(threads)
        get_settings.cache_clear()
