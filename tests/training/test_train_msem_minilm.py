"""MSEM training with `word_repr="minilm"` (the frozen packaged all-MiniLM-L6-v2 token states): a 1-epoch
smoke with --resume and --init, --init adding fusion or trainable MiniLM layers, and the fusion weight
chosen on --dev queries after training. The real packaged MiniLM is loaded (offline); the MSEM on top of it
is tiny."""
from __future__ import annotations

import json

import pytest
import torch

from models.encoders.msem.encoder import MsemEncoder
from models.encoders.msem.model import MINILM_DIM, MsemConfig
from models.encoders.words import MiniLMText
from training.loop import CHECKPOINT_FILE
from training.msem import TrainConfig, train_msem
from tests.helpers.kb import write_kb_jsonl
from tests.helpers.msem_minilm import TINY

torch.set_num_threads(1)

FAQS = {
    "password": ["how do i reset my password", "i forgot my password", "password reset please", "change my password"],
    "hours": ["when are you open", "what are your opening hours", "opening times today", "are you open on sunday"],
    "shipping": ["how much is shipping", "shipping cost to france", "what does delivery cost", "is shipping free"],
    "refund": ["i want a refund", "how do i get my money back", "refund my order", "can i return this for a refund"],
}


@pytest.fixture
def kb_file(tmp_path):
    return write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)


def test_one_epoch_training_smoke_resume_and_init(tmp_path, kb_file):
    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(json.dumps(r) for r in [
        {"query": "forgot password", "faq_id": "password"}, {"query": "refund please", "faq_id": "refund"},
        {"query": "what's the weather", "faq_id": None},
    ]) + "\n")
    cfg = dict(batch_size=16, lr=3e-3, seed=0, holdout=0.0)
    out = tmp_path / "model"
    first = train_msem(kb_file, out, dev_path=dev, config_overrides=TINY, train_config=TrainConfig(epochs=1, **cfg),
                       device="cpu", command="test")
    assert first["epochs_done"] == 1 and first["history"][0]["metric_name"] == "dev_top1"
    assert first["model_config"]["word_repr"] == "minilm" and first["vocab_extension"] == {}
    assert "all-MiniLM-L6-v2" in (out / "README.md").read_text()
    model = MsemEncoder.load(out)
    assert model.encode(["how much is shipping"]).shape == (1, 12)
    assert not (out / "words.txt").exists()

    second = train_msem(kb_file, out, dev_path=dev, config_overrides=TINY, train_config=TrainConfig(epochs=2, **cfg),
                        resume=True, device="cpu")
    assert [row["epoch"] for row in second["history"]] == [1, 2]
    assert torch.load(out / CHECKPOINT_FILE, weights_only=False)["epoch"] == 2

    tuned = train_msem(kb_file, tmp_path / "tuned", dev_path=dev, init_dir=out,
                       train_config=TrainConfig(epochs=1, **cfg), device="cpu")
    assert tuned["epochs_done"] == 1 and tuned["init"] == str(out)
    assert MsemEncoder.load(tmp_path / "tuned").config.word_repr == "minilm"


def test_fusion_config_errors_and_init_adds_fusion(tmp_path):
    with pytest.raises(ValueError, match="minilm_fusion must be in"):
        MsemConfig(**{**TINY, "minilm_fusion": 1.0}, word_vocab_size=10, char_vocab_size=10)
    with pytest.raises(ValueError, match="needs word_repr 'minilm' or 'mpnet'"):
        MsemConfig(minilm_fusion=0.3, word_vocab_size=10, char_vocab_size=10)
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)
    cfg = TrainConfig(epochs=1, batch_size=16, seed=0, holdout=0.0)
    train_msem(kb, tmp_path / "base", config_overrides=TINY, train_config=cfg, device="cpu")
    # fusion has no weights: --init of an unfused model may switch it on
    summary = train_msem(kb, tmp_path / "fused", init_dir=tmp_path / "base", config_overrides={"minilm_fusion": 0.5},
                         train_config=cfg, device="cpu")
    assert summary["model_config"]["minilm_fusion"] == 0.5
    assert MsemEncoder.load(tmp_path / "fused").dim == TINY["out_dim"] + MINILM_DIM


