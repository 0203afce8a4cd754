"""models/scoring.py: the one sigmoid / logit / Platt fit / threshold search every layer uses."""
from __future__ import annotations

import numpy as np
import pytest

from models.scoring import best_threshold, fit_platt, logit, sigmoid


def test_sigmoid_and_logit_are_inverse_and_never_overflow():
    z = np.array([-800.0, -3.0, 0.0, 2.5, 800.0])
    p = sigmoid(z)
    assert p[0] == 0.0 and p[-1] == 1.0 and p[2] == 0.5
    np.testing.assert_allclose(logit(sigmoid(z[1:4])), z[1:4], atol=1e-9)
    assert np.isfinite(logit(np.array([0.0, 1.0]))).all()  # clipped, not infinite


def test_platt_recovers_a_curve_and_a_strong_prior_holds():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 4000)
    y = (rng.uniform(size=x.size) < sigmoid(6.0 * x - 1.0)).astype(float)
    a, b = fit_platt(x, y)
    assert abs(a - 6.0) < 0.6 and abs(b + 1.0) < 0.2
    a, b = fit_platt(np.array([0.9, 0.95]), np.array([1.0, 1.0]), prior=(12.0, -9.0), l2=10.0)
    assert abs(a - 12.0) < 1.0 and abs(b + 9.0) < 1.0  # two examples barely move a held prior
    with pytest.raises(ValueError, match="same length"):
        fit_platt(np.zeros(3), np.zeros(2))


def test_platt_converges_from_a_distant_prior_on_a_narrow_band_of_scores():
    # mixed phrasing/answer scores sit in a band of ~0.1 far from the prior's midpoint (0.75): an undamped
    # Newton step overshoots there and walks off to a negative slope
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0.55, 0.05, 390), rng.normal(0.51, 0.05, 160)])
    y = np.r_[np.ones(390), np.zeros(160)]
    a, b = fit_platt(x, y, prior=(12.0, -9.0), l2=1.0)
    assert a > 0
    p = sigmoid(a * x + b)
    assert abs(p.mean() - y.mean()) < 0.02  # calibrated on average


def test_threshold_search_for_accuracy_and_for_answer_f1():
    scores = np.array([0.9, 0.8, 0.8, 0.4, 0.2])
    right = np.array([True, True, False, False, False])
    t, acc = best_threshold(scores, right)
    # the tie at 0.8 cannot be split: pass 1 (acc 0.8) beats pass 3 (0.8 too): ties go to the higher threshold
    assert acc == pytest.approx(0.8) and 0.8 < t < 0.9
    # F1 with 4 answerable queries, one of them unscored: the top 1 gives 2*1 / (1 + 4), the top 3 2*2 / (3 + 4)
    t, f1 = best_threshold(scores, right, objective="f1", n_relevant=4)
    assert f1 == pytest.approx(4 / 7) and 0.4 < t < 0.8
    t, f1 = best_threshold(scores, np.zeros(5, dtype=bool), objective="f1", n_relevant=3)
    assert f1 == 0.0 and t > 0.9  # answering never helps: nothing passes
    assert best_threshold([], []) == (1.0, 0.0)
    with pytest.raises(ValueError, match="objective"):
        best_threshold(scores, right, objective="auc")
