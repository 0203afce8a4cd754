"""Score calibration stored in each build: p(match) = sigmoid(a * cos + b).

Where (a, b) come from, in order of preference:
1. "kb_fit": Platt scaling fitted on the KB itself. Each of a sample of variants plays the user
   query against the rest of the index (the variant itself left out); the FAQs found are ranked as
   the matcher ranks them (index/pooling.py, for each pool size 1..MAX_POOL); label = whether the top
   FAQ is the variant's own, feature = its (pooled) cosine. A logistic regression, L2-regularised
   toward the prior, is fitted with a few Newton steps. Needs enough positives (FAQs with >= 2 variants).
2. "encoder": the encoder's own matching layer, `calibration=(gamma, alpha)` ->
   a = gamma, b = -gamma * alpha (MSEM).
3. "default": a = 12, b = -9, a reasonable curve for MiniLM-like cosines (0.75 -> p = 0.5).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from index.ann import AnnIndex
from models import scoring
from models.scoring import sigmoid
from index.pooling import MAX_POOL, pooled_cosine

DEFAULT_A = 12.0
DEFAULT_B = -9.0
MIN_POSITIVES = 30
MIN_NEGATIVES = 10
DEFAULT_SAMPLE = 2000
#: L2 strength pulling (a, b) toward the prior; small next to the hundreds of examples a fit uses
DEFAULT_L2 = 1.0


@dataclass(frozen=True)
class Calibration:
    """p(match) = sigmoid(a * cos + b)."""

    a: float
    b: float
    source: str = "manifest"  # "kb_fit" | "encoder" | "default" when fitted; "manifest" when read back

    def prob(self, cos: np.ndarray | float) -> np.ndarray:
        return sigmoid(self.a * np.asarray(cos, dtype=np.float64) + self.b)

    def probability(self, cosine: float) -> float:
        return float(self.prob(cosine))


def calibration_for(manifest: dict | None, encoder: object = None, pool: int = 1) -> Calibration:
    """A build's calibration from its manifest (every build writes one), the curve fitted for FAQ scores
    pooled over `pool` phrasings when the build has it; for a manifest without one, the prior a build
    would fall back to (the encoder's matching layer, else the MiniLM-like default)."""
    cal = (manifest or {}).get("calibration")
    if isinstance(cal, dict) and pool > 1:
        pooled = (cal.get("pooled") or {}).get(str(pool))
        cal = pooled if isinstance(pooled, dict) else cal  # builds before pooled curves: the best-phrasing one
    if isinstance(cal, dict) and cal.get("a") is not None and cal.get("b") is not None:
        return Calibration(float(cal["a"]), float(cal["b"]))
    return prior_calibration(encoder)


def prior_calibration(encoder: object) -> Calibration:
    """The encoder's matching-layer calibration when it has one, else the MiniLM-like default."""
    cal = getattr(encoder, "calibration", None)
    if cal is not None:
        gamma, alpha = (float(x) for x in cal)
        if not (math.isfinite(gamma) and math.isfinite(alpha)) or gamma <= 0:
            raise ValueError(f"encoder calibration (gamma, alpha) = {cal!r}: gamma must be a positive finite number")
        return Calibration(a=gamma, b=-gamma * alpha, source="encoder")
    return Calibration(a=DEFAULT_A, b=DEFAULT_B, source="default")


def fit_platt(cos: np.ndarray, labels: np.ndarray, prior: Calibration, l2: float = DEFAULT_L2) -> tuple[float, float]:
    """Platt scaling of cosines, L2-regularised toward `prior` (models/scoring.py)."""
    return scoring.fit_platt(cos, labels, prior=(prior.a, prior.b), l2=l2)


def nearest_faq(
    index: AnnIndex, vectors: np.ndarray, faq_ids: Sequence[str], rows: np.ndarray, search_k: int = -1,
    pools: Sequence[int] = (1,),
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each sampled item plays a query against the rest of the KB: per pool size, the pooled cosine of
    the best other FAQ-or-its-own-FAQ (index/pooling.py, as the matcher ranks) and whether that FAQ is
    the item's own. Pool 1 = the cosine of its nearest other item and whether that one shares its FAQ."""
    counts = Counter(faq_ids)
    depth = 4 * max(pools) + 1  # the matcher's retrieval depth per pooled FAQ, plus the item itself
    out = {p: (np.empty(len(rows), dtype=np.float64), np.zeros(len(rows), dtype=bool)) for p in pools}
    for j, row in enumerate(rows):
        items, cosines = index.search_one(vectors[row], depth, search_k)
        # normally items[0] is the query itself; skip it wherever it appears (ties can reorder)
        others = [(faq_ids[i], float(c)) for i, c in zip(items, cosines) if i != row]
        if not others:  # fewer than 2 items in the index
            for cos, _ in out.values():
                cos[j] = np.nan
            continue
        per_faq: dict[str, list[float]] = {}
        for f, c in others:
            per_faq.setdefault(f, []).append(c)
        floor = min(c for _, c in others)
        own = faq_ids[row]
        for pool, (cos, same) in out.items():
            # the query is no longer a phrasing of its own FAQ: one fewer there
            scored = {f: pooled_cosine(cs, counts[f] - (f == own), pool, floor) for f, cs in per_faq.items()}
            best = min(scored, key=lambda f: (-scored[f], f))  # the matcher's order: score, then faq_id
            cos[j], same[j] = scored[best], best == own
    return {p: (cos[np.isfinite(cos)], same[np.isfinite(cos)]) for p, (cos, same) in out.items()}


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
    """The `calibration` block of a manifest: {a, b, source, n_examples, n_positive, prior} for a FAQ
    scored by its best phrasing, and `pooled`: {"2": {a, b, source, ...}, ...} for the pooled scores of
    `FAQ_POOL_VARIANTS` 2..MAX_POOL (a mean of several cosines sits lower than their max, so it needs
    its own curve for a threshold of 0.5 to keep meaning "more likely right than wrong")."""
    prior = prior_calibration(encoder)
    n = len(faq_ids)
    if len(vectors) != n:
        raise ValueError(f"vectors ({len(vectors)}) and faq_ids ({n}) must have the same length")
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=min(sample, n), replace=False)) if n else np.zeros(0, dtype=np.int64)
    pools = tuple(range(1, MAX_POOL + 1))
    examples = nearest_faq(index, vectors, faq_ids, rows, search_k, pools)
    fits = {p: _fit(*examples[p], prior, min_positives, min_negatives, l2) for p in pools}
    result = fits[1]
    result["prior"] = asdict(prior)
    result["pooled"] = {str(p): fits[p] for p in pools[1:]}
    return result


def _fit(cos: np.ndarray, same: np.ndarray, prior: Calibration, min_positives: int, min_negatives: int,
         l2: float) -> dict:
    n_pos, n_neg = int(same.sum()), int(len(same) - same.sum())
    result: dict = {"n_examples": int(len(same)), "n_positive": n_pos}
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
