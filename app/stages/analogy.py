"""The `faq train analogy` model (models/matchers/analogy.py) as a re-ranking stage."""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from app.settings import Settings
from app.stages.base import PooledStage
from index.candidates import FaqMatch
from models.lru import LRU


class AnalogyStage(PooledStage):
    """The analogy model on each candidate's answer: how well query -> answer lines up with the model's
    prototype question -> answer pairs (best of k). Calibrated to a probability by the folder's logistic
    fit and pooled with the candidate's score so far (w = `weight`, None: the folder's `fusion_weight`;
    1 = the analogy score alone)."""

    #: FAQ answers and prototype texts whose sentence vectors are kept: a service re-scores the same
    #: answers again and again, so after the first requests only the query is encoded
    CACHE_SIZE = 8192

    label = "analogy"

    def __init__(self, scorer: Any, weight: float | None = None):
        super().__init__(scorer, weight)
        self._vectors: LRU[str, Any] = LRU(self.CACHE_SIZE)
        self._lock = threading.Lock()  # one embedding of the missing texts at a time

    def _embed_cached(self, texts: Sequence[str]) -> Any:
        import torch

        with self._lock:
            found = {}
            for text in dict.fromkeys(texts):  # kept ones are refreshed before new ones can evict them
                vec = self._vectors.get(text)
                if vec is not None:
                    found[text] = vec
            missing = [t for t in dict.fromkeys(texts) if t not in found]
            if missing:
                for text, vec in zip(missing, self.scorer.embed(missing)):
                    found[text] = vec
                    self._vectors.put(text, vec)
            for text in texts:  # the most recently used last, in the order they were asked for
                self._vectors.get(text)
            return torch.stack([found[t] for t in texts])

    @property
    def id(self) -> str:
        return f"analogy:{self.scorer.name}"

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float64)
        import torch.nn.functional as F

        from models.matchers.analogy import best_of_prototypes

        q = self.scorer.embed([query])[0]
        answers = self._embed_cached([m.answer for m in candidates])
        if self.scorer.config.objective == "cosine":
            raw = F.cosine_similarity(q.unsqueeze(0), answers, dim=-1)
        else:  # as AnalogyScorer.score, with the answers' and prototypes' vectors cached
            protos = self.scorer.prototypes_for(query)
            if not protos:
                raise ValueError(f"the analogy model {self.scorer.name} has no prototypes to score with")
            pv = self._embed_cached([p.question for p in protos] + [p.answer for p in protos])
            raw = best_of_prototypes(pv[: len(protos)], pv[len(protos):], q, answers)
        p = self.scorer.probability(raw.numpy()).astype(np.float64)
        return self.pooled(p, candidates)


def load(path: str, weight: float | None, settings: Settings) -> AnalogyStage:
    """The stage of a `faq train analogy` folder (it runs on PyTorch whatever FAQ_RERANK_RUNTIME says)."""
    from models.matchers.analogy import load_analogy

    return AnalogyStage(load_analogy(path, device=settings.device), weight)
