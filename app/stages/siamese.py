"""The `faq train siamese` matcher (models/matchers/siamese.py) as a re-ranking stage, reading its phrasing
vectors from the serving build."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from app.settings import Settings
from app.stages.base import PooledStage
from index.candidates import FaqMatch
from models.lru import LRU


class SiameseStage(PooledStage):
    """The Siamese matcher on the query and each candidate's best phrasing. The phrasings' sentence
    vectors are computed at index build time (`faq index build` with this folder in FAQ_RERANKER stores
    them in the build: index/build.py `write_stage_vectors`) and read from the serving build: `on_build`
    gives the stage reading one build's (the pipeline keeps it with that build's other files,
    app/match/served.py); phrasings the build lacks (KB edits since) are encoded once and kept. A request
    then encodes only its query and runs the MLP head over the candidates. Calibrated by the folder's
    logistic fit and pooled with the candidate's score so far (w = `weight`, None: the folder's
    `fusion_weight`; 1 = the Siamese matcher alone)."""

    #: phrasings outside the serving build whose vectors are kept (most recently used first out)
    CACHE_SIZE = 8192

    label = "Siamese"

    def __init__(self, scorer: Any, weight: float | None = None):
        super().__init__(scorer, weight)
        # the build's phrasing text -> row, and its memory-mapped vectors (None: not reading a build)
        self.stored: tuple[dict[str, int], np.ndarray] | None = None
        # phrasings outside the build encoded so far, shared by the stage and its copies reading builds: a
        # phrasing is encoded once per process
        self.encoded: LRU[str, np.ndarray] = LRU(self.CACHE_SIZE)

    @property
    def id(self) -> str:
        return self.scorer.id

    # what an index build stores for this stage (index/build.py `write_stage_vectors`)
    @property
    def vector_key(self) -> str:
        return self.scorer.vector_key

    def sentence_vectors(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        return self.scorer.sentence_vectors(texts, batch_size=batch_size)

    def on_build(self, retriever: Any) -> SiameseStage:
        """This stage reading `retriever`'s stored vectors for this model (a copy: the model, the weight and
        the phrasings encoded so far are shared)."""
        reader = getattr(retriever, "stage_vectors", None)
        found = reader(self.vector_key) if reader is not None else None
        bound = copy.copy(self)
        bound.stored = None
        if found is not None:
            texts, matrix = found
            rows: dict[str, int] = {}
            for i, text in enumerate(texts):
                rows.setdefault(text, i)
            bound.stored = (rows, matrix)
        return bound

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """(n, D) sentence vectors of `texts`: from the build read, else from the cache, else encoded."""
        out: list[np.ndarray | None] = [None] * len(texts)
        stored = self.stored
        for i, text in enumerate(texts):
            row = stored[0].get(text) if stored is not None else None
            out[i] = stored[1][row] if row is not None else self.encoded.get(text)
        missing = list(dict.fromkeys(t for t, v in zip(texts, out) if v is None))
        if missing:
            fresh = dict(zip(missing, self.scorer.sentence_vectors(missing)))
            for text, vec in fresh.items():
                self.encoded.put(text, vec)
            out = [fresh[t] if v is None else v for t, v in zip(texts, out)]
        return np.asarray(np.stack(out), dtype=np.float32)

    def rescore(self, query: str, candidates: Sequence[FaqMatch]) -> np.ndarray:
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float64)
        u = self.scorer.sentence_vectors([query])[0]
        p = self.scorer.compare_vectors(u, self.vectors([m.question for m in candidates])).astype(np.float64)
        return self.pooled(p, candidates)


def load_siamese_stage(path: str, weight: float | None = None, runtime: str = "auto",
                       device: str | None = None, cache_dir: Path | None = None) -> SiameseStage:
    """A `SiameseStage` from a `faq train siamese` folder; "auto" runs it on CUDA when there is one, else on
    the CPU with MiniLM word states (if the model uses them) on fp32 ONNX: the numbers it was trained on,
    several times faster than eager PyTorch."""
    from models.encoders.base import pick_device
    from models.matchers.siamese import load_siamese

    if runtime == "auto":
        device = device or pick_device()
        runtime = "torch" if device.startswith("cuda") else "onnx"
    if runtime == "onnx-int8":  # the Siamese head was trained on fp32 states: int8 would shift them
        runtime = "onnx"
    return SiameseStage(load_siamese(path, device=device, runtime=runtime, cache_dir=cache_dir), weight)


def load(path: str, weight: float | None, settings: Settings) -> SiameseStage:
    """The stage of a `faq train siamese` folder on FAQ_RERANK_RUNTIME."""
    return load_siamese_stage(path, weight, runtime=settings.rerank_runtime, device=settings.device,
                              cache_dir=settings.mpnet_cache)
