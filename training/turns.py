"""The turn model's fit (index/turns.py `TurnModel`): a conditional logit over each labelled turn's
candidates with a null choice, L2-penalised, by L-BFGS. `faq eval turns fit` collects the turns
through the served pipeline and calls it."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import minimize

from index.turns import DESIGN, TurnModel, design
from training.loop import TrainError


def _loss(theta: np.ndarray, groups: Sequence[tuple[np.ndarray, int]], l2: float) -> tuple[float, np.ndarray]:
    w, b = theta[:-1], theta[-1]
    total, grad = 0.0, np.zeros_like(theta)
    for z, right in groups:
        u = z @ w + b
        top = max(float(u.max()), 0.0)
        e = np.exp(u - top)
        norm = np.exp(-top) + e.sum()
        p = e / norm
        chosen = np.zeros(len(u))
        if right >= 0:
            chosen[right] = 1.0
            total -= u[right] - top - np.log(norm)
        else:  # out of scope, or the right FAQ is not among the candidates: the null choice
            total -= -top - np.log(norm)
        d = p - chosen
        grad[:-1] += z.T @ d
        grad[-1] += d.sum()
    total += l2 / 2 * float(w @ w)
    grad[:-1] += l2 * w
    return total, grad


def fit_turn_model(turns: Sequence[tuple[np.ndarray, int]], l2: float = 0.1, meta: dict | None = None) -> TurnModel:
    """`turns`: (FEATURES rows of its candidates, the index of the right one or -1) per labelled turn."""
    groups = [(design(x), right) for x, right in turns if len(x)]
    if not groups:
        raise TrainError("no labelled turn with candidates to fit the turn model on")
    result = minimize(_loss, np.zeros(len(DESIGN) + 1), args=(groups, l2), jac=True, method="L-BFGS-B")
    return TurnModel(result.x[:-1], float(result.x[-1]), {**(meta or {}), "l2": l2, "converged": bool(result.success)})
