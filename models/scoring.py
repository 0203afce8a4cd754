"""Scores into probabilities and decisions: the one sigmoid, logit, Platt fit and threshold search that
every layer uses (the builds' cosine calibration, the re-ranker's logit calibration and fusion, the
evaluations' answer thresholds and pair classifiers).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def sigmoid(z: np.ndarray | float) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free form of 1 / (1 + exp(-z))


def logit(p: np.ndarray | float, eps: float = 1e-7) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1.0 - eps)
    return np.log(p) - np.log1p(-p)


def fit_platt(x: np.ndarray, labels: np.ndarray, prior: tuple[float, float] = (1.0, 0.0), l2: float = 0.0,
              max_steps: int = 50, tol: float = 1e-8) -> tuple[float, float]:
    """(a, b) of p = sigmoid(a * x + b) by Newton's method, minimising the log loss
    + l2/2 * ||(a, b) - prior||^2 (l2 = 0: plain Platt scaling, started from `prior`).

    Targets are Platt's smoothed labels ((N+ + 1)/(N+ + 2) and 1/(N- + 2)) so a separable sample
    cannot push the slope to infinity.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"scores and labels must be 1-d and the same length, got {x.shape} and {y.shape}")
    n_pos = float(y.sum())
    n_neg = float(len(y) - n_pos)
    target = np.where(y > 0.5, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    features = np.stack([x, np.ones_like(x)], axis=1)
    w0 = np.array(prior, dtype=np.float64)
    w = w0.copy()
    ridge = max(l2, 1e-9)  # keeps the Hessian invertible when every x is the same

    def loss(v: np.ndarray) -> float:
        z = features @ v  # log loss written with logaddexp: no overflow for large |z|
        return float(np.sum(target * np.logaddexp(0.0, -z) + (1.0 - target) * np.logaddexp(0.0, z))
                     + 0.5 * l2 * np.sum((v - w0) ** 2))

    current = loss(w)
    for _ in range(max_steps):
        p = sigmoid(features @ w)
        grad = features.T @ (p - target) + l2 * (w - w0)
        hess = (features * (p * (1.0 - p))[:, None]).T @ features + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        # damped Newton: scores in a narrow band start far from the optimum, where a full step can overshoot
        # into a region of vanishing curvature and diverge; halve until the loss goes down
        scale = 1.0
        while scale > 1e-6 and loss(w - scale * step) > current:
            scale *= 0.5
        w = w - scale * step
        current = loss(w)
        if np.max(np.abs(scale * step)) < tol:
            break
    return float(w[0]), float(w[1])


def best_threshold(scores: Sequence[float] | np.ndarray, positive: Sequence[bool] | np.ndarray,
                   objective: str = "accuracy", n_relevant: int | None = None) -> tuple[float, float]:
    """The threshold t for the decision `score >= t` that maximises `objective` -> (t, value).

    - "accuracy": share of items decided right (`positive` = the item should pass).
    - "f1": 2 TP / (passed + n_relevant), `positive` = a pass would be correct, `n_relevant` = how many
      items should pass in all (default: the positives here; an answer threshold counts the answerable
      queries, some of which may have no score at all).

    Only the order of the scores matters, so the search is exact: every cut "pass the m best" at a change
    of score. The threshold returned sits midway between the lowest passing score and the next lower
    one (robust to small score shifts on new data); ties go to the higher threshold (fewer passes).
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(positive, dtype=bool)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores and labels must be 1-d and the same length, got {s.shape} and {y.shape}")
    if len(s) == 0:
        return 1.0, 0.0
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    n = len(s)
    passed = np.arange(n + 1, dtype=np.float64)  # cut m: the m best pass
    tp = np.concatenate([[0.0], np.cumsum(y, dtype=np.float64)])
    if objective == "accuracy":
        value = (tp + (n - y.sum()) - (passed - tp)) / n
    elif objective == "f1":
        relevant = float(y.sum() if n_relevant is None else n_relevant)
        with np.errstate(invalid="ignore", divide="ignore"):
            value = np.where(passed + relevant > 0, 2.0 * tp / (passed + relevant), 0.0)
    else:
        raise ValueError(f"objective must be 'accuracy' or 'f1', got {objective!r}")
    # a cut is only possible between different scores (or before the first / after the last)
    cuttable = np.ones(n + 1, dtype=bool)
    cuttable[1:n] = s[:-1] > s[1:]
    candidates = np.flatnonzero(cuttable)
    best_value = float(value[candidates].max())
    m = int(candidates[np.flatnonzero(np.isclose(value[candidates], best_value, rtol=0, atol=1e-12))[0]])
    if m == 0:
        threshold = float(s[0]) + 1e-6  # nothing passes
    elif m == n:
        threshold = float(s[-1])
    else:
        threshold = float((s[m - 1] + s[m]) / 2.0)
    return threshold, best_value


def pool(p_cross: np.ndarray, p_first: np.ndarray, weight: float) -> np.ndarray:
    """Logarithmic opinion pool of two probabilities of the same event (a re-ranking stage's and the score
    before it): sigmoid(w*logit(a) + (1-w)*logit(b))."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"fusion weight must be in 0..1, got {weight}")
    z = weight * logit(p_cross) + (1.0 - weight) * logit(p_first)
    return sigmoid(z).astype(np.float32)
