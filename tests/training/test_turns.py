"""The turn model's fit: on turns where an elliptical weak query means the previous FAQ and a confident one
its own answer, it learns both, and an out-of-scope turn lowers every candidate."""
from __future__ import annotations

import numpy as np
import pytest

from index.turns import FEATURES
from training.loop import TrainError
from training.turns import fit_turn_model


def turn(elliptical: bool, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    # two candidates: 0 = the query's own best, 1 = the previous FAQ
    top = rng.uniform(0.05, 0.3) if elliptical else rng.uniform(0.6, 0.95)
    own = [top, rng.uniform(0.3, 0.6), rng.uniform(0.1, 0.5), 0.0, top, float(elliptical), float(elliptical), 0.0, 0.0]
    prev = [rng.uniform(0.0, 0.05), rng.uniform(0.2, 0.4), 1.0, 1.0, top, float(elliptical), float(elliptical), 0.0,
            0.0]
    return np.array([own, prev]), 1 if elliptical else 0


def test_it_learns_when_to_trust_the_previous_faq():
    rng = np.random.default_rng(0)
    data = [turn(i % 2 == 0, rng) for i in range(200)]
    model = fit_turn_model(data, l2=0.1)
    assert model.meta["converged"]
    for elliptical in (True, False):
        x, right = turn(elliptical, rng)
        assert int(np.argmax(model.prob(x))) == right
    assert len(model.coef) > len(FEATURES) - 1


def test_no_turn_is_refused():
    with pytest.raises(TrainError):
        fit_turn_model([(np.zeros((0, len(FEATURES))), -1)])
