"""The turn model's candidates and features (index/turns.py), its conditional logit with a null choice, and
the shipped model file."""
from __future__ import annotations

import numpy as np

from index.turns import DESIGN, FEATURES, MODEL_FILE, TurnModel, candidates, design, load_turn_model, query_cues


def test_query_cues_see_short_pointing_back_and_continuing_turns():
    assert query_cues("and on weekends?") == (1.0, 0.0, 1.0)
    assert query_cues("how long does that take") == (1.0, 1.0, 0.0)
    assert query_cues("what about the yearly plan") == (1.0, 0.0, 1.0)
    assert query_cues("can I change the email address on my account please") == (0.0, 0.0, 0.0)


def test_candidates_are_the_querys_own_the_previous_faqs_neighbours_and_it_within_the_filter():
    ids = ["a", "b", "c", "prev", "hidden", "far"]
    answer_cos = np.array([0.9, 0.2, 0.1, 0.3, 0.5, 0.0])
    prev_sim = np.array([0.1, 0.8, 0.7, 1.0, 0.9, -0.2])
    found = candidates("and that?", "prev", {"a": 0.6, "far": 0.01}, ids, answer_cos, prev_sim,
                       allowed=frozenset(ids) - {"c"}, shut=frozenset({"hidden"}), prompted=frozenset({"b", "gone"}))
    assert found.faq_ids[:2] == ["a", "far"] and set(found.faq_ids) == {"a", "far", "prev", "b"}
    assert dict(zip(found.faq_ids, found.x[:, FEATURES.index("prompted")])) == {"a": 0, "far": 0, "prev": 0, "b": 1}
    row = dict(zip(FEATURES, found.x[found.faq_ids.index("prev")]))
    assert row["is_prev"] == 1.0 and row["prev_sim"] == 1.0 and row["alone"] == 0.0 and row["top_alone"] == 0.6
    assert design(found.x).shape == (4, len(DESIGN))


def test_probabilities_of_a_turn_leave_room_for_none():
    model = TurnModel(np.zeros(len(DESIGN)), -2.0, {})
    x = np.zeros((3, len(FEATURES)))
    p = model.prob(x)
    assert np.allclose(p, np.exp(-2) / (1 + 3 * np.exp(-2))) and p.sum() < 1
    assert model.prob(np.zeros((0, len(FEATURES)))).shape == (0,)


def test_the_shipped_model_loads_and_trusts_the_previous_faq_for_an_elliptical_weak_turn(tmp_path):
    model = load_turn_model()
    assert model is not None and MODEL_FILE.is_file()
    # "does that include postage?" after the refund FAQ: the query alone is weak, so the previous FAQ wins
    ids, answer_cos, prev_sim = ["refund", "shipping"], np.array([0.35, 0.4]), np.array([1.0, 0.3])
    weak = candidates("does that include postage?", "refund", {"shipping": 0.15, "refund": 0.1}, ids, answer_cos,
                      prev_sim)
    p = dict(zip(weak.faq_ids, model.prob(weak.x)))
    assert p["refund"] > p["shipping"]
    # a self-contained question the query alone is sure of keeps its own answer
    strong = candidates("how long does shipping to Ireland take", "refund", {"shipping": 0.9, "refund": 0.02}, ids,
                        np.array([0.2, 0.8]), prev_sim)
    p = dict(zip(strong.faq_ids, model.prob(strong.x)))
    assert p["shipping"] > 0.5 > p["refund"]
    model.save(tmp_path / "m.json")
    again = load_turn_model(tmp_path / "m.json")
    assert np.allclose(again.coef, model.coef, atol=1e-5)
