"""The `faq train reranker` cross-encoder (models/matchers/cross_encoder.py) as a re-ranking stage."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from app.settings import Settings
from app.stages.base import PooledStage
from index.candidates import FaqMatch


class CrossEncoderStage(PooledStage):
    """The cross-encoder on each candidate's best phrasing (one batched forward pass), its calibrated
    probability pooled with the candidate's score so far by `weight` (None: the folder's `fusion_weight`;
    1 = the cross-encoder alone)."""

    label = "cross-encoder"

    @property
    def id(self) -> str:
        return self.scorer.id

    @property
    def folder_weight(self) -> float:
        return self.scorer.config.fusion_weight

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float64)
        return self.pooled(self.scorer.score(query, [m.question for m in candidates]), candidates)


def load(path: str, weight: float | None, settings: Settings) -> CrossEncoderStage:
    """A `faq train reranker` folder on FAQ_RERANK_RUNTIME. Raises what loading the folder raises: a folder
    of no other kind ends here, and the cross-encoder's loader says what is wrong with it."""
    from models.matchers.cross_encoder import load_reranker

    reranker: Any = load_reranker(path, runtime=settings.rerank_runtime, threads=settings.torch_threads,
                                 device=settings.device)
    return CrossEncoderStage(reranker, weight)
