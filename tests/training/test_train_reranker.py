"""Training the cross-encoder re-ranker (training/cross_encoder/): the phase A data rules (rule-based minimal
edits, MRPC test refused), a 1-layer model trained end to end through the real trainer, the command's
argument checks, and a run paused in chunks and resumed."""
from __future__ import annotations

import random

import numpy as np
import pytest

from models.matchers.cross_encoder import load_reranker
from tests.helpers.reranker import tiny_training_data


def test_minimal_edits_change_one_thing_and_rewordings_keep_it():
    from training.cross_encoder import augmentation_pairs, perturb, reword

    rng = random.Random(0)
    kinds = {}
    for text in ["How do I increase my credit limit?", "transfer $500 from my checking to my savings",
                 "i don't recognize this charge", "my card is blocked", "can I get 2 cards"]:
        kind, changed = perturb(text, rng)
        kinds[text] = kind
        assert changed != text and len(set(changed.lower().split()) ^ set(text.lower().split())) <= 4
    assert kinds["transfer $500 from my checking to my savings"] in ("role", "numeric")
    assert perturb("hello", rng) is None
    assert reword("How do I reset my password?", rng) not in (None, "How do I reset my password?")
    aug = augmentation_pairs(["How do I increase my credit limit?", "Why was my card declined?",
                              "I can't log in to my account", "Can I pay with 2 cards?"] * 3, 6, rng)
    assert aug and all(p.label in (0.0, 1.0) and p.q1 != p.q2 for p in aug)


def test_edits_cover_the_stress_types_and_keep_converse_comparatives():
    from training.cross_encoder import perturb, reword

    def all_edits(fn, text, n=60):
        return {fn(text, random.Random(seed)) for seed in range(n)} - {None}

    comparative = "Is the basic plan cheaper than the premium plan?"
    edits = all_edits(perturb, comparative)
    assert ("comparative", "Is the basic plan pricier than the premium plan?") in edits
    assert any(t == "Is the premium plan cheaper than the basic plan?" for _, t in edits)  # sides swapped
    assert "Is the premium plan pricier than the basic plan?" in all_edits(reword, comparative)  # converse: same meaning
    kinds = {k for text in ["Do I have to pay a deposit?", "Do all plans include support?",
                            "Can the admin remove a member?", "My bank charged me a fee"]
             for k, _ in all_edits(perturb, text)}
    assert {"modal", "quantifier", "role", "inc_dec"} <= kinds
    assert ("role", "I charged my bank a fee") in all_edits(perturb, "My bank charged me a fee")


def test_mrpc_test_pairs_are_refused(tmp_path):
    from training.cross_encoder import RerankTrainConfig, build_phase_a
    from training.loop import TrainError

    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    (mrpc / "pairs_test.tsv").write_text("1\ta b\ta c\n")
    with pytest.raises(TrainError, match="STS-B"):
        build_phase_a([], [str(mrpc / "pairs_test.tsv")], RerankTrainConfig())


def test_training_end_to_end_saves_a_loadable_reranker(tmp_path):
    """Two phases, a few steps of a 1-layer MiniLM cross-encoder, calibration, save, ONNX export, resume."""
    from training.cross_encoder import RerankTrainConfig, train_reranker

    pairs, stsb = tiny_training_data(tmp_path)
    cfg = RerankTrainConfig(n_layers=1, max_len=32, epochs_a=1, epochs_b=1, batch_a=8, batch_b=8, augment=True,
                            augment_max=6, holdout_fraction=0.25, checkpoint_every=2)
    out = tmp_path / "rr"
    summary = train_reranker(out, [], [str(pairs)], stsb, cfg, device="cpu")
    assert (out / "checkpoint.pt").exists() and (out / "model.int8.onnx").exists()
    assert summary["data"]["heldout_pairs"] == 6 and summary["calibration"]["source"].startswith("platt")
    model = load_reranker(out)
    assert model.config.n_layers == 1 and model.config.calibration == summary["calibration"]
    assert model.config.fusion_weight == 0.3  # the dev-tuned served blend, not the cross-encoder alone
    assert model.score("How do I reset my password 3?", ["I forgot my password 3", "parcel"]).shape == (2,)
    again = train_reranker(out, [], [str(pairs)], stsb, cfg, device="cpu", resume=True)  # a finished run
    assert again["history"] == summary["history"]


def test_train_reranker_command_checks_its_arguments(tmp_path, capsys):
    from cli.main import main

    assert main(["train", "reranker", "--out", str(tmp_path / "x"), "--stsb", str(tmp_path), "--layers", "7"]) == 2
    assert "--layers" in capsys.readouterr().err
    assert main(["train", "reranker", "--out", str(tmp_path / "x"), "--stsb", str(tmp_path), "--base", "mpnet",
                 "--layers", "13"]) == 2
    assert "1..12" in capsys.readouterr().err
    assert main(["train", "reranker", "--out", str(tmp_path / "x"), "--stsb", str(tmp_path), "--stop-after-minutes", "0"]) == 2
    assert "--stop-after-minutes must be > 0" in capsys.readouterr().err
    assert main(["train", "reranker", "--out", str(tmp_path / "x"), "--stsb", str(tmp_path)]) == 2
    assert "sts-train.csv" in capsys.readouterr().err


def test_training_in_chunks_with_frozen_layers(tmp_path):
    """stop_after_minutes pauses with a checkpoint (the plan is not shortened) and --resume finishes the
    same run; frozen layers come out exactly as pretrained while the layers above them learn."""
    from safetensors.numpy import load_file

    from models.encoders.pretrained import minilm_path
    from training.cross_encoder import RerankTrainConfig, train_reranker
    from training.loop import TrainingPaused

    pairs, stsb = tiny_training_data(tmp_path)
    out = tmp_path / "rr"
    cfg = RerankTrainConfig(n_layers=2, frozen_layers=1, max_len=32, epochs_a=1, epochs_b=1, batch_a=8, batch_b=8,
                            rehearse_batch=4, augment=False, holdout_fraction=0.25, stop_after_minutes=1e-6)
    with pytest.raises(TrainingPaused, match="phase A step 1 of"):
        train_reranker(out, [], [str(pairs)], stsb, cfg, device="cpu")
    assert (out / "checkpoint.pt").exists() and not (out / "config.json").exists()
    cfg.stop_after_minutes = None
    summary = train_reranker(out, [], [str(pairs)], stsb, cfg, device="cpu", resume=True)
    phase_a = summary["history"][0]
    assert phase_a["phase"] == "A" and phase_a["steps"] == phase_a["full_steps"]  # the paused step was not lost
    base = load_file(str(next(__import__("pathlib").Path(minilm_path()).glob("*.safetensors"))))
    trained = load_file(str(out / "model.safetensors"))

    def pretrained(key):
        return next(v for k, v in base.items() if k.endswith(key))

    frozen = "encoder.layer.0.attention.self.query.weight"
    np.testing.assert_array_equal(trained["bert." + frozen], pretrained(frozen))
    np.testing.assert_array_equal(trained["bert.embeddings.word_embeddings.weight"], pretrained("embeddings.word_embeddings.weight"))
    learned = "encoder.layer.1.attention.self.query.weight"
    assert not np.array_equal(trained["bert." + learned], pretrained(learned))
    with pytest.raises(Exception, match="another --base/--layers/--seed"):
        train_reranker(out, [], [str(pairs)], stsb, RerankTrainConfig(n_layers=3), device="cpu", resume=True)
