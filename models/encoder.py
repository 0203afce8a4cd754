"""The `Encoder` interface every sentence encoder implements, and device selection (`load_encoder`,
which knows every implementation, is in models/load.py so that they can all import this interface).

An encoder maps texts to L2-normalised float32 vectors, so cosine similarity is a dot product and
Annoy's angular distance ranks exactly like cosine.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    #: stable identifier written into index manifests (an index is only valid for the encoder that built it)
    id: str
    #: output dimension
    dim: int

    def encode(
        self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False
    ) -> np.ndarray:
        """(n,) texts -> (n, dim) float32, each row L2-normalised."""
        ...


def pick_device(prefer: str | None = None) -> str:
    """CUDA when present (or when asked for), CPU otherwise. FAQ_DEVICE overrides."""
    import torch

    prefer = prefer or os.environ.get("FAQ_DEVICE")
    if prefer:
        return prefer
    return "cuda" if torch.cuda.is_available() else "cpu"


def l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, read in 4 MB blocks (model weights run to hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
