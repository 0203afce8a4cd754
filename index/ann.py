"""`AnnIndex`: a thin, typed wrapper around an Annoy angular forest, plus exact search and the
self-recall check used to verify a build.

Vectors are L2-normalised, so Annoy's angular distance d = sqrt(2 - 2 cos) gives the cosine back
exactly as cos = 1 - d^2 / 2 and ranks like cosine.

Annoy trade-offs (numbers in index/README.md and bench/results/ann_params.md):
- `n_trees` (build time, index size) vs `search_k` (query time): more trees need fewer inspected
  nodes for the same recall; `search_k=-1` means Annoy's default `n_trees * k`.
- an index is immutable once built; it is built once per KB version and then only read.
- `load` memory-maps the file, so several server processes share one copy in the page cache.
- `get_nns_by_vector` only reads the mmapped forest, so concurrent queries from threads are safe.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from annoy import AnnoyIndex

METRIC = "angular"
#: fixed seed so the same vectors give the same forest (reproducible builds and benchmarks)
DEFAULT_SEED = 1234


def _as_matrix(vecs: np.ndarray, dim: int, what: str = "vectors") -> np.ndarray:
    """Validate a (n, dim) float matrix; a single vector is accepted as (1, dim)."""
    arr = np.asarray(vecs, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ValueError(f"{what}: expected shape (n, {dim}), got {tuple(np.shape(vecs))}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: contains NaN or infinite values")
    return arr


class AnnIndex:
    """An Annoy angular index over items 0..n-1 (callers map items to their own ids)."""

    def __init__(self, annoy: AnnoyIndex, dim: int):
        self._annoy = annoy
        self.dim = dim

    @property
    def n_items(self) -> int:
        return self._annoy.get_n_items()

    @property
    def n_trees(self) -> int:
        return self._annoy.get_n_trees()

    @classmethod
    def build(cls, vectors: np.ndarray, n_trees: int, seed: int = DEFAULT_SEED, n_jobs: int = -1) -> "AnnIndex":
        """Build a forest of `n_trees` over the rows of `vectors` (item i = row i)."""
        if n_trees < 1:
            raise ValueError(f"n_trees must be >= 1, got {n_trees}")
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] == 0:
            raise ValueError(f"vectors: expected a non-empty (n, dim) matrix, got shape {vectors.shape}")
        dim = int(vectors.shape[1])
        vectors = _as_matrix(vectors, dim)
        annoy = AnnoyIndex(dim, METRIC)
        annoy.set_seed(seed)
        for item, vec in enumerate(vectors):
            annoy.add_item(item, vec.tolist())
        annoy.build(n_trees, n_jobs=n_jobs)
        return cls(annoy, dim)

    def save(self, path: str | Path) -> None:
        # Annoy's save() also re-loads the file as an mmap, so this object keeps working afterwards.
        self._annoy.save(str(path))

    @classmethod
    def load(cls, path: str | Path, dim: int, mmap: bool = True) -> "AnnIndex":
        """Open a saved index. Annoy always memory-maps; `mmap=False` pre-faults the whole file into
        memory at load time (MAP_POPULATE) instead of paging it in lazily on first queries."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"annoy index not found: {path}")
        annoy = AnnoyIndex(dim, METRIC)
        annoy.load(str(path), prefault=not mmap)
        return cls(annoy, dim)

    def unload(self) -> None:
        self._annoy.unload()

    def item_vectors(self, items: list[int]) -> np.ndarray:
        """The stored vectors of `items` (float32, as indexed), shape (len(items), dim)."""
        out = np.empty((len(items), self.dim), dtype=np.float32)
        for row, item in enumerate(items):
            out[row] = self._annoy.get_item_vector(int(item))
        return out

    def search_one(self, vec: np.ndarray, k: int, search_k: int = -1) -> tuple[list[int], list[float]]:
        """Nearest items of one vector: (items, cosines), best first, at most k long."""
        items, dists = self._annoy.get_nns_by_vector(vec.tolist(), k, search_k=search_k, include_distances=True)
        d = np.asarray(dists, dtype=np.float32)
        cos = 1.0 - d * d / 2.0
        # Annoy measures the angle to the query's direction: a query that is not a unit vector (multilingual
        # mode's, models/encoders/multilingual.py) scores |q| times that, as its dot product does
        norm = float(np.linalg.norm(vec))
        if abs(norm - 1.0) > 1e-3:
            cos = cos * np.float32(norm)
        return items, cos.tolist()

    def search(self, vecs: np.ndarray, k: int, search_k: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """(q, dim) queries -> (ids (q, k) int64, cos (q, k) float32), best first.

        Rows with fewer than k results (k > n_items) are padded with id -1 and cosine -inf.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        vecs = _as_matrix(vecs, self.dim, "queries")
        ids = np.full((len(vecs), k), -1, dtype=np.int64)
        cos = np.full((len(vecs), k), -np.inf, dtype=np.float32)
        for row, vec in enumerate(vecs):
            items, cosines = self.search_one(vec, k, search_k)
            ids[row, : len(items)] = items
            cos[row, : len(items)] = cosines
        return ids, cos


def exact_search(queries: np.ndarray, vectors: np.ndarray, k: int, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force cosine top-k (both sides L2-normalised): (ids (q, k), cos (q, k)), best first."""
    queries = np.asarray(queries, dtype=np.float32)
    vectors = np.asarray(vectors, dtype=np.float32)
    k = min(k, len(vectors))
    out_ids = np.empty((len(queries), k), dtype=np.int64)
    out_cos = np.empty((len(queries), k), dtype=np.float32)
    for start in range(0, len(queries), chunk):  # chunked so q x n scores never get huge
        scores = queries[start : start + chunk] @ vectors.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top_scores = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-top_scores, axis=1, kind="stable")
        out_ids[start : start + chunk] = np.take_along_axis(top, order, axis=1)
        out_cos[start : start + chunk] = np.take_along_axis(top_scores, order, axis=1)
    return out_ids, out_cos


