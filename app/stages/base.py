"""What every re-ranking stage is (`Stage`) and the pooling they share (`PooledStage`)."""
from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from index.candidates import FaqMatch


class Stage(Protocol):
    """Re-scores a query's candidate FAQs (first-stage order, each with its score so far). A stage may also
    have `on_build(retriever) -> stage`, the stage as it scores that build (what it reads from the build is
    kept with the build's other files, app/match/served.py), and
    `vector_key` + `sentence_vectors(texts)`: what an index build stores for it (app/stages `vector_stages`)."""

    id: str

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        """Calibrated P(candidate means the same as query), float (len(candidates),)."""
        ...


class PooledStage:
    """What every stage shares: a model's calibrated probability pooled with the candidate's score so far,
    sigmoid(w * logit(p) + (1 - w) * logit(score)), w = `weight` (None: the folder's own fusion weight;
    1 = the model alone). A stage's `rescore` computes `p` and hands it to `pooled`."""

    #: names the model in errors
    label = "stage"

    def __init__(self, scorer: Any, weight: float | None = None):
        if weight is not None and not 0.0 <= weight <= 1.0:
            raise ValueError(f"{self.label} weight must be in 0..1, got {weight}")
        self.scorer = scorer
        self.weight = weight

    @property
    def folder_weight(self) -> float:
        """The fusion weight the model's folder was saved with (its calibration's)."""
        return self.scorer.calibration.fusion_weight

    @property
    def served_weight(self) -> float:
        return self.folder_weight if self.weight is None else self.weight

    def pooled(self, p: np.ndarray, candidates: Sequence[FaqMatch]) -> np.ndarray:
        """The model's probabilities `p` for `candidates` -> the stage's."""
        from models.scoring import pool

        w = self.served_weight
        if w >= 1.0:
            return p
        return pool(p, np.array([m.score for m in candidates], dtype=np.float64), w).astype(np.float64)
