"""A FAQ's cosine from its phrasings' cosines: the best one, or the mean of the best few.

The matcher ranks FAQs by this value and the build calibrates it (index/calibration.py), so both use
this one function. Why pool at all: with many phrasings per FAQ, a single stray phrasing that happens
to sit next to the query decides a max; a FAQ whose several phrasings are all close is more likely
the one meant (a small k-NN vote). Measured in the README (BANKING77, CLINC150, the demo FAQ).
"""
from __future__ import annotations

from typing import Sequence

#: largest pool the build calibrates for (FAQ_POOL_VARIANTS is capped at it)
MAX_POOL = 5


def pooled_cosine(cosines: Sequence[float], n_phrasings: int, pool: int, floor: float) -> float:
    """Mean of a FAQ's best `min(pool, n_phrasings)` cosines.

    `cosines`: the FAQ's phrasings that were retrieved (any order); `n_phrasings`: how many it has in
    all (never fewer than retrieved); phrasings not retrieved count at `floor`, the lowest cosine of the
    retrieved list, an upper bound of theirs, so a FAQ cut off by the retrieval depth is not ranked
    below what it could score.
    """
    if not cosines:
        return float(floor)
    if pool <= 1:
        return float(max(cosines))
    best = sorted((float(c) for c in cosines), reverse=True)
    n = min(pool, max(len(best), int(n_phrasings)))
    kept = best[:n]
    return (sum(kept) + float(floor) * (n - len(kept))) / n
