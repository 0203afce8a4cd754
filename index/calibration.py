"""Score calibration stored in each build: p(match) = sigmoid(a * cos + b), a models/calibration.py
`Calibration` (the class every calibrated score of the project uses; a build's curves are stored as
its {a, b, source} dicts).

Where (a, b) come from, in order of preference:
1. "kb_fit": Platt scaling fitted on the KB itself. Each of a sample of variants plays the user
   query against the rest of the index (the variant itself left out); the FAQs found are ranked as
   the matcher ranks them (index/pooling.py, for each pool size 1..MAX_POOL); label = whether the top
   FAQ is the variant's own, feature = its (pooled) cosine. A logistic regression, L2-regularised
   toward the prior, is fitted with a few Newton steps. Needs enough positives (FAQs with >= 2 variants).
   With answer evidence (index/answers.py) the feature is the mixed score, one curve per weight.
2. "encoder": the encoder's own matching layer, `calibration=(gamma, alpha)` ->
   a = gamma, b = -gamma * alpha (MSEM).
3. "default": a = 12, b = -9, a reasonable curve for MiniLM-like cosines (0.75 -> p = 0.5).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Sequence

import numpy as np

from index.ann import AnnIndex
from index.answers import ANSWER_RECALL, WEIGHT_GRID, AnswerVectors, combine, nearest_weight
from models import scoring
from models.calibration import Calibration
from models.scoring import sigmoid  # noqa: F401  (read from here by the tests)
from index.pooling import MAX_POOL, pooled_cosine

DEFAULT_A = 12.0
DEFAULT_B = -9.0
MIN_POSITIVES = 30
MIN_NEGATIVES = 10
DEFAULT_SAMPLE = 2000
#: L2 strength pulling (a, b) toward the prior; small next to the hundreds of examples a fit uses
DEFAULT_L2 = 1.0


def calibration_for(manifest: dict | None, encoder: object = None, pool: int = 1, answer_weight: float = 0.0) -> Calibration:
    """A build's calibration from its manifest (every build writes one): the curve fitted for FAQ scores
    pooled over `pool` phrasings and, when the build encoded answers and `answer_weight` > 0, mixed with
    the answer cosine at the nearest calibrated weight (index/answers.py); for a manifest without one,
    the prior a build would fall back to (the encoder's matching layer, else the MiniLM-like default)."""
    cal = (manifest or {}).get("calibration")
    if isinstance(cal, dict) and answer_weight > 0 and isinstance(cal.get("answer_weights"), dict):
        by_pool = cal["answer_weights"].get(f"{nearest_weight(answer_weight):.2f}")
        if isinstance(by_pool, dict) and isinstance(by_pool.get(str(pool)), dict):
            cal = by_pool[str(pool)]
    elif isinstance(cal, dict) and pool > 1:
        pooled = (cal.get("pooled") or {}).get(str(pool))
        cal = pooled if isinstance(pooled, dict) else cal  # builds before pooled curves: the best-phrasing one
    if isinstance(cal, dict) and cal.get("a") is not None and cal.get("b") is not None:
        return Calibration(float(cal["a"]), float(cal["b"]), source="manifest")
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
    pools: Sequence[int] = (1,), answers: AnswerVectors | None = None, weights: Sequence[float] = (0.0,),
    queries: np.ndarray | None = None,
) -> dict[tuple[int, float], tuple[np.ndarray, np.ndarray]]:
    """Each sampled item plays a query against the rest of the KB, ranked as the matcher ranks
    (index/pooling.py, index/answers.py): per (pool size, answer weight), the score of the best
    other-FAQ-or-its-own-FAQ and whether that FAQ is the item's own. Pool 1, weight 0 = the cosine of
    its nearest other item and whether that one shares its FAQ. With `answers`, the FAQs of the best
    answers are candidates too (their phrasings scored exactly), as the matcher recalls them; the
    item's own FAQ is a candidate only through its other phrasings, as a FAQ always has one."""
    counts = Counter(faq_ids)
    depth = 4 * max(pools) + 1  # the matcher's retrieval depth per pooled FAQ, plus the item itself
    rows_of: dict[str, list[int]] = {}
    if answers is not None:
        for i, f in enumerate(faq_ids):
            rows_of.setdefault(f, []).append(i)
    keys = [(p, w) for p in pools for w in weights]
    out = {key: (np.empty(len(rows), dtype=np.float64), np.zeros(len(rows), dtype=bool)) for key in keys}
    for j, row in enumerate(rows):
        asked = vectors[row] if queries is None else queries[j]  # the item as the query side encodes it
        items, cosines = index.search_one(asked, depth, search_k)
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
        answer_cos: dict[str, float] = {}
        if answers is not None and len(answers):
            cos_row = answers.cosines(asked[None, :])[0]
            for f in answers.top(cos_row, ANSWER_RECALL):
                if f not in per_faq:
                    others_rows = [r for r in rows_of.get(f, []) if r != row]
                    if others_rows:  # scored exactly: all its phrasings are known
                        per_faq[f] = (vectors[others_rows] @ asked).astype(np.float64).tolist()
            answer_cos = {f: float(cos_row[answers.row_of[f]]) for f in per_faq if f in answers.row_of}
        pooled_by = {pool: {f: pooled_cosine(cs, counts[f] - (f == own), pool, floor) for f, cs in per_faq.items()}
                     for pool in pools}  # the query is no longer a phrasing of its own FAQ: one fewer there
        for (pool, weight), (cos, same) in out.items():
            scored = {f: combine(c, answer_cos.get(f), weight) for f, c in pooled_by[pool].items()}
            best = min(scored, key=lambda f: (-scored[f], f))  # the matcher's order: score, then faq_id
            cos[j], same[j] = scored[best], best == own
    return {key: (cos[np.isfinite(cos)], same[np.isfinite(cos)]) for key, (cos, same) in out.items()}


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
    answers: AnswerVectors | None = None,
    query_encode: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict:
    """The `calibration` block of a manifest: {a, b, source, n_examples, n_positive, prior} for a FAQ
    scored by its best phrasing, and `pooled`: {"2": {a, b, source, ...}, ...} for the pooled scores of
    `FAQ_POOL_VARIANTS` 2..MAX_POOL (a mean of several cosines sits lower than their max, so it needs
    its own curve for a threshold of 0.5 to keep meaning "more likely right than wrong"). With `answers`,
    also `answer_weights`: {"0.05": {"1": {...}, "2": {...}, ...}, ...}, a curve per calibrated answer
    weight (index/answers.py WEIGHT_GRID) and pool size, fitted on the mixed score."""
    prior = prior_calibration(encoder)
    n = len(faq_ids)
    if len(vectors) != n:
        raise ValueError(f"vectors ({len(vectors)}) and faq_ids ({n}) must have the same length")
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=min(sample, n), replace=False)) if n else np.zeros(0, dtype=np.int64)
    pools = tuple(range(1, MAX_POOL + 1))
    weights = WEIGHT_GRID if answers is not None and len(answers) else (0.0,)
    queries = None if query_encode is None or not len(rows) else np.asarray(query_encode(rows), dtype=np.float32)
    examples = nearest_faq(index, vectors, faq_ids, rows, search_k, pools, answers=answers, weights=weights,
                           queries=queries)
    own_answer = own_answer_cosine(vectors, faq_ids, answers) if weights != (0.0,) else None
    priors = {w: mixed_prior(prior, w, own_answer) if w > 0 else prior for w in weights}
    fits = {(p, w): _fit(*examples[p, w], priors[w], min_positives, min_negatives, l2) for p, w in examples}
    result = fits[(1, 0.0)]
    result["prior"] = prior.to_dict()
    result["pooled"] = {str(p): fits[(p, 0.0)] for p in pools[1:]}
    if weights != (0.0,):
        result["own_answer_cosine"] = own_answer
        result["answer_weights"] = {f"{w:.2f}": {str(p): fits[(p, w)] for p in pools} for w in weights if w > 0}
    return result


def own_answer_cosine(vectors: np.ndarray, faq_ids: Sequence[str], answers: AnswerVectors) -> float:
    """Median cosine between a phrasing and its own FAQ's answer: what the answer term adds for a query
    that matches. Every FAQ with an answer has it, even one with a single phrasing."""
    rows = [i for i, f in enumerate(faq_ids) if f in answers.row_of]
    if not rows:
        return 0.0
    own = answers.vectors[[answers.row_of[faq_ids[i]] for i in rows]]
    return float(np.median(np.sum(vectors[rows] * own, axis=1)))


def mixed_prior(prior: Calibration, weight: float, own_answer: float | None) -> Calibration:
    """The phrasing-cosine prior carried over to s = (1-w)·cos + w·answer cosine, taking the answer term
    at its typical value m for a match: cos = (s - w·m) / (1-w), so p = sigmoid(a/(1-w)·s + b - a·w·m/(1-w)).
    It is what a KB too small to fit a curve on gets, and what larger fits are pulled toward."""
    m = 0.0 if own_answer is None else own_answer
    a = prior.a / (1.0 - weight)
    return Calibration(a=a, b=prior.b - a * weight * m, source=prior.source)


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
