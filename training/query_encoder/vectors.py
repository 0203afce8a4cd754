"""Teacher and base vectors of the corpus, cached in chunks (resumable), the ridge fit between them, and how
close mapped vectors come to the teacher's."""
from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

log = logging.getLogger(__name__)

CHUNK = 2048



def _sha(texts: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


def cached_vectors(encoder: Any, texts: Sequence[str], folder: Path, *, chunk: int = CHUNK,
                   progress: Callable[[str], None] = log.info) -> np.ndarray:
    """`encoder.encode(texts)` (n, dim) float32, computed chunk by chunk into `folder` and read back: a
    chunk whose file exists for the same texts is not encoded again (resume, or a larger corpus)."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    n_chunks = (len(texts) + chunk - 1) // chunk
    t0 = time.perf_counter()
    done = 0
    for i in range(n_chunks):
        block = list(texts[i * chunk:(i + 1) * chunk])
        key = _sha(block)[:16]
        path = folder / f"{key}.npy"
        if path.exists():
            parts.append(np.load(path))
            continue
        vecs = np.asarray(encoder.encode(block, batch_size=64), dtype=np.float32)
        tmp = folder / f"{key}.tmp.npy"
        np.save(tmp, vecs)
        tmp.replace(path)
        parts.append(vecs)
        done += len(block)
        rate = done / max(time.perf_counter() - t0, 1e-9)
        progress(f"{folder.name}: chunk {i + 1}/{n_chunks} ({rate:.0f} sentences/s, "
                 f"{(len(texts) - (i + 1) * chunk) / rate / 60:.1f} min left)" if rate else "")
    return np.concatenate(parts) if parts else np.zeros((0, getattr(encoder, "dim", 0)), np.float32)




def fit_projection(base: np.ndarray, teacher: np.ndarray, ridge: float) -> tuple[np.ndarray, np.ndarray]:
    """argmin_W,b |base W + b - teacher|^2 + ridge |W|^2 -> W (d_base, d), b (d,)."""
    mb, mt = base.mean(axis=0), teacher.mean(axis=0)
    x, y = (base - mb).astype(np.float64), (teacher - mt).astype(np.float64)
    gram = x.T @ x + ridge * np.eye(x.shape[1])
    weight = np.linalg.solve(gram, x.T @ y)  # (d_base, d)
    bias = mt - mb @ weight
    return weight.astype(np.float32), bias.astype(np.float32)


def _nearest_agreement(queries: np.ndarray, keys: np.ndarray, teacher: np.ndarray) -> float:
    """Share of sentences whose nearest other sentence (queries against keys) is the teacher's nearest."""
    found, own = queries @ keys.T, teacher @ teacher.T
    np.fill_diagonal(found, -np.inf)
    np.fill_diagonal(own, -np.inf)
    return float(np.mean(found.argmax(axis=1) == own.argmax(axis=1)))


def _sample(n: int, sample: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).choice(n, size=min(sample, n), replace=False)


def agreement(mapped: np.ndarray, teacher: np.ndarray, sample: int = 4000, seed: int = 0) -> dict:
    """How close mapped vectors are to the teacher's: mean cosine, and the share of sentences whose nearest
    other sentence (among `sample`; mapped queries against the teacher's vectors, the asymmetric use) is
    the teacher's own nearest."""
    from models.encoders.base import l2_normalise

    q, t = l2_normalise(mapped), l2_normalise(teacher)
    idx = _sample(len(q), sample, seed)
    return {"mean_cosine": float(np.mean(np.sum(q * t, axis=1))),
            "nearest_agreement": _nearest_agreement(q[idx], t[idx], t[idx]), "n": int(len(idx))}


def base_agreement(base: np.ndarray, teacher: np.ndarray, seed: int, sample: int = 4000) -> float:
    """The same nearest-neighbour agreement for the base in its own space (what the fast mode gets)."""
    from models.encoders.base import l2_normalise

    b, t = l2_normalise(base), l2_normalise(teacher)
    idx = _sample(len(b), sample, seed)
    return _nearest_agreement(b[idx], b[idx], t[idx])


