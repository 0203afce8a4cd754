"""The `Encoder` interface every sentence encoder implements, and device selection (`load_encoder`,
which knows every implementation, is in models/encoders/load.py so that they can all import this interface).

An encoder maps texts to L2-normalised float32 vectors, so cosine similarity is a dot product and
Annoy's angular distance ranks exactly like cosine.
"""
from __future__ import annotations

import fcntl
import hashlib
import heapq
import itertools
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

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
    """`prefer` when given (the service and the CLI pass FAQ_DEVICE), else CUDA when present, CPU otherwise."""
    import torch

    if prefer:
        return prefer
    return "cuda" if torch.cuda.is_available() else "cpu"


def l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


@contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) for as long as the block runs: one process fills
    a model cache folder while concurrent first uses wait."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, read in 4 MB blocks (model weights run to hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


class PriorityGate:
    """A lock whose waiters are served by priority (0 first), in arrival order within one priority.

    A plain Lock is not fair: a thread encoding a big KB change chunk after chunk would re-take it
    ahead of the request threads waiting for it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._waiting: list[tuple[int, int]] = []  # heap of (priority, arrival number)
        self._arrivals = itertools.count()

    @contextmanager
    def hold(self, priority: int = 0) -> Iterator[None]:
        with self._cond:
            ticket = (priority, next(self._arrivals))
            heapq.heappush(self._waiting, ticket)
            while self._held or self._waiting[0] != ticket:
                self._cond.wait()
            heapq.heappop(self._waiting)
            self._held = True
        try:
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()


#: texts per encoder call of background work: the longest a query waits behind it (about 10 ms for
#: MiniLM int8, 60 ms for mpnet int8 on two cores)
BACKGROUND_CHUNK = 8


class SharedEncoder:
    """The one wrapper an encoder is used through when it is shared: `encode` calls run one at a time,
    and with `memo` the vectors of texts it has already encoded are reused. Everything else (id, dim,
    calibration, ...) is the wrapped encoder's.

    One at a time, because Hugging Face fast tokenizers are not thread-safe: two threads tokenizing with
    one tokenizer can fail with "RuntimeError: Already borrowed" (huggingface/tokenizers#537), and the
    service encodes from its encode workers and from KB refreshes. Parallel encoding belongs in separate
    processes (`faq serve --workers N`). The memo serves evaluations, which match the same dev queries
    once per setting they tune (it grows without bound: not for a service).

    `background()` is a view for bulk work next to live queries (a KB refresh encoding thousands of new
    phrasings): it encodes in small chunks, each taken at low priority, so a query waits for at most
    one chunk instead of the whole job.
    """

    def __init__(self, inner: Encoder, memo: bool = False):
        self.inner = inner
        self._gate = PriorityGate()
        self._memo: dict[str, np.ndarray] | None = {} if memo else None

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False,
               priority: int = 0) -> np.ndarray:
        with self._gate.hold(priority):
            if self._memo is None:
                return self.inner.encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar)
            missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
            if missing:
                vecs = self.inner.encode(missing, batch_size=batch_size, show_progress_bar=show_progress_bar)
                self._memo.update(zip(missing, np.asarray(vecs, dtype=np.float32)))
            if len(texts) == 0:
                return np.zeros((0, self.inner.dim), np.float32)
            return np.stack([self._memo[t] for t in texts])

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64, priority: int = 0,
                       **routing: Any) -> np.ndarray:
        """The query side (`query_side`), one call at a time like `encode`; `routing` (the queries' `languages`)
        goes to an encoder that is `routed_by_language`."""
        with self._gate.hold(priority):
            return query_side(self.inner)(texts, batch_size=batch_size, **routing)

    def background(self) -> "BackgroundEncoder":
        return BackgroundEncoder(self)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class BackgroundEncoder:
    """A SharedEncoder seen by bulk work: same vectors, encoded BACKGROUND_CHUNK texts at a time at low
    priority (see SharedEncoder)."""

    def __init__(self, shared_encoder: SharedEncoder):
        self.shared = shared_encoder

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.shared.dim), np.float32)
        # similar lengths per chunk: padding to a long neighbour would make a chunk slower
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.shared.dim), np.float32)
        for start in range(0, len(order), BACKGROUND_CHUNK):
            rows = order[start:start + BACKGROUND_CHUNK]
            out[rows] = self.shared.encode([texts[i] for i in rows], batch_size=len(rows), priority=1)
        return out

    def __getattr__(self, name: str):
        return getattr(self.shared, name)


def shared(encoder: Encoder | None, memo: bool = False) -> Encoder | None:
    """`encoder` behind a SharedEncoder (once: an already shared one is returned as it is)."""
    if encoder is None or isinstance(encoder, SharedEncoder):
        return encoder
    return SharedEncoder(encoder, memo=memo)


def query_side(encoder: Encoder) -> Callable[..., np.ndarray]:
    """How `encoder` encodes queries: its `encode_queries` when queries and FAQs are encoded differently
    (multilingual mode routes a query by its language), else `encode`."""
    return getattr(encoder, "encode_queries", None) or encoder.encode


class QueryView:
    """An encoder's query side as an `Encoder` (for a build's replayed queries). Its vectors need not be
    unit vectors (`unit` False: multilingual mode scales a query to put its score on mpnet's scale)."""

    unit = False

    def __init__(self, encoder: Encoder):
        self.inner, self.id, self.dim = encoder, encoder.id, encoder.dim

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        return query_side(self.inner)(texts, batch_size=batch_size)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)
