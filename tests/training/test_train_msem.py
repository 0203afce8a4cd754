"""MSEM training: a toy KB overfits in seconds, resume continues the epoch counter, --init extends
the vocabulary, Ctrl-C leaves a checkpoint. A tiny model and a tiny fake GloVe keep it fast."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.glove import GloVe
from models.encoders.msem.encoder import MsemEncoder
from training.loop import CHECKPOINT_FILE, TrainError
from training.msem import MsemTrainer, TrainConfig, extend_vocabulary, parse_config_overrides, train_msem
from tests.helpers.kb import write_kb_jsonl
from tests.helpers.msem import FAQS, WIDE, write_queries

torch.set_num_threads(1)

TINY = {"hidden": 16, "heads": 2, "ffn_dim": 32, "pool_da": 16, "pool_heads_r": 2, "char_dim": 8,
        "char_filters": 8, "max_len": 12, "dropout": 0.0}


@pytest.fixture
def fake_glove():
    words = sorted({w for qs in FAQS.values() for q in qs for w in q.split()})[::2]  # half the words "pretrained"
    rng = np.random.default_rng(0)
    return GloVe(words, rng.normal(0, 0.5, size=(len(words), 8)).astype(np.float32))


@pytest.fixture
def kb_file(tmp_path):
    return write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)


def tiny_cfg(**kw) -> TrainConfig:
    base = dict(epochs=25, batch_size=24, lr=3e-3, seed=0, holdout=0.0, patience_switch=50, patience=50)
    return TrainConfig(**{**base, **kw})


def test_overfits_toy_kb(tmp_path, kb_file, fake_glove):
    out = tmp_path / "model"
    summary = train_msem(kb_file, out, config_overrides={**TINY, "word_dim": 8}, train_config=tiny_cfg(epochs=10),
                         device="cpu", glove=fake_glove, command="test")
    assert summary["epochs_done"] == 10
    assert summary["data"]["intent_classes"] == 7  # 6 FAQs of 4 questions (> 3) + "other"
    assert summary["history"][-1]["loss"] < summary["history"][0]["loss"]
    encoder = MsemEncoder.load(out)
    questions = [q for qs in FAQS.values() for q in qs]
    faq_of = [f for f, qs in FAQS.items() for _ in qs]
    vecs = encoder.encode(questions)
    sims = vecs @ vecs.T
    np.fill_diagonal(sims, -np.inf)
    nearest = sims.argmax(axis=1)
    assert [faq_of[j] for j in nearest] == faq_of
    meta = json.loads((out / "training.json").read_text())
    assert meta["command"] == "test" and len(meta["history"]) == 10
    assert (out / "README.md").read_text().startswith("# MSEM model")
    assert (out / CHECKPOINT_FILE).is_file()


def test_resume_continues_epoch_counter(tmp_path, kb_file, fake_glove):
    out = tmp_path / "model"
    overrides = {**TINY, "word_dim": 8}
    first = train_msem(kb_file, out, config_overrides=overrides, train_config=tiny_cfg(epochs=1),
                       device="cpu", glove=fake_glove)
    assert first["epochs_done"] == 1
    ck = torch.load(out / CHECKPOINT_FILE, weights_only=False)
    assert ck["epoch"] == 1 and ck["optimizer_kind"] == "adam"
    second = train_msem(kb_file, out, config_overrides=overrides, train_config=tiny_cfg(epochs=3),
                        resume=True, device="cpu", glove=fake_glove)
    assert [row["epoch"] for row in second["history"]] == [1, 2, 3]
    assert torch.load(out / CHECKPOINT_FILE, weights_only=False)["epoch"] == 3
    # resuming with a different class structure is refused with a clear message
    with pytest.raises(TrainError, match="--resume: no checkpoint"):
        train_msem(kb_file, tmp_path / "elsewhere", train_config=tiny_cfg(), resume=True, glove=fake_glove)


def test_lr_decay_schedule_applies_on_resume(tmp_path, kb_file, fake_glove):
    """Adam epoch e runs at lr * lr_decay**e, taken from the config even when the checkpoint was
    written on another schedule (so a finished run can be continued at a lower rate)."""
    out = tmp_path / "model"
    overrides = {**TINY, "word_dim": 8}
    first = train_msem(kb_file, out, config_overrides=overrides, train_config=tiny_cfg(epochs=1),
                       device="cpu", glove=fake_glove)
    assert first["history"][0]["lr"] == pytest.approx(3e-3)
    second = train_msem(kb_file, out, config_overrides=overrides, train_config=tiny_cfg(epochs=3, lr_decay=0.5),
                        resume=True, device="cpu", glove=fake_glove)
    assert [row["lr"] for row in second["history"]] == pytest.approx([3e-3, 1.5e-3, 7.5e-4])
    with pytest.raises(TrainError, match="lr_decay must be > 0"):
        tiny_cfg(lr_decay=0.0).validate()


def test_dev_queries_select_by_top1_and_sgd_switch(tmp_path, kb_file, fake_glove):
    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(json.dumps(r) for r in [
        {"query": "reset password", "faq_id": "password"},
        {"query": "refund please", "faq_id": "refund"},
        {"query": "what is the meaning of life", "faq_id": None},
    ]) + "\n")
    summary = train_msem(kb_file, tmp_path / "m", dev_path=dev, config_overrides={**TINY, "word_dim": 8},
                         train_config=tiny_cfg(epochs=6, patience_switch=1, patience=1), device="cpu",
                         glove=fake_glove)
    assert summary["metric"] == "dev_top1"
    assert all(0.0 <= row["metric"] <= 1.0 for row in summary["history"])
    optimizers = [row["optimizer"] for row in summary["history"]]
    # once switched, never back to Adam
    assert optimizers == sorted(optimizers)
    if "sgd" in optimizers:
        assert summary["history"][optimizers.index("sgd")]["lr"] == pytest.approx(1e-3)


def test_init_extends_vocabulary_and_recreates_intent_head(tmp_path, kb_file, fake_glove):
    base_dir = tmp_path / "base"
    train_msem(kb_file, base_dir, config_overrides={**TINY, "word_dim": 8}, train_config=tiny_cfg(epochs=1),
               device="cpu", glove=fake_glove)
    base = MsemEncoder.load(base_dir)
    old_vec = base.encode(["how do i reset my password"])
    glove = GloVe(fake_glove.words + ["zebra"], np.vstack([fake_glove.vectors, np.ones((1, 8), np.float32)]))
    extended, stats = extend_vocabulary(base, ["zebra zebra quokka quokka ü"], {"n_intents": 3}, glove=glove)
    # "ü" is normalised to "u"
    assert stats == {"new_learned_words": 1, "new_glove_words": 1,
                     "new_chars": len({c for c in "zebraquokka" if c not in base.text.char_to_id})}
    assert "zebra" in extended.text.word_to_id and "quokka" in extended.text.word_to_id
    assert extended.model.intent_head.out_features == 3
    # old words keep their vectors: a sentence of old words encodes the same
    np.testing.assert_allclose(extended.encode(["how do i reset my password"]), old_vec, atol=1e-5)
    row = extended.text.word_to_id["zebra"] - extended.text.n_learned_words
    assert torch.allclose(extended.model.embed.word_pretrained[row], torch.ones(8))
    with pytest.raises(TrainError, match="architecture"):
        extend_vocabulary(base, ["x"], {"hidden": 32}, glove=glove)


def test_keyboard_interrupt_saves_checkpoint(tmp_path, kb_file, fake_glove, monkeypatch):
    out = tmp_path / "m"
    calls = {"n": 0}
    original = MsemTrainer.fit

    def interrupted(self, pairs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(self, pairs)

    monkeypatch.setattr(MsemTrainer, "fit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_msem(kb_file, out, config_overrides={**TINY, "word_dim": 8}, train_config=tiny_cfg(epochs=5),
                   device="cpu", glove=fake_glove)
    ck = torch.load(out / CHECKPOINT_FILE, weights_only=False)
    assert ck["epoch"] == 1
    assert json.loads((out / "training.json").read_text())["stop_reason"] == "interrupted"


def test_config_overrides_errors(tmp_path):
    assert parse_config_overrides('{"hidden": 8}') == {"hidden": 8}
    with pytest.raises(TrainError, match="unknown MsemConfig fields"):
        parse_config_overrides('{"hiden": 8}')
    with pytest.raises(TrainError, match="neither a JSON object nor an existing file"):
        parse_config_overrides("nope.json")
    with pytest.raises(TrainError, match="epochs must be >= 1"):
        TrainConfig(epochs=0).validate()


def test_pairs_only_training_uses_held_out_pair_accuracy(tmp_path, fake_glove):
    pairs = tmp_path / "pairs.tsv"
    lines = []
    faqs = list(FAQS.values())
    for i, qs in enumerate(faqs):
        lines += [f"1\t{qs[0]}\t{qs[1]}", f"1\t{qs[2]}\t{qs[3]}", f"0\t{qs[0]}\t{faqs[(i + 1) % 6][0]}"]
    pairs.write_text("\n".join(lines) + "\n")
    summary = train_msem(None, tmp_path / "m", pairs_path=pairs, config_overrides={**TINY, "word_dim": 8},
                         train_config=tiny_cfg(epochs=2, holdout=0.2), device="cpu", glove=fake_glove)
    assert summary["metric"] == "dev_pair_accuracy"
    assert summary["data"]["dev_pairs"] == 4 and summary["data"]["file_pairs"] == 14
    # positives are 2-question components: no class has more than 3 questions -> all "other", no intent head
    assert summary["data"]["intent_classes"] == 1 and summary["model_config"]["n_intents"] == 0


def test_several_kbs_and_dev_kb_of_unseen_faqs(tmp_path, fake_glove):
    """Two KB files train together with folder-name prefixes (equal faq_ids in two files stay apart);
    --dev-kb measures retrieval among FAQs the model never trained on."""
    names = list(FAQS)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    kb_a = write_kb_jsonl(tmp_path / "a" / "kb.jsonl", {k: FAQS[k] for k in names[:2]})
    kb_b = write_kb_jsonl(tmp_path / "b" / "kb.jsonl", {names[0]: FAQS[names[2]], names[3]: FAQS[names[3]]})
    dev_kb = write_kb_jsonl(tmp_path / "dev_kb.jsonl", {k: FAQS[k][:3] for k in names[4:]})
    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(json.dumps({"query": FAQS[k][3], "faq_id": k}) for k in names[4:]) + "\n")
    summary = train_msem([kb_a, kb_b], tmp_path / "m", dev_path=dev, dev_kb_path=dev_kb,
                         config_overrides={**TINY, "word_dim": 8}, train_config=tiny_cfg(epochs=1), device="cpu",
                         glove=fake_glove)
    assert summary["data"]["faqs"] == 4  # "password" of a and of b are two FAQs
    assert summary["data"]["dev_kb_faqs"] == 2 and summary["metric"] == "dev_top1"
    assert summary["sources"]["kb"] == [str(kb_a), str(kb_b)]
    with pytest.raises(TrainError, match="not in --dev-kb"):
        train_msem([kb_a], tmp_path / "m2", dev_path=dev, dev_kb_path=kb_b, train_config=tiny_cfg(epochs=1),
                   glove=fake_glove)
    with pytest.raises(TrainError, match="needs --dev"):
        train_msem([kb_a], tmp_path / "m3", dev_kb_path=kb_b, train_config=tiny_cfg(epochs=1), glove=fake_glove)


def test_cli_fine_tunes_the_shipped_model_by_default(tmp_path, monkeypatch, capsys):
    """`faq train msem` starts from models/default when it exists; a --config that changes the
    architecture must say --from-scratch; --from-scratch and --init exclude each other."""
    import models.encoders.load
    from cli.main import main
    from cli.train import _default_init

    shipped = tmp_path / "shipped"
    monkeypatch.setattr(models.encoders.load, "default_msem_dir", lambda: shipped)
    assert _default_init(None) == (None, None)  # nothing shipped: from scratch
    shipped.mkdir()
    (shipped / "config.json").write_text(json.dumps({"hidden": 150, "word_repr": "minilm"}))
    assert _default_init(None) == (str(shipped), None)
    assert _default_init('{"hidden": 150, "dropout": 0.2}') == (str(shipped), None)  # same architecture
    assert _default_init('{"minilm_train_layers": 2}') == (str(shipped), None)  # adds layers, same function at init
    init, error = _default_init('{"hidden": 64}')
    assert init is None and "--from-scratch" in error and "hidden" in error
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)
    assert main(["train", "msem", "--kb", str(kb), "--out", str(tmp_path / "m"), "--config", '{"hidden": 64}']) == 2
    assert "--from-scratch" in capsys.readouterr().err
    assert main(["train", "msem", "--kb", str(kb), "--out", str(tmp_path / "m"), "--from-scratch",
                 "--init", str(shipped)]) == 2


# ---- selection: a fine-tuned model is kept only when it beats the zero-shot base on --dev queries -------


class ConstantEncoder:
    """Every text -> the same vector: a base that can only guess (top-1 = the first KB row's FAQ)."""

    id, dim = "constant", 4

    def encode(self, texts, batch_size=64, show_progress_bar=False):
        return np.tile(np.array([[1.0, 0.0, 0.0, 0.0]], dtype=np.float32), (len(texts), 1))


def test_a_thin_kb_is_not_trained_on_and_selects_the_base(tmp_path, kb_file, fake_glove):
    summary = train_msem(kb_file, tmp_path / "m", config_overrides={**TINY, "word_dim": 8},
                         train_config=tiny_cfg(epochs=2, holdout=0.1), device="cpu", glove=fake_glove,
                         baseline="minilm")
    sel = summary["selection"]
    assert summary["trained"] is False and not (tmp_path / "m" / "model.safetensors").exists()
    assert sel["kept"] == "base" and sel["encoder"] == "minilm" and "too thin" in sel["reason"]
    assert "only 6 of 6 FAQs" in sel["reason"]
    assert json.loads((tmp_path / "m" / "selection.json").read_text()) == sel


def test_without_dev_queries_the_base_is_kept_and_held_out_numbers_are_recorded(tmp_path, fake_glove, monkeypatch):
    """Held-out KB phrasings are written like the KB, not like users: a fine-tune that wins on them is still
    not kept; both numbers are recorded for information."""
    import models.encoders.load

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    cfg = tiny_cfg(epochs=3, holdout=0.1)
    # a real base: the packaged MiniLM beats a 3-epoch toy model
    summary = train_msem(kb, tmp_path / "a", config_overrides={**TINY, "word_dim": 8}, train_config=cfg,
                         device="cpu", glove=fake_glove, baseline="minilm")
    sel = summary["selection"]
    assert summary["metric"] == "heldout_top1" and summary["data"]["kb_questions_held_out"] == 12
    assert sel["queries"] == "held-out KB phrasings" and sel["n_queries"] == 12
    assert sel["kept"] == "base" and sel["encoder"] == "minilm" and sel["base"] >= 0.9
    assert sel["fine_tuned"] == pytest.approx(summary["best_metric"], abs=1e-4)
    # a base that can only guess: the fine-tune wins on the held-out phrasings and is still not kept
    monkeypatch.setattr(models.encoders.load, "load_encoder", lambda spec, **_: ConstantEncoder())
    summary = train_msem(kb, tmp_path / "b", config_overrides={**TINY, "word_dim": 8}, train_config=cfg,
                         device="cpu", glove=fake_glove, baseline="constant")
    sel = summary["selection"]
    assert sel["base"] == pytest.approx(1 / 12, abs=1e-4) and sel["fine_tuned"] > sel["base"]
    assert sel["kept"] == "base" and sel["encoder"] == "constant"
    assert "written like the KB, not like users" in sel["reason"] and "(--dev)" in sel["reason"]
    assert f"fine-tuned {sel['fine_tuned']:.4f} > zero-shot constant" in sel["reason"]
    assert json.loads((tmp_path / "b" / "selection.json").read_text()) == sel


def test_dev_queries_decide_the_selection(tmp_path, fake_glove, monkeypatch):
    import models.encoders.load

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    # one phrasing of every FAQ as it stands in the KB: any encoder that is not constant finds all 12
    dev = write_queries(tmp_path / "dev.jsonl", [(qs[0], f) for f, qs in WIDE.items()] + [("weather on mars", None)])
    monkeypatch.setattr(models.encoders.load, "load_encoder", lambda spec, **_: ConstantEncoder())
    summary = train_msem(kb, tmp_path / "m", dev_path=dev, config_overrides={**TINY, "word_dim": 8},
                         train_config=tiny_cfg(epochs=2, holdout=0.1), device="cpu", glove=fake_glove,
                         baseline="constant")
    sel = summary["selection"]
    assert summary["metric"] == "dev_top1" and sel["queries"] == "dev queries" and sel["n_queries"] == 12
    assert sel["base"] == pytest.approx(1 / 12, abs=1e-4) and sel["fine_tuned"] == 1.0
    assert sel["kept"] == "fine-tuned" and sel["encoder"] == str(tmp_path / "m")
    assert sel["reason"] == f"top-1 on 12 dev queries: fine-tuned 1.0000 > zero-shot constant {1 / 12:.4f}"


def test_a_bad_dev_file_fails_before_training_and_names_the_file(tmp_path, kb_file, fake_glove, capsys, faq_env):
    from cli.main import main

    missing = tmp_path / "missing.jsonl"
    with pytest.raises(TrainError, match=f"--dev {missing}: no such file"):
        train_msem(kb_file, tmp_path / "m", dev_path=missing, train_config=tiny_cfg(epochs=1), glove=fake_glove)
    stray = write_queries(tmp_path / "stray.jsonl", [("reset password", "password"), ("fly me", "flights")])
    with pytest.raises(TrainError, match=r"stray.jsonl: 1 faq_id\(s\) not in the KB, e.g. \['flights'\]"):
        train_msem(kb_file, tmp_path / "m", dev_path=stray, train_config=tiny_cfg(epochs=1), glove=fake_glove)
    for dev in (missing, stray):
        assert main(["train", "msem", "--kb", str(kb_file), "--out", str(tmp_path / "m"), "--from-scratch",
                     "--dev", str(dev)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --dev {dev}: ") and err.count("\n") == 1
    assert not (tmp_path / "m").exists()


def test_cli_says_which_model_it_kept(tmp_path, fake_glove, monkeypatch, capsys, faq_env):
    import models.encoders.load
    import models.encoders.msem.encoder

    from cli.main import main

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)
    monkeypatch.setattr(models.encoders.msem.encoder, "load_glove", lambda: fake_glove)
    config = json.dumps({**TINY, "word_dim": 8})
    assert main(["train", "msem", "--kb", str(kb), "--out", str(tmp_path / "m"), "--from-scratch",
                 "--baseline", "minilm", "--config", config]) == 0
    out = capsys.readouterr().out
    assert "kept the zero-shot base, not the fine-tuned model" in out and "FAQ_ENCODER=minilm" in out
    assert "too thin" in out and "anyway" not in out  # nothing was trained
    # trained without --dev: the base is kept even when the fine-tune wins on the held-out phrasings, and
    # the message says how to serve the fine-tune anyway
    monkeypatch.setattr(models.encoders.load, "load_encoder", lambda spec, **_: ConstantEncoder())
    wide = write_kb_jsonl(tmp_path / "wide.jsonl", WIDE)
    out_dir = tmp_path / "w"
    assert main(["train", "msem", "--kb", str(wide), "--out", str(out_dir), "--from-scratch", "--epochs", "3",
                 "--baseline", "constant", "--config", config]) == 0
    out = capsys.readouterr().out
    sel = json.loads((out_dir / "selection.json").read_text())
    assert sel["kept"] == "base" and sel["fine_tuned"] > sel["base"]
    assert "kept the zero-shot base" in out and "written like the KB, not like users" in out
    assert f"anyway: FAQ_ENCODER={out_dir} or `faq index build --encoder {out_dir}`" in out


def test_cli_refuses_a_bad_fusion_grid(tmp_path, capsys, faq_env):
    from cli.main import main

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)
    for bad in ("0.5,1.5", "0.5,x"):
        assert main(["train", "msem", "--kb", str(kb), "--out", str(tmp_path / "m"), "--fusion-grid", bad]) == 2
        assert "--fusion-grid: expected weights in (0, 1)" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
