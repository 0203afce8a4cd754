"""Training of the analogy model (training/analogy.py): a toy set learned in a few steps, a run saved and
resumed, the --qa spec."""
from __future__ import annotations

import json
import random

import pytest
import torch

from models.matchers.analogy import AnalogyConfig
from training.analogy import AnalogyData, AnalogyTrainer, TrainConfig, parse_qa
from training.loop import CHECKPOINT_FILE, TrainError
from tests.helpers.analogy import ToyWords, qa_lists

torch.set_num_threads(1)


@pytest.mark.parametrize("objective", ["analogy", "cosine"])
def test_a_few_steps_lower_the_loss(tmp_path, objective):
    torch.manual_seed(0)
    lists = qa_lists()
    data = AnalogyData(lists, lists[:4])
    trainer = AnalogyTrainer(data, tmp_path / objective, TrainConfig(prototypes=3, batch_size=32, per_answer=2),
                      AnalogyConfig(hidden=16, dropout=0.0, objective=objective), words=ToyWords(), device="cpu")
    quads = trainer.sampler.sample(random.Random(0))
    trainer.model.train()
    first = trainer.step(quads)[0]
    for _ in range(30):
        last = trainer.step(quads)[0]
    assert last < 0.5 * first


def test_training_run_saves_and_resumes(tmp_path):
    lists = qa_lists()
    data = AnalogyData(lists, lists[:4])
    cfg = TrainConfig(prototypes=3, epochs=2, per_answer=2)
    summary = AnalogyTrainer(data, tmp_path, cfg, AnalogyConfig(hidden=8), words=ToyWords(), device="cpu").run()
    assert summary["epochs_done"] == 2 and (tmp_path / CHECKPOINT_FILE).exists()
    calibration = json.loads((tmp_path / "calibration.json").read_text())
    assert calibration["fitted_on"] == "dev" and calibration["n_pairs"] > 0 and summary["calibration"] == calibration
    assert json.loads((tmp_path / "prototypes.json").read_text())
    more = AnalogyTrainer(data, tmp_path, TrainConfig(prototypes=3, epochs=3, per_answer=2), resume=True,
                   words=ToyWords(), device="cpu").run()
    assert more["epochs_done"] == 3 and [h["epoch"] for h in more["history"]] == [0, 1, 2, 3]
    with pytest.raises(TrainError, match="differ"):
        AnalogyTrainer(data, tmp_path, cfg, AnalogyConfig(hidden=4), resume=True, words=ToyWords(), device="cpu")


def test_parse_qa():
    assert parse_qa("wikiqa:/data/w") == ("wikiqa", "/data/w")
    assert parse_qa("kb:faq.jsonl") == ("kb", "faq.jsonl")
    for bad in ("wikiqa", "squad:/x", "kb:"):
        with pytest.raises(TrainError):
            parse_qa(bad)
