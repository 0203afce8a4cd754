"""MMAICM training (training/mmaicm.py): a toy QA set learned in a few epochs, resume, the triples' hard and
random negatives, a KB's held-out phrasings, bad input."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from models.matchers.mmaicm import load_mmaicm
from training.loop import CHECKPOINT_FILE, TrainError
from training.mmaicm import MmaicmTrainer, QaList, TrainConfig, TrainData, TripleSampler, kb_lists, train_mmaicm
from tests.helpers.mmaicm import SMALL

torch.set_num_threads(1)


TOPICS = ["piano", "volcano", "bicycle", "penguin", "satellite", "chocolate", "tornado", "violin", "glacier",
          "submarine", "cactus", "lighthouse", "telescope", "dolphin", "pyramid", "orchestra"]


def toy_lists(seed: int = 0, n: int = 12) -> list[QaList]:
    """Each question names two topics; its correct answer mentions both, the wrong ones other topics."""
    rng = random.Random(seed)
    lists = []
    for i in range(n):
        a, b = rng.sample(TOPICS, 2)
        wrong = [t for t in TOPICS if t not in (a, b)]
        rng.shuffle(wrong)
        candidates = [f"there is a {wrong[2 * k]} near the {wrong[2 * k + 1]} today" for k in range(3)]
        candidates.insert(rng.randrange(4), f"there is a {a} near the {b} today")
        lists.append(QaList(f"what about the {a} and the {b} ?", candidates,
                            [int(c.startswith(f"there is a {a} ")) for c in candidates], group=str(i)))
    return lists


def test_a_few_epochs_learn_the_toy_set(tmp_path):
    lists = toy_lists()
    data = TrainData(lists, toy_lists(seed=1, n=6))
    cfg = TrainConfig(epochs=15, batch_size=8, lr=3e-3, negatives=8, patience=50, seed=0)
    trainer = MmaicmTrainer(data, tmp_path / "m", cfg, SMALL)
    before = trainer.dev_metric()[1]
    summary = trainer.run()
    losses = [row["loss"] for row in summary["history"]]
    assert losses[-1] < losses[0] * 0.5
    scorer = load_mmaicm(tmp_path / "m", cache_size=None)
    first = [int(np.argmax(scorer.score(l.question, l.candidates))) == l.labels.index(1) for l in lists]
    assert sum(first) == len(lists)
    assert summary["best_metric"] > max(before, 0.9)
    cal = json.loads((tmp_path / "m" / "calibration.json").read_text())
    assert cal["fitted_on"] == "dev" and cal["a"] > 0


def test_resume_continues_the_epochs(tmp_path):
    data = TrainData(toy_lists(n=6), toy_lists(seed=1, n=3))
    overrides = SMALL
    first = MmaicmTrainer(data, tmp_path / "m", TrainConfig(epochs=1, batch_size=16, seed=0), overrides).run()
    assert first["epochs_done"] == 1 and (tmp_path / "m" / CHECKPOINT_FILE).exists()
    second = MmaicmTrainer(data, tmp_path / "m", TrainConfig(epochs=2, batch_size=16, seed=0), resume=True).run()
    assert second["epochs_done"] == 2 and [r["epoch"] for r in second["history"]] == [1, 2]
    with pytest.raises(TrainError, match="filters"):
        MmaicmTrainer(data, tmp_path / "m", TrainConfig(epochs=3), {"filters": 7}, resume=True)
    with pytest.raises(TrainError, match="no checkpoint"):
        MmaicmTrainer(data, tmp_path / "other", TrainConfig(epochs=3), resume=True)


def test_triples_take_hard_and_random_negatives():
    lists = toy_lists(n=4)
    triples = TripleSampler(lists, negatives=50, random_share=0.3).sample(random.Random(0))
    assert len(triples) == 4 * 50
    own = {l.question: set(l.candidates) for l in lists}
    positives = {l.question: l.candidates[l.labels.index(1)] for l in lists}
    assert all(pos == positives[q] and neg != pos for q, pos, neg in triples)
    from_other = sum(neg not in own[q] for q, _, neg in triples)
    assert 0.15 < from_other / len(triples) < 0.45


def test_kb_lists_hold_out_phrasings_and_never_use_the_same_faq_as_a_negative(tmp_path):
    kb = tmp_path / "kb.jsonl"
    faqs = {f"faq{i}": [f"question {i} variant {k}" for k in range(4)] for i in range(6)}
    with open(kb, "w") as fh:
        for faq_id, questions in faqs.items():
            for q in questions:
                fh.write(json.dumps({"faq_id": faq_id, "question": q, "answer": f"answer of {faq_id}", "tags": []}) + "\n")
    train, dev = kb_lists(kb, seed=0)
    assert dev and all(l.candidates[0] == f"answer of {l.group}" and l.labels[0] == 1 for l in dev)
    assert all(len(l.candidates) == 6 and sum(l.labels) == 1 for l in dev)
    held = {l.question for l in dev}
    assert not held & {l.question for l in train}
    assert {l.kind for l in train} == {"answer", "phrasing"}
    triples = TripleSampler(train, negatives=20, random_share=1.0).sample(random.Random(0))
    group_of_text = {c: l.group for l in train for c in l.candidates}
    group_of_question = {l.question: l.group for l in train}
    assert all(group_of_text[neg] != group_of_question[q] for q, _, neg in triples)


def test_train_mmaicm_rejects_bad_input(tmp_path):
    with pytest.raises(TrainError, match="no training data"):
        train_mmaicm(tmp_path / "m")
    with pytest.raises(TrainError, match="unknown MmaicmConfig fields"):
        train_mmaicm(tmp_path / "m", data="wikiqa", src=tmp_path, config_overrides={"nope": 1})
