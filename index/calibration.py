"""Score calibration stored in each build: p(match) = sigmoid(a * cos + b).

Where (a, b) come from, in order of preference:
1. "kb_fit": Platt scaling fitted on the KB itself. For a sample of variants we search the index
   for the nearest *other* variant (a held-out paraphrase plays the user query); label = whether it
   belongs to the same FAQ, feature = its cosine. A logistic regression, L2-regularised toward the
   prior, is fitted with a few Newton steps. Needs enough positives (FAQs with >= 2 variants).
2. "encoder": the encoder's own matching layer, `calibration=(gamma, alpha)` ->
   a = gamma, b = -gamma * alpha (MSEM).
3. "default": a = 12, b = -9, a reasonable curve for MiniLM-like cosines (0.75 -> p = 0.5).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from index.ann import AnnIndex

DEFAULT_A = 12.0
DEFAULT_B = -9.0
MIN_POSITIVES = 30
MIN_NEGATIVES = 10
DEFAULT_SAMPLE = 2000
#: L2 strength pulling (a, b) toward the prior; small next to the hundreds of examples a fit uses
DEFAULT_L2 = 1.0


@dataclass(frozen=True)
class Calibration:
    a: float
    b: float
    source: str  # "kb_fit" | "encoder" | "default"

    def prob(self, cos: np.ndarray | float) -> np.ndarray:
        return sigmoid(self.a * np.asarray(cos, dtype=np.float64) + self.b)


def sigmoid(z: np.ndarray | float) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free form of 1 / (1 + exp(-z))


def prior_calibration(encoder: object) -> Calibration:
    """The encoder's matching-layer calibration when it has one, else the MiniLM-like default."""
    cal = getattr(encoder, "calibration", None)
    if cal is not None:
        gamma, alpha = (float(x) for x in cal)
        if not (math.isfinite(gamma) and math.isfinite(alpha)) or gamma <= 0:
            raise ValueError(f"encoder calibration (gamma, alpha) = {cal!r}: gamma must be a positive finite number")
        return Calibration(a=gamma, b=-gamma * alpha, source="encoder")
    return Calibration(a=DEFAULT_A, b=DEFAULT_B, source="default")


def fit_platt(
    cos: np.ndarray, labels: np.ndarray, prior: Calibration, l2: float = DEFAULT_L2, max_steps: int = 25, tol: float = 1e-8
) -> tuple[float, float]:
    """Logistic regression p = sigmoid(a * cos + b) by Newton's method, minimising
    NLL + l2/2 * ||(a, b) - (a0, b0)||^2.

    Targets are Platt's smoothed labels ((N+ + 1)/(N+ + 2) and 1/(N- + 2)) so a separable sample
    cannot push the slope to infinity.
    """
    x = np.asarray(cos, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"cos and labels must be 1-d and the same length, got {x.shape} and {y.shape}")
    n_pos = float(y.sum())
    n_neg = float(len(y) - n_pos)
    target = np.where(y > 0.5, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    features = np.stack([x, np.ones_like(x)], axis=1)
    w0 = np.array([prior.a, prior.b], dtype=np.float64)
    w = w0.copy()
    for _ in range(max_steps):
        p = sigmoid(features @ w)
        grad = features.T @ (p - target) + l2 * (w - w0)
        hess = (features * (p * (1.0 - p))[:, None]).T @ features + l2 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < tol:
            break
    return float(w[0]), float(w[1])


def nearest_other(
    index: AnnIndex, vectors: np.ndarray, faq_ids: Sequence[str], rows: np.ndarray, search_k: int = -1
) -> tuple[np.ndarray, np.ndarray]:
    """For each sampled item: cosine of its nearest other item and whether that one shares its FAQ."""
    cos = np.empty(len(rows), dtype=np.float64)
    same = np.empty(len(rows), dtype=bool)
    for out, row in enumerate(rows):
        items, cosines = index.search_one(vectors[row], 2, search_k)
        # normally items[0] is the query itself; skip it wherever it appears (ties can reorder)
        others = [(i, c) for i, c in zip(items, cosines) if i != row]
        if not others:  # fewer than 2 items in the index
            cos[out], same[out] = np.nan, False
            continue
        item, c = others[0]
        cos[out] = c
        same[out] = faq_ids[item] == faq_ids[row]
    keep = np.isfinite(cos)
    return cos[keep], same[keep]


def calibrate(
    index: AnnIndex,
    vectors: np.ndarray,
    faq_ids: Sequence[str],
    encoder: object,
    search_k: int = -1,
    sample: int = DEFAULT_SAMPLE,
    min_positives: int = MIN_POSITIVES,
    min_negatives: int = MIN_NEGATIVES,
    l2: float = DEFAULT_L2,
    seed: int = 0,
) -> dict:
    """The `calibration` block of a manifest: {a, b, source, n_examples, n_positive, prior}."""
    prior = prior_calibration(encoder)
    n = len(faq_ids)
    if len(vectors) != n:
        raise ValueError(f"vectors ({len(vectors)}) and faq_ids ({n}) must have the same length")
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=min(sample, n), replace=False)) if n else np.zeros(0, dtype=np.int64)
    cos, same = nearest_other(index, vectors, faq_ids, rows, search_k)
    n_pos, n_neg = int(same.sum()), int(len(same) - same.sum())
    result = {"n_examples": int(len(same)), "n_positive": n_pos, "prior": asdict(prior)}
    if n_pos >= min_positives and n_neg >= min_negatives:
        a, b = fit_platt(cos, same.astype(np.float64), prior, l2=l2)
        if a > 0:
            result.update(a=a, b=b, source="kb_fit")
            return result
        # a non-increasing curve means the KB says nothing useful about cosines: keep the prior
        result.update(a=prior.a, b=prior.b, source=prior.source, reason=f"fitted slope a={a:.3f} <= 0")
    else:
        result.update(
            a=prior.a, b=prior.b, source=prior.source,
            reason=f"too few examples to fit ({n_pos} positive, {n_neg} negative; need {min_positives}/{min_negatives})",
        )
    return result
