"""The model settings reach the trainers: FAQ_MODEL_CACHE (where mpnet is reassembled and the ONNX exports
live), FAQ_DEVICE and FAQ_TORCH_THREADS, through `faq train` and `faq quickstart` as an operator runs them."""
from __future__ import annotations

import json

import pytest

from tests.helpers.kb import write_kb_jsonl


@pytest.fixture
def settings_env(faq_env, monkeypatch):
    """faq_env, plus a setter that re-reads the settings after changing a variable."""
    from app.settings import get_settings

    def setenv(name: str, value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        get_settings.cache_clear()

    return setenv


def test_siamese_hard_negatives_run_from_the_model_cache(tmp_path, monkeypatch, settings_env, shared_model_cache):
    """A real run: the hard-negative encoder (MiniLM, int8 ONNX on the CPU) is exported to, or found in,
    FAQ_MODEL_CACHE; nothing is written to var/models under the working directory (the default cache)."""
    from cli.main import main
    from tests.helpers.siamese import toy_kb

    _, kb, queries = toy_kb(tmp_path)
    settings_env("FAQ_DEVICE", "cpu")  # ONNX on a machine with CUDA too
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["train", "siamese", "--kb", str(kb), "--dev-queries", str(queries), "--negatives-encoder", "minilm",
                 "--out", str(tmp_path / "m"), "--epochs", "1", "--batch-size", "8", "--threads", "1",
                 "--config", '{"filters": 4, "hidden": 4, "mlp_hidden": 8}']) == 0
    assert (tmp_path / "m" / "config.json").is_file()
    assert list(shared_model_cache.glob("onnx/all-MiniLM-L6-v2-*/model.int8.onnx"))
    assert not (cwd / "var").exists()


class _Reached(RuntimeError):
    """Raised by the stand-in mpnet_path once it has recorded the cache it was given."""


@pytest.fixture
def mpnet_calls(monkeypatch) -> list:
    """Every model cache mpnet is looked up in; the lookup then stops the command (reassembling mpnet
    would take minutes)."""
    import models.encoders.mpnet

    calls: list = []

    def mpnet_path(cache_dir=None, progress=None):
        calls.append(cache_dir)
        raise _Reached(f"mpnet looked up in {cache_dir}")

    monkeypatch.setattr(models.encoders.mpnet, "mpnet_path", mpnet_path)
    return calls


def test_quickstart_dev_trains_the_mpnet_msem_with_mpnet_from_the_model_cache(tmp_path, monkeypatch, settings_env,
                                                                               shared_model_cache, mpnet_calls):
    """`faq quickstart --dev` with mpnet as the base trains MSEM on mpnet's states (`faq train msem
    --config '{"word_repr": "mpnet"}'`): mpnet comes from FAQ_MODEL_CACHE (the Docker image's /opt/models,
    where the parts' packages are gone), not from var/models."""
    import models.encoders.load
    from cli.main import main
    from tests.helpers.msem import WIDE, WIDE_USER_QUERIES, write_queries

    monkeypatch.setattr(models.encoders.load, "default_encoder_spec", lambda cache_dir=None: "mpnet")
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    dev = write_queries(tmp_path / "dev.jsonl", WIDE_USER_QUERIES)
    with pytest.raises(_Reached):
        main(["quickstart", "--kb", str(kb), "--dev", str(dev), "--no-serve", "--epochs", "1"])
    assert mpnet_calls == [shared_model_cache]


def test_reranker_on_mpnet_finds_mpnet_in_the_model_cache(tmp_path, settings_env, shared_model_cache, mpnet_calls):
    from cli.main import main
    from tests.helpers.reranker import tiny_training_data

    pairs, stsb = tiny_training_data(tmp_path)
    settings_env("FAQ_DEVICE", "cpu")
    with pytest.raises(_Reached):
        main(["train", "reranker", "--base", "mpnet", "--layers", "1", "--pairs", str(pairs), "--stsb", str(stsb),
              "--out", str(tmp_path / "r"), "--no-augment"])
    assert mpnet_calls == [shared_model_cache]


def test_reranker_command_passes_device_cache_and_threads(tmp_path, monkeypatch, settings_env, shared_model_cache):
    """FAQ_DEVICE unless --device is given; FAQ_TORCH_THREADS only when set (else the trainer's 1: the
    setting's default of 2 is the service's)."""
    import training.cross_encoder
    from cli.main import main

    seen: list[dict] = []

    def train_reranker(out, kb_paths, pair_paths, stsb_dir, cfg, **kwargs):
        seen.append({"threads": cfg.threads, **kwargs})
        return {"stsb_dev_pearson": 0.0, "stsb_dev_spearman": 0.0}

    monkeypatch.setattr(training.cross_encoder, "train_reranker", train_reranker)
    command = ["train", "reranker", "--out", str(tmp_path / "r"), "--stsb", str(tmp_path)]
    settings_env("FAQ_DEVICE", None)
    settings_env("FAQ_TORCH_THREADS", None)
    assert main(command) == 0
    settings_env("FAQ_DEVICE", "cpu")
    settings_env("FAQ_TORCH_THREADS", "3")
    assert main(command) == 0
    assert main(command + ["--device", "cuda:1"]) == 0
    assert [(s["device"], s["threads"], s["cache_dir"]) for s in seen] == [
        (None, 1, shared_model_cache), ("cpu", 3, shared_model_cache), ("cuda:1", 3, shared_model_cache)]


def test_unset_variables_keep_the_default_cache(tmp_path, monkeypatch):
    """Without FAQ_MODEL_CACHE and FAQ_DATA_DIR, the trainers get var/models: the cache they used before
    the settings reached them."""
    from app.settings import get_settings
    from cli.train import _model_settings
    from models.encoders.mpnet import default_cache_dir

    for name in ("FAQ_MODEL_CACHE", "FAQ_DATA_DIR", "FAQ_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env file here
    get_settings.cache_clear()
    try:
        assert _model_settings(None) == (None, default_cache_dir())
        assert _model_settings("cpu") == ("cpu", default_cache_dir())
    finally:
        get_settings.cache_clear()


def test_msem_trainer_gives_the_cache_to_the_states_of_its_base(tmp_path, mpnet_calls):
    """The library entry point too: `train_msem(cache_dir=...)` loads the mpnet variant's base from there."""
    from training.msem import train_msem
    from tests.helpers.msem import WIDE

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    with pytest.raises(_Reached):
        train_msem(kb, tmp_path / "m", config_overrides=json.dumps({"word_repr": "mpnet"}), device="cpu",
                   cache_dir=tmp_path / "cache")
    assert mpnet_calls == [tmp_path / "cache"]
