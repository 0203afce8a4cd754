"""Scores into probabilities and decisions: the one sigmoid, logit, Platt fit and threshold search that
every layer uses (the builds' cosine calibration, the re-ranker's logit calibration and fusion, the
evaluations' answer thresholds and pair classifiers), and the decision model's logistic maths (its
regression, recalibration and a re-ranking stage's stack on top of it).

The decision model's functions keep their own clipped forms (`bounded_sigmoid`, `clipped_logit`): the
shipped model and every build's stored table were fitted and replayed with them, and `sigmoid` / `logit`
differ from them in the last bits.
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


def bounded_sigmoid(z: np.ndarray | float, bound: float = 30.0) -> np.ndarray:
    """1 / (1 + exp(-z)) with z clipped to +-bound: the decision model's form."""
    return 1.0 / (1.0 + np.exp(-np.clip(z, -bound, bound)))


def clipped_logit(p: np.ndarray | float, eps: float = 1e-6) -> np.ndarray:
    """log(p / (1 - p)) with p clipped to [eps, 1 - eps]: the decision model's form."""
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps)
    return np.log(p / (1 - p))


def fit_logistic(Z: np.ndarray, y: np.ndarray, l2: float, start: np.ndarray, *, weight: np.ndarray | None = None,
                 centre: np.ndarray | None = None, intercept_penalised: bool = False) -> np.ndarray:
    """[coefficients..., intercept] minimising the (weighted) log loss + l2/2 * ||v - centre||^2 over the
    coefficients (and the intercept when `intercept_penalised`), by L-BFGS from `start`. The one fit behind
    the cross-KB decision model, its refit on a KB's labels and a stage's stack (`fit_stack`)."""
    from scipy.optimize import minimize

    Z = np.asarray(Z, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)
    c = np.zeros(Z.shape[1] + 1) if centre is None else np.asarray(centre, dtype=np.float64)
    mask = np.append(np.ones(Z.shape[1]), 1.0 if intercept_penalised else 0.0)

    def loss(v: np.ndarray) -> tuple[float, np.ndarray]:
        p = bounded_sigmoid(Z @ v[:-1] + v[-1])
        d = (v - c) * mask
        ll = -np.sum(w * (y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))) + 0.5 * l2 * d @ d
        g = w * (p - y)
        return ll, np.append(Z.T @ g, g.sum()) + l2 * d

    return minimize(loss, np.asarray(start, dtype=np.float64), jac=True, method="L-BFGS-B").x


def fit_weighted_platt(z: np.ndarray, right: np.ndarray, weight: np.ndarray) -> tuple[float, float]:
    """(a, b) of p = sigmoid(a * z + b) minimising the weighted log loss on the labels as they are (no
    smoothed targets, unlike `fit_platt`), by Nelder-Mead from (1, 0): the decision model's recalibration
    of its top answer's logit."""
    from scipy.optimize import minimize

    def loss(v: np.ndarray) -> float:
        t = v[0] * z + v[1]
        return float(np.sum(weight * (right * np.logaddexp(0, -t) + (1 - right) * np.logaddexp(0, t))))

    a, b = minimize(loss, np.array([1.0, 0.0]), method="Nelder-Mead").x
    return float(a), float(b)


def stacked(coefs: Sequence[float], p_stage: np.ndarray, p_model: np.ndarray) -> np.ndarray:
    """P(right answer) = sigmoid(a * logit p_stage + b * logit p_model + c): a re-ranking stage's
    probability stacked on the decision model's."""
    a, b, c = (float(x) for x in coefs)
    return bounded_sigmoid(a * clipped_logit(p_stage) + b * clipped_logit(p_model) + c)


def fit_stack(p_stage: np.ndarray, p_model: np.ndarray, right: np.ndarray, l2: float = 1.0) -> tuple[float, float, float]:
    """(a, b, c) of `stacked` by L2-regularised logistic regression on labelled candidates: how much the
    stage's probability adds to the decision model's on this KB (a convex pool of the two is
    under-confident, docs/results.md)."""
    y = np.asarray(right, dtype=np.float64)
    if len(y) == 0 or y.min() == y.max():
        raise ValueError("the stage needs labelled candidates that are right and wrong to be fitted")
    v = fit_logistic(np.column_stack([clipped_logit(p_stage), clipped_logit(p_model)]), y, l2, np.array([0.5, 0.5, 0.0]))
    return float(v[0]), float(v[1]), float(v[2])