def recall_at_k(
    approx_ids: np.ndarray, exact_ids: np.ndarray, exact_cos: np.ndarray, item_cos: np.ndarray | None = None,
    tie_eps: float = 1e-5,
) -> float:
    """Mean fraction of the exact top-k found by the approximate search.

    An approximate hit also counts when its true cosine ties the exact k-th cosine (`item_cos`:
    cosines of the approximate ids, same shape), so identical vectors (a question present in two
    FAQs) do not look like misses just because the tie broke the other way.
    """
    k = exact_ids.shape[1]
    found = 0
    for row in range(len(exact_ids)):
        exact = set(exact_ids[row].tolist())
        kth = float(exact_cos[row, -1])
        for col, item in enumerate(approx_ids[row, :k].tolist()):
            if item in exact or (item >= 0 and item_cos is not None and item_cos[row, col] >= kth - tie_eps):
                found += 1
    return found / float(exact_ids.size) if exact_ids.size else 1.0


def self_recall_at_k(
    index: AnnIndex, vectors: np.ndarray, k: int = 10, search_k: int = -1, sample: int = 1000, seed: int = 0,
    tie_eps: float = 1e-5,
) -> float:
    """Recall@k of the Annoy index against exact search, querying with a sample of its own vectors.

    Pass a larger `tie_eps` (~2e-3) when `vectors` is a lower-precision copy (fp16) of what Annoy
    indexed, so rounding-level reorderings at the k-th place are not counted as misses."""
    vectors = np.asarray(vectors, dtype=np.float32)
    n = len(vectors)
    if n == 0:
        raise ValueError("self-recall needs at least one vector")
    k = min(k, n)
    rng = np.random.default_rng(seed)
    rows = rng.choice(n, size=min(sample, n), replace=False)
    queries = vectors[rows]
    exact_ids, exact_cos = exact_search(queries, vectors, k)
    approx_ids, approx_cos = index.search(queries, k, search_k)
    # true cosines of the approximate hits (Annoy's are computed from fp32; the fp16 copy may differ slightly)
    safe = np.where(approx_ids >= 0, approx_ids, 0)
    item_cos = np.einsum("qd,qkd->qk", queries, vectors[safe])
    item_cos[approx_ids < 0] = -np.inf
    return recall_at_k(approx_ids, exact_ids, exact_cos, item_cos, tie_eps=tie_eps)
