"""The `faq train mmaicm` matcher (models/matchers/mmaicm.py) as a re-ranking stage."""
from __future__ import annotations

from pathlib import Path

from typing import Any, Sequence

import numpy as np

from app.settings import Settings
from app.stages.base import PooledStage
from index.candidates import FaqMatch


class MmaicmStage(PooledStage):
    """MMAICM on each candidate's answer and best phrasing (one forward pass for both). Its raw scores
    become probabilities through the folder's logistic calibration, mixed as
    p = answer_share * p(answer) + (1 - answer_share) * p(phrasing), then pooled with the candidate's
    score so far (w = `weight`, None: the folder's `fusion_weight`; 1 = MMAICM alone)."""

    label = "MMAICM"

    def __init__(self, scorer: Any, weight: float | None = None, answer_share: float = 0.5):
        super().__init__(scorer, weight)
        if not 0.0 <= answer_share <= 1.0:
            raise ValueError(f"answer_share must be in 0..1, got {answer_share}")
        self.answer_share = answer_share

    @property
    def id(self) -> str:
        return self.scorer.id

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        n = len(candidates)
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        share = self.answer_share
        texts = (([m.answer for m in candidates] if share > 0 else [])
                 + ([m.question for m in candidates] if share < 1 else []))
        probs = self.scorer.probability(self.scorer.score(query, texts)).astype(np.float64)
        if share <= 0:
            p = probs
        elif share >= 1:
            p = probs[:n]
        else:
            p = share * probs[:n] + (1.0 - share) * probs[n:]
        return self.pooled(p, candidates)


def load_mmaicm_stage(path: str, weight: float | None = None, answer_share: float = 0.5,
                      device: str | None = None, runtime: str = "torch", cache_dir: Path | None = None) -> MmaicmStage:
    """An `MmaicmStage` from a `faq train mmaicm` folder. Raises what loading the folder raises."""
    from models.matchers.mmaicm import load_mmaicm

    return MmaicmStage(load_mmaicm(path, device=device, runtime=runtime, cache_dir=cache_dir), weight=weight,
                       answer_share=answer_share)


def load(path: str, weight: float | None, settings: Settings) -> MmaicmStage:
    """The stage of a `faq train mmaicm` folder on FAQ_RERANK_RUNTIME."""
    from models.encoders.base import pick_device

    runtime = settings.rerank_runtime
    if runtime == "auto":  # fp32 ONNX for MiniLM's states: the numbers it was trained on, 3x faster than eager
        runtime = "onnx" if pick_device(settings.device) == "cpu" else "torch"
    return load_mmaicm_stage(path, weight, runtime=runtime, device=settings.device, cache_dir=settings.mpnet_cache)
