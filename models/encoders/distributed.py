"""`RayEncoder`: a build's encoder spread over Ray workers (optional extra `distributed`: `pip install -e
".[distributed]"`), for KBs whose encode step one machine takes too long over.

How the encode step is split (docs/operations.md, "Large builds over several workers"):
- The build is unchanged: it hands its encoder 1,024 texts per call (index/build.py `encode_in_batches`).
- Each call is cut into contiguous shards, one per worker, and every worker is a Ray actor that loaded
  the same encoder spec on the same runtime (so its vectors are the ones one process would compute).
- Vectors come back through Ray's object store to the build process, are concatenated in text order
  and go on exactly as a local encoder's would: Annoy, answers, calibration, verification, the swap.
Ray schedules the actors and moves the data; nothing here schedules anything.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np


class _Worker:
    """One Ray actor's encoder (loaded once, in the actor's process)."""

    def __init__(self, spec: str, runtime: str | None, threads: int | None, device: str | None,
                 cache_dir: str | None) -> None:
        from models.encoders.load import load_encoder

        self.encoder = load_encoder(spec, device=device, runtime=runtime, threads=threads, cache_dir=cache_dir)

    def describe(self) -> dict[str, Any]:
        encoder = self.encoder
        return {"id": encoder.id, "dim": int(encoder.dim), "runtime": getattr(encoder, "runtime", "torch"),
                "device": str(getattr(encoder, "device", ""))}

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        return np.asarray(self.encoder.encode(texts, batch_size=batch_size), dtype=np.float32)


class RayEncoder:
    """`encode` on `workers` Ray actors, each with `threads` CPUs (and `gpus` GPUs) of the cluster at
    `address` ("auto": the running cluster RAY_ADDRESS names; None: a local one started for this build)."""

    def __init__(self, spec: str, *, workers: int = 2, threads: int = 1, gpus: float = 0.0,
                 runtime: str | None = "auto", device: str | None = None, cache_dir: str | Path | None = None,
                 address: str | None = None) -> None:
        try:
            import ray
        except ImportError as exc:  # the optional extra
            raise RuntimeError("distributed encoding needs Ray: pip install -e \".[distributed]\"") from exc
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            # a local cluster needs room for every worker; an existing one brings its own resources
            local = {} if address else {"num_cpus": workers * threads, "num_gpus": int(np.ceil(workers * gpus))}
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="warning",
                     **local)
            self._started = True
        actor = ray.remote(num_cpus=threads, num_gpus=gpus)(_Worker)
        cache = None if cache_dir is None else str(cache_dir)
        self.workers = [actor.remote(spec, runtime, threads, device, cache) for _ in range(workers)]
        described = ray.get([w.describe.remote() for w in self.workers])
        if len({(d["id"], d["dim"], d["runtime"]) for d in described}) != 1:
            raise RuntimeError(f"the workers loaded different encoders for {spec!r}: {described}")
        self.id, self.dim, self.runtime = described[0]["id"], described[0]["dim"], described[0]["runtime"]
        self.device = f"ray x{workers} ({described[0]['device']})"

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        per = -(-len(texts) // len(self.workers))  # contiguous shards, one per worker, in text order
        shards = [texts[i: i + per] for i in range(0, len(texts), per)]
        parts = self._ray.get([w.encode.remote(shard, batch_size) for w, shard in zip(self.workers, shards)])
        return np.concatenate(parts, axis=0)

    def close(self) -> None:
        """Stop the workers (and the local cluster this encoder started)."""
        for worker in self.workers:
            self._ray.kill(worker)
        self.workers = []
        if self._started:
            self._ray.shutdown()
