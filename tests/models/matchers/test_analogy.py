"""Analogy-preserving sentence embeddings (models/matchers/analogy.py): the loss by hand, question types,
quadruples within a type, best-of-k prototype scoring, the encoder's padding, the model folder round trip,
a trained folder as a re-ranking stage (the training itself: tests/training/test_train_analogy.py)."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from models.matchers.analogy import (
    AnalogyConfig,
    AnalogyScorer,
    BiGruEncoder,
    QuadrupleSampler,
    analogy_energy,
    best_of_prototypes,
    contrastive_loss,
    load_analogy,
    question_type,
    select_prototypes,
)
from training.analogy import AnalogyData, AnalogyTrainer, TrainConfig
from training.mmaicm import QaList
from tests.helpers.analogy import ToyWords, qa_lists

torch.set_num_threads(1)


# ---------------------------------------------------------------- pieces by hand


def test_loss_by_hand():
    e = torch.tensor([0.5, 0.8, 0.1, -0.3])
    y = torch.tensor([1, 0, 0, 1])
    # 0.25 (1 - 0.5)^2; (0.8 - 0.2)^2 = 0.36; 0.1 below m = 0.2: 0; (1 + 0.3)^2 = 1.69
    assert float(contrastive_loss(e, y, 0.2)) == pytest.approx((0.25 + 0.36 + 0.0 + 1.69) / 4)
    assert float(contrastive_loss(torch.tensor([1.0, -1.0]), torch.tensor([1, 0]), 0.0)) == pytest.approx(0.0)


def test_energy_is_the_cosine_of_the_shifts():
    q_p, a_p = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]])
    q, a = torch.tensor([[3.0, 1.0]]), torch.tensor([[1.0, 1.0]])  # shift (2, 0): parallel
    assert float(analogy_energy(q_p, a_p, q, a)) == pytest.approx(1.0)
    assert float(analogy_energy(q_p, a_p, q, torch.tensor([[3.0, 0.0]]))) == pytest.approx(0.0, abs=1e-6)


def test_question_type():
    assert question_type("Who discovered prions ?") == "who"
    assert question_type("when was Leonardo da Vinci born") == "when"
    assert question_type("WHERE is Prague?") == "where"
    assert question_type("what is a prion") is None
    assert question_type("In 1990, who won ?") is None  # the first word decides (the paper's Table 2 counts)
    assert question_type("   ") is None


def test_best_of_k_prototypes():
    # prototypes' shifts (1,0) and (0,1); candidate shifts q - a: (1,0), (1,1), (-1,0)
    q_p = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    a_p = torch.zeros(2, 2)
    q = torch.tensor([1.0, 1.0])
    a = torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 1.0]])
    expected = [1.0, 1 / np.sqrt(2), 0.0]  # best of cos with each prototype
    assert best_of_prototypes(q_p, a_p, q, a).tolist() == pytest.approx(expected, abs=1e-6)


def test_quadruples_stay_within_a_type_with_correct_labels():
    lists = qa_lists() + [QaList("what is a lamp ?", ["a light"], [1])]  # untyped: never used
    protos = select_prototypes(lists, 3, seed=1)
    assert {p.type for p in protos} == {"who", "when"} and len(protos) == 6
    quads = QuadrupleSampler(lists, protos, per_answer=2).sample(random.Random(0))
    by_question = {l.question: l for l in lists}
    assert quads and sum(y for *_, y in quads) == len(quads) / 2
    for qp, _ap, q, a, y in quads:
        assert question_type(qp) == question_type(q) and qp != q
        l = by_question[q]
        assert l.labels[l.candidates.index(a)] == y
        assert "what" not in q


def test_encoder_ignores_padding():
    enc = BiGruEncoder(AnalogyConfig(hidden=8, dropout=0.0)).eval()
    x = torch.randn(1, 4, 50)
    padded = torch.cat([x, torch.randn(1, 3, 50)], dim=1)
    mask = torch.tensor([[True] * 4 + [False] * 3])
    alone = enc(x, torch.ones(1, 4, dtype=torch.bool))
    assert alone.shape == (1, 16)
    assert torch.allclose(alone, enc(padded, mask), atol=1e-6)
    assert torch.all(enc(torch.zeros(1, 2, 50), torch.zeros(1, 2, dtype=torch.bool)) == 0)


# ---------------------------------------------------------------- folder, training


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    words = ToyWords()
    protos = select_prototypes(qa_lists(), 2, seed=0)
    scorer = AnalogyScorer(BiGruEncoder(AnalogyConfig(hidden=8, margin=0.3)), words, protos, device="cpu")
    before = scorer.score("who built the lamp ?", ["erin built the lamp long ago", "the lamp was built in 1984"])
    scorer.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["architecture"] == "analogy"
    loaded = load_analogy(tmp_path / "m", device="cpu", words=words)
    assert loaded.config == scorer.config and loaded.prototypes == protos
    after = loaded.score("who built the lamp ?", ["erin built the lamp long ago", "the lamp was built in 1984"])
    assert after == pytest.approx(before, abs=1e-6)
    # the score is the best over the question type's prototypes
    protos_who = [p for p in protos if p.type == "who"]
    v = loaded.embed(["who built the lamp ?", "erin built the lamp long ago"]
                     + [p.question for p in protos_who] + [p.answer for p in protos_who])
    k = len(protos_who)
    energies = [float(analogy_energy(v[2 + i:3 + i], v[2 + k + i:3 + k + i], v[:1], v[1:2])) for i in range(k)]
    assert after[0] == pytest.approx(max(energies), abs=1e-5)


def test_single_answer_lists_get_negatives_of_their_type():
    """A KB's lists hold one answer: the negative is another question's answer of the same type."""
    lists = [QaList(f"who made thing {i} ?", [f"person {i} made it"], [1], group=f"faq{i}") for i in range(4)]
    lists += [QaList("when did it rain ?", ["it rained in 1990"], [1], group="w1"),
              QaList("when did it snow ?", ["it snowed in 1991"], [1], group="w2")]
    protos = select_prototypes(lists, 3, seed=0)
    assert all(y for *_, y in QuadrupleSampler(lists, protos, per_answer=2).sample(random.Random(0)))
    quads = QuadrupleSampler(lists, protos, per_answer=2, borrow_negatives=True).sample(random.Random(0))
    negatives = [x for x in quads if x[4] == 0]
    assert negatives and len(negatives) == len(quads) / 2
    answers = {l.question: l.candidates[0] for l in lists}
    for _qp, _ap, q, a, _y in negatives:
        assert a != answers[q]
        assert (a in {"it rained in 1990", "it snowed in 1991"}) == (question_type(q) == "when")


def test_a_trained_folder_is_a_re_ranking_stage(tmp_path):
    """FAQ_RERANKER pointing at a `faq train analogy` folder gives an AnalogyStage: probabilities from the
    folder's calibration, pooled with the first stage by the weight (0 = the first stage unchanged)."""
    from app.stages import AnalogyStage, load_stages
    from app.settings import Settings
    from index.candidates import FaqMatch

    lists = qa_lists()
    AnalogyTrainer(AnalogyData(lists, lists[:4]), tmp_path / "m", TrainConfig(prototypes=3, epochs=1, per_answer=2),
            AnalogyConfig(hidden=8), words=ToyWords(), device="cpu").run()
    settings = Settings(data_dir=tmp_path, reranker=str(tmp_path / "m"))
    (stage,) = load_stages(settings, weight=1.0)
    assert isinstance(stage, AnalogyStage) and stage.id.startswith("analogy:")
    candidates = [FaqMatch("a", "who built the lamp", "erin built the lamp", 0.9, 0.8),
                  FaqMatch("b", "when was it built", "it was built in 1984", 0.2, 0.3)]
    alone = stage.rescore("who built the lamp ?", candidates)
    assert alone.shape == (2,) and np.all((alone >= 0) & (alone <= 1))
    direct = stage.scorer.probability(stage.scorer.score("who built the lamp ?", [m.answer for m in candidates]))
    assert alone == pytest.approx(direct, abs=1e-5), "cached vectors score as the model does"
    stage.weight = 0.0
    assert stage.rescore("who built the lamp ?", candidates) == pytest.approx([0.9, 0.2], abs=1e-6)
