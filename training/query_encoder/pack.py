"""A teacher pack: the corpus and the teacher's vectors of it in one file, so the fine-tuning can run on a
machine that never holds the teacher (a GPU box that all-mpnet-base-v2's 420 MB cannot reach, say).

    texts      utf-8, one per line, xz-compressed (corpus texts first, then the dev KBs' texts the corpus lacks)
    codes      (n, d) int8: each vector scaled by its own largest component / 127
    scales     (n,) float32
    meta       JSON: teacher id and runtime, n_corpus, dim, sha256 of the texts

One byte per component instead of four (int8 vectors hardly compress, so they are stored as they are; the
texts shrink five-fold): 86k sentences of 768-d vectors make 68 MB, not 265 MB, and a vector read back is
within cosine 0.9999 of the one written. The fine-tuning trains on the first
`n_corpus` texts; the others are only there so the dev sets' FAQ texts need no teacher.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import zipfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from training.loop import TrainError

FORMAT = "faq-match teacher pack 1"


def write_pack(path: str | Path, texts: Sequence[str], vectors: np.ndarray, *, teacher_id: str, runtime: str,
               n_corpus: int) -> dict:
    vectors = np.asarray(vectors, dtype=np.float32)
    if len(texts) != len(vectors):
        raise ValueError(f"{len(texts)} texts but {len(vectors)} vectors")
    if any("\n" in t for t in texts):
        raise ValueError("a pack's texts are one per line: clean them first")
    peak = np.abs(vectors).max(axis=1)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint(vectors / scales[:, None]), -127, 127).astype(np.int8)
    blob = "\n".join(texts).encode("utf-8")
    meta = {"format": FORMAT, "teacher": teacher_id, "runtime": runtime, "n": len(texts), "n_corpus": int(n_corpus),
            "dim": int(vectors.shape[1]), "texts_sha256": hashlib.sha256(blob).hexdigest()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, texts=np.frombuffer(lzma.compress(blob, preset=9), dtype=np.uint8), codes=codes, scales=scales,
                 meta=np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8))
    tmp.replace(path)
    return meta


def read_pack(path: str | Path) -> tuple[list[str], np.ndarray, dict]:
    """(texts, L2-normalised float32 vectors, meta); a pack whose texts do not match their checksum, or
    whose arrays disagree, is refused."""
    try:
        with np.load(path) as z:
            meta = json.loads(z["meta"].tobytes().decode("utf-8"))
            blob = lzma.decompress(z["texts"].tobytes())
            codes, scales = z["codes"], z["scales"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, lzma.LZMAError) as exc:
        raise TrainError(f"{path}: not a teacher pack ({exc})") from exc
    if meta.get("format") != FORMAT:
        raise TrainError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    if hashlib.sha256(blob).hexdigest() != meta["texts_sha256"]:
        raise TrainError(f"{path}: its texts do not match their checksum (a partial copy?)")
    texts = blob.decode("utf-8").split("\n") if blob else []
    if not (len(texts) == len(codes) == len(scales) == meta["n"]) or codes.shape[1:] != (meta["dim"],):
        raise TrainError(f"{path}: {len(texts)} texts, {codes.shape} codes, {len(scales)} scales: not one pack")
    vectors = codes.astype(np.float32) * scales[:, None]
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return texts, vectors, meta


def pack_lookup(path: str | Path, texts: Sequence[str], vectors: np.ndarray) -> Callable[[list[str]], np.ndarray]:
    """Teacher vectors of a batch from the pack; a text it lacks is an error (there is no teacher to ask)."""
    row_of = {t: i for i, t in enumerate(texts)}

    def lookup(batch: list[str]) -> np.ndarray:
        missing = [t for t in batch if t not in row_of]
        if missing:
            raise TrainError(f"{path} lacks {len(missing)} text(s) of a dev KB (e.g. {missing[0][:60]!r}): write the "
                             "pack with the same --kb and --dev files")
        return np.stack([vectors[row_of[t]] for t in batch]) if batch else np.zeros((0, vectors.shape[1]), np.float32)

    return lookup