def test_init_adds_trainable_layers_and_training_moves_them(tmp_path):
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)
    cfg = TrainConfig(epochs=1, batch_size=16, seed=0, holdout=0.0)
    train_msem(kb, tmp_path / "base", config_overrides=TINY, train_config=cfg, device="cpu")
    base = MsemEncoder.load(tmp_path / "base")
    top = MiniLMText().layer_state(5)
    summary = train_msem(kb, tmp_path / "tuned", init_dir=tmp_path / "base", config_overrides={"minilm_train_layers": 1},
                         train_config=cfg, device="cpu")
    assert summary["model_config"]["minilm_train_layers"] == 1
    tuned = MsemEncoder.load(tmp_path / "tuned")
    trained = tuned.model.embed.top[0].query.weight
    assert not torch.allclose(trained, top["attention.self.query.weight"])  # it learned
    assert torch.allclose(trained, top["attention.self.query.weight"], atol=0.05)  # gently (lr x minilm_lr_scale)
    assert base.encode(["hi"]).shape == tuned.encode(["hi"]).shape
    with pytest.raises(Exception, match="already trains 1"):
        train_msem(kb, tmp_path / "again", init_dir=tmp_path / "tuned", config_overrides={"minilm_train_layers": 2},
                   train_config=cfg, device="cpu")


def test_fusion_weight_is_chosen_on_dev_queries_only(tmp_path):
    """After training, w is re-chosen on the --dev queries from one encode; config.json gets the best (ties
    keep the trained w), the weights stay as they are. Without --dev the held-out KB phrasings are
    measured for information and the trained w stays (they are written like the KB, not like users)."""
    from kb.files import read_kb, read_queries
    from training.msem import FUSION_GRID, prepare_data, tune_fusion
    from tests.helpers.msem import WIDE, WIDE_USER_QUERIES, write_queries

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    cfg = TrainConfig(epochs=1, batch_size=16, seed=0, holdout=0.1)
    out = tmp_path / "m"
    summary = train_msem(kb, out, config_overrides={**TINY, "minilm_fusion": 0.5}, train_config=cfg, device="cpu",
                         fusion_grid=FUSION_GRID)
    fusion = summary["fusion"]
    assert fusion["queries"] == "held-out KB phrasings" and fusion["trained_w"] == fusion["chosen_w"] == 0.5
    assert set(float(w) for w in fusion["top1_by_w"]) == set(FUSION_GRID) and "not like users" in fusion["reason"]
    assert json.loads((out / "config.json").read_text())["minilm_fusion"] == 0.5
    # with labelled user queries the best w is chosen and saved
    dev = read_queries(write_queries(tmp_path / "dev.jsonl", WIDE_USER_QUERIES))
    fusion = tune_fusion(prepare_data(read_kb(kb), [], dev, cfg), out, FUSION_GRID, device="cpu")
    scores = {float(w): v for w, v in fusion["top1_by_w"].items()}
    assert fusion["queries"] == "dev queries" and fusion["trained_w"] == 0.5 and "reason" not in fusion
    assert set(scores) == set(FUSION_GRID) and scores[fusion["chosen_w"]] == max(scores.values())
    saved = json.loads((out / "config.json").read_text())
    assert saved["minilm_fusion"] == fusion["chosen_w"]
    # the chosen w's cosines are what the saved folder now encodes
    enc = MsemEncoder.load(out, device="cpu")
    assert enc.config.minilm_fusion == fusion["chosen_w"]
    # a model without fusion has nothing to tune
    summary = train_msem(kb, tmp_path / "plain", config_overrides=TINY, train_config=cfg, device="cpu",
                         fusion_grid=FUSION_GRID)
    assert "fusion" not in summary
