"""Choosing the re-ranker's fusion weight on dev queries (`faq eval match --reranker DIR --tune-rerank-weight`).

One pass of the dev queries through the matcher with the cross-encoder alone (weight 1) and every one of
the `rerank_k` candidates kept gives, per candidate, the cross-encoder probability and the first stage's
probability it pools with (`FaqMatch.first_score`: the build's cosine curve). The pooled score of any weight w (models/matchers/cross_encoder.py `pool`) and the answer F1 at its best
threshold then follow without running the model again, so the grid costs one dev pass.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

# finer where the choice usually falls (a strong first stage wants a light cross-encoder weight)
WEIGHT_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def pooled_results(results: Sequence[Any], calibration: Any, weight: float, top_k: int) -> list[Any]:
    """Results of the pure cross-encoder pass re-scored with weight `weight`, re-sorted, cut to top_k."""
    from models.matchers.cross_encoder import pool

    out = []
    for r in results:
        if not r.matches:
            out.append(r)
            continue
        p_cross = np.array([m.score for m in r.matches])
        p_first = np.array([calibration.probability(m.cosine) if m.first_score is None else m.first_score
                            for m in r.matches])
        scores = pool(p_cross, p_first, weight)
        matches = sorted((replace(m, score=float(s)) for m, s in zip(r.matches, scores)), key=lambda m: (-m.score, m.faq_id))
        out.append(replace(r, matches=matches[:top_k], answer=None))
    return out


def tune_weight(results: Sequence[Any], golds: Sequence[str | None], calibration: Any, top_k: int,
                grid: Sequence[float] = WEIGHT_GRID) -> tuple[float, dict[float, float]]:
    """(best weight, {weight: dev answer F1 at its tuned threshold}); ties go to the larger weight."""
    from evaluation.measures import outcomes_from_results, tune_threshold

    f1s = {}
    for w in grid:
        _, f1 = tune_threshold(outcomes_from_results(pooled_results(results, calibration, w, top_k), golds))
        f1s[float(w)] = f1
    best = max(f1s, key=lambda w: (round(f1s[w], 6), w))
    return best, f1s
