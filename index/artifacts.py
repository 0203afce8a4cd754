"""`BuildRegistry`: the versioned index folders under `index_dir` and the atomic `current` pointer.

Layout (contract in docs/architecture.md):

    index_dir/
      20261122T010203Z-a1b2c3/      one finished build ("version"), never modified after it is renamed in
        annoy.ann                   Annoy angular forest (memory-mapped by servers)
        ids.npy                     annoy item -> variant_id (int64)
        vectors.npy                 fp16 copy of the vectors (exact rerank / verification)
        idmap.jsonl                 {"variant_id", "faq_id", "question"} per annoy item, same order
        answers.npy                 fp16 answer vectors, one per FAQ with a real answer (index/answers.py);
        answers.jsonl               {"faq_id", "answer"} per row, same order; both absent when the build
                                    uses no answer evidence (manifest `answers.used` false)
        manifest.json               what was built, with which encoder, how it verified, calibration
      .staging-<version>/           a build in progress; renamed into place only when complete
      .staging-<version>.lock       flock-ed by the build process for its whole life (see `build_lock`)
      current -> 20261122T010203Z-a1b2c3    symlink, switched with os.replace (atomic on POSIX)

Version names sort by creation time (UTC timestamp) and carry 6 hex digits (random; counting up
from the latest when two builds start within the same second) so names never collide and the
newest build always sorts last. A folder only counts as a version when its name has
that shape and it holds a manifest.json, so an interrupted build can never be mistaken for one.
"""
from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterable
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

import numpy as np

from index.ann import AnnIndex, self_recall_at_k

ANNOY_FILE = "annoy.ann"
IDS_FILE = "ids.npy"
VECTORS_FILE = "vectors.npy"
IDMAP_FILE = "idmap.jsonl"
MANIFEST_FILE = "manifest.json"
ANSWERS_FILE = "answers.npy"
ANSWER_MAP_FILE = "answers.jsonl"
#: folder of re-ranking stages' phrasing vectors (`<vector_key>.npy`, rows in IDS_FILE order)
STAGE_VECTORS_DIR = "stage_vectors"
CURRENT_LINK = "current"
STAGING_PREFIX = ".staging-"
LOCK_SUFFIX = ".lock"
VERSION_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")
#: a staging folder without a build lock (written by a version without locks) is only removed when it
#: is older than this: nothing else tells a killed build from a slow one
STALE_STAGING_SECONDS = 24 * 3600
#: vectors.npy is fp16 (cosine error ~1e-3); near-ties at the 10th place within this are not misses
FP16_TIE_EPS = 2e-3


class IndexVerificationError(Exception):
    """A build folder is incomplete, corrupted or does not meet the recall floor."""


class BuildLocked(RuntimeError):
    """A build version already has a lock file: two builds picked the same version name."""


class UnknownVersion(LookupError):
    """No finished build with that version name exists."""


class EncoderMismatch(ValueError):
    """A build is queried with another encoder, or another runtime, than the one that built it."""


def encoder_runtime(encoder: Any) -> str:
    """How the encoder runs (models/encoders/runtime.py): "torch", "onnx" or "onnx-int8"."""
    return str(getattr(encoder, "runtime", "torch"))


def check_encoder(manifest: dict, encoder: Any) -> None:
    """Refuse to query a build with another encoder, or with a runtime whose vectors differ from the
    build's: int8 vectors sit at cosine ~0.99 from fp32 ones, enough to move calibrated scores and
    near ties. fp32 ONNX and PyTorch agree to 1e-4 (checked at export), so they may mix. A build from
    before runtimes were recorded ran PyTorch."""
    version = manifest.get("version", "?")
    if manifest.get("encoder_id") and encoder.id != manifest["encoder_id"]:
        raise EncoderMismatch(
            f"index {version} was built with encoder {manifest['encoder_id']!r} but {encoder.id!r} is loaded: "
            "rebuild the index (`faq index build`) or set FAQ_ENCODER to the build's encoder")
    built, running = manifest.get("encoder_runtime", "torch"), encoder_runtime(encoder)
    if (built == "onnx-int8") != (running == "onnx-int8"):
        raise EncoderMismatch(
            f"index {version} was built with encoder runtime {built!r} but the encoder runs {running!r}: "
            f"set FAQ_ENCODER_RUNTIME={built} (or leave it unset to follow the build) or rebuild the index")


def check_query_encoder(manifest: dict, query_encoder: Any, setting: str = "FAQ_QUERY_ENCODER") -> None:
    """Refuse a query encoder fitted to another encoder's space than the one that encoded the build."""
    version = manifest.get("version", "?")
    teacher, built = getattr(query_encoder, "teacher", None), manifest.get("encoder_id")
    if built and teacher != built:
        raise EncoderMismatch(
            f"index {version} was encoded by {built!r}, but the query encoder {query_encoder.id!r} was fitted to "
            f"{teacher!r}: set {setting} to a query encoder fitted to {built!r} (`faq train query-encoder "
            f"--teacher ...`), unset it, or rebuild the index with its teacher")


def new_version(now: datetime | None = None) -> str:
    """A sortable, unique version name such as `20261122T010203Z-a1b2c3`."""
    now = now or datetime.now(timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class VersionStore(Protocol):
    """Where a registry's versions also live outside their folders (an Elasticsearch index per version). The
    registry is the one that removes versions, so it is the one that tells its stores which copies go."""

    def delete_versions(self, versions: Sequence[str]) -> list[str]:
        """Delete the copies of these versions (best effort) -> the versions deleted."""

    def prune(self, pruned: Sequence[str], live: set[str]) -> list[str]:
        """After the registry pruned `pruned`: delete the copies no longer needed, never those of `live`
        versions (finished, building, or still searched by servers) -> the versions deleted."""


@dataclass
class VerifyReport:
    version: str
    ok: bool
    checksum_ok: bool
    n_items: int
    self_recall_at_10: float | None = None
    errors: list[str] = field(default_factory=list)


class BuildRegistry:
    """The versions stored under one index directory, and in its `stores` (a version's copies elsewhere)."""

    def __init__(self, index_dir: str | Path, stores: Sequence[VersionStore] = ()):
        self.index_dir = Path(index_dir)
        self.stores = tuple(stores)

    def with_store(self, store: VersionStore) -> "BuildRegistry":
        """This registry with one more store: a copy, or this registry when it has an equal store already."""
        if store in self.stores:
            return self
        twin = copy.copy(self)
        twin.stores = (*self.stores, store)
        return twin

    # --- naming and paths -------------------------------------------------------------------------
    def path(self, version: str) -> Path:
        if not VERSION_RE.match(version):
            raise UnknownVersion(f"not a version name: {version!r} (expected e.g. 20261122T010203Z-a1b2c3)")
        return self.index_dir / version

    def new_version(self, now: datetime | None = None, taken: Iterable[str] = ()) -> str:
        """A new version name that sorts after every existing (or staging) version, even when two
        builds start within the same second: then the hex part counts up from the latest one.
        `taken`: names used elsewhere too (e.g. failed builds recorded in the store, whose folders
        are gone)."""
        version = new_version(now)
        stamp = version.split("-")[0]
        on_disk = (p.name.removeprefix(STAGING_PREFIX).removesuffix(LOCK_SUFFIX)
                   for p in self.index_dir.glob(f"*{stamp}-*")) if self.index_dir.is_dir() else ()
        same_second = sorted(
            name for name in (*on_disk, *taken) if name.startswith(stamp + "-") and VERSION_RE.match(name)
        )
        if same_second:
            latest_hex = int(same_second[-1].split("-")[1], 16)
            if latest_hex >= 0xFFFFFF:
                raise RuntimeError(f"too many builds within {stamp}")
            version = f"{stamp}-{latest_hex + 1:06x}"
        return version

    def staging_path(self, version: str) -> Path:
        return self.index_dir / f"{STAGING_PREFIX}{version}"

    def create_staging(self, version: str) -> Path:
        """An empty folder to write a build into; `commit` renames it into place."""
        self.index_dir.mkdir(parents=True, exist_ok=True)
        staging = self.staging_path(version)
        staging.mkdir()
        return staging

    # --- build locks: which builds still have a live process -----------------------------------
    def build_lock_path(self, version: str) -> Path:
        return self.index_dir / f"{STAGING_PREFIX}{version}{LOCK_SUFFIX}"

    @contextlib.contextmanager
    def build_lock(self, version: str) -> Iterator[Path]:
        """Held by a build for its whole life: an exclusive flock that the kernel drops when the process
        dies, however it dies, so `claim_build` can tell a killed build from a running one. Taken before
        the build's row and staging folder exist and released after both are final, so neither is ever
        seen without it. The file is unlinked before the lock is dropped."""
        self.index_dir.mkdir(parents=True, exist_ok=True)
        path = self.build_lock_path(version)
        # The file appears under its real name already locked (locked under a private name, then
        # hard-linked): a sweep can never find it unlocked while its build is alive.
        tmp = path.with_name(f"{path.name}.tmp-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)  # not inherited by children (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # for people looking at the folder; the lock itself is what counts
            os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise BuildLocked(f"build {version} already has a lock file ({path})") from None
            finally:
                tmp.unlink(missing_ok=True)
            try:
                yield path
            finally:
                path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def claim_build(self, version: str) -> Iterator[str]:
        """Probe a build's lock without waiting. Yields "live" (its process holds the lock), "orphaned"
        (the lock file is there but nobody holds it: the process is gone, and the lock is now held by
        the caller until the block ends, so no one else cleans up the same build at the same time) or
        "unlocked" (no lock file). Call `drop_build_lock` inside the block once the debris is gone."""
        try:
            fd = os.open(self.build_lock_path(version), os.O_RDONLY)
        except FileNotFoundError:
            yield "unlocked"
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield "live"
                return
            yield "orphaned"
        finally:
            os.close(fd)

    def drop_build_lock(self, version: str) -> None:
        self.build_lock_path(version).unlink(missing_ok=True)

    def unfinished(self) -> list[str]:
        """Versions with a staging folder or a build lock file on disk, oldest first."""
        if not self.index_dir.is_dir():
            return []
        names = {p.name.removeprefix(STAGING_PREFIX).removesuffix(LOCK_SUFFIX)
                 for p in self.index_dir.glob(f"{STAGING_PREFIX}*")}
        return sorted(n for n in names if VERSION_RE.match(n))

    def commit(self, staging: Path, version: str) -> Path:
        """Atomically turn a complete staging folder into a version (rename within one filesystem)."""
        if not (staging / MANIFEST_FILE).is_file():
            raise IndexVerificationError(f"{staging}: no {MANIFEST_FILE}, refusing to commit an incomplete build")
        final = self.path(version)
        os.rename(staging, final)
        _fsync_dir(self.index_dir)
        return final

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Serialise pointer switches and pruning between concurrent processes (advisory flock)."""
        self.index_dir.mkdir(parents=True, exist_ok=True)
        with open(self.index_dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # --- reading ---------------------------------------------------------------------------------
    def versions(self) -> list[str]:
        """Finished versions, oldest first."""
        if not self.index_dir.is_dir():
            return []
        return sorted(
            p.name for p in self.index_dir.iterdir()
            if VERSION_RE.match(p.name) and p.is_dir() and (p / MANIFEST_FILE).is_file()
        )

    def read_manifest(self, version: str) -> dict:
        path = self.path(version) / MANIFEST_FILE
        if not path.is_file():
            raise UnknownVersion(f"no finished build {version!r} in {self.index_dir}")
        return json.loads(path.read_text(encoding="utf-8"))

    def list(self) -> list[dict]:
        """Manifests of all versions, oldest first, each with `current: bool` added."""
        current = self.current()
        out = []
        for version in self.versions():
            manifest = self.read_manifest(version)
            manifest["current"] = version == current
            out.append(manifest)
        return out

    def current(self) -> str | None:
        """The version `current` points at, or None before the first build."""
        link = self.index_dir / CURRENT_LINK
        if not link.is_symlink():
            return None
        version = Path(os.readlink(link)).name
        return version if (self.index_dir / version / MANIFEST_FILE).is_file() else None

    def current_dir(self) -> Path | None:
        version = self.current()
        return self.path(version) if version else None

    # --- switching ---------------------------------------------------------------------------------
    def activate(self, version: str, verify: bool = True) -> dict:
        """Point `current` at `version` (rollback or roll forward). The checksum is verified first so a
        corrupted folder is never made current. Returns its manifest."""
        manifest = self.read_manifest(version)
        if verify:
            report = self.verify(version, recall=False)
            if not report.ok:
                raise IndexVerificationError(f"{version}: " + "; ".join(report.errors))
        with self.lock():
            self._switch_current(version)
        return manifest

    def _switch_current(self, version: str) -> None:
        # A relative target keeps the folder relocatable. Creating a temp link and renaming it over
        # `current` is atomic: readers see either the old or the new version, never a missing link.
        tmp = self.index_dir / f".{CURRENT_LINK}.tmp-{secrets.token_hex(4)}"
        os.symlink(version, tmp)
        try:
            os.replace(tmp, self.index_dir / CURRENT_LINK)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.index_dir)

    def prune(self, keep: int) -> list[str]:
        """Delete all but the newest `keep` versions; the current version is always kept (on top of
        `keep` if it is older). Also removes the staging folders of builds whose process is gone (their
        index_builds rows are the store's business: `index.build.sweep_builds` marks them failed), and
        tells the `stores` to delete their copies. Returns the deleted version names."""
        if keep < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep}")
        deleted = []
        with self.lock():
            current = self.current()
            versions = self.versions()
            for version in versions[: max(0, len(versions) - keep)]:
                if version == current:
                    continue
                shutil.rmtree(self.path(version), ignore_errors=True)
                deleted.append(version)
            now = time.time()
            for version in self.unfinished():
                staging = self.staging_path(version)
                with self.claim_build(version) as claim:
                    if claim == "live":
                        continue
                    if claim == "unlocked" and not _older_than(staging, now - STALE_STAGING_SECONDS):
                        continue
                    # the lock file stays: it tells `sweep_builds` that the build's row is an orphan
                    shutil.rmtree(staging, ignore_errors=True)
        if self.stores:
            live = set(self.versions()) | set(self.unfinished()) | self.still_searched()
            for store in self.stores:
                store.prune(deleted, live)
        return deleted

    def still_searched(self) -> set[str]:
        """Versions servers may still search although they are not current (their copies stay on a prune)."""
        return set()

    def discard(self, version: str) -> None:
        """A build that never became a version: its copies in the stores go (its folder is the build's)."""
        for store in self.stores:
            store.delete_versions([version])

    # --- verification -------------------------------------------------------------------------
    def verify(self, version: str, recall: bool = True, sample: int = 1000, recall_floor: float | None = None) -> VerifyReport:
        """Check a finished version: files present, checksum, the index loads, counts match and
        (if `recall`) self-recall@10 against exact search over the stored vectors."""
        if not (self.path(version) / MANIFEST_FILE).is_file():
            raise UnknownVersion(f"no finished build {version!r} in {self.index_dir}")
        return verify_build_dir(self.path(version), recall=recall, sample=sample, recall_floor=recall_floor)


def verify_build_dir(
    build_dir: Path, recall: bool = True, sample: int = 1000, recall_floor: float | None = None
) -> VerifyReport:
    """Verification shared by the build job (on the staging folder) and `faq index verify`."""
    build_dir = Path(build_dir)
    version = build_dir.name.removeprefix(STAGING_PREFIX)
    report = VerifyReport(version=version, ok=False, checksum_ok=False, n_items=0)
    manifest_path = build_dir / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        report.errors.append(f"{MANIFEST_FILE}: {exc}")
        return report
    for name in (ANNOY_FILE, IDS_FILE, VECTORS_FILE, IDMAP_FILE):
        if not (build_dir / name).is_file():
            report.errors.append(f"missing {name}")
    if report.errors:
        return report
    report.checksum_ok = sha256_file(build_dir / ANNOY_FILE) == manifest.get("checksum")
    if not report.checksum_ok:
        report.errors.append(f"{ANNOY_FILE}: sha256 does not match the manifest checksum")
        return report
    dim = int(manifest["dim"])
    index = AnnIndex.load(build_dir / ANNOY_FILE, dim)
    try:
        report.n_items = index.n_items
        ids = np.load(build_dir / IDS_FILE)
        vectors = np.load(build_dir / VECTORS_FILE, mmap_mode="r")
        expected = int(manifest["n_variants"])
        for what, n in (("annoy items", index.n_items), (IDS_FILE, len(ids)), (VECTORS_FILE, len(vectors))):
            if n != expected:
                report.errors.append(f"{what}: {n} entries, manifest says n_variants={expected}")
        if vectors.ndim != 2 or vectors.shape[1] != dim:
            report.errors.append(f"{VECTORS_FILE}: shape {vectors.shape}, manifest says dim={dim}")
        report.errors.extend(_answer_errors(build_dir, manifest, dim))
        if recall and not report.errors:
            report.self_recall_at_10 = self_recall_at_k(
                index, np.asarray(vectors, dtype=np.float32), k=10, search_k=int(manifest.get("search_k", -1)),
                sample=sample, tie_eps=FP16_TIE_EPS,
            )
            if recall_floor is not None and report.self_recall_at_10 < recall_floor:
                report.errors.append(
                    f"self-recall@10 {report.self_recall_at_10:.4f} is below the floor {recall_floor} "
                    f"(n_trees={manifest.get('n_trees')}, search_k={manifest.get('search_k')}): raise them"
                )
    finally:
        index.unload()
    report.ok = not report.errors
    return report


def _answer_errors(build_dir: Path, manifest: dict, dim: int) -> list[str]:
    """The answer segment matches the manifest: present with the right shape when used, else absent."""
    block = manifest.get("answers") or {}
    if not block.get("used"):
        return []
    errors = []
    for name in (ANSWERS_FILE, ANSWER_MAP_FILE):
        if not (build_dir / name).is_file():
            errors.append(f"missing {name} (manifest says answers are used)")
    if errors:
        return errors
    vectors = np.load(build_dir / ANSWERS_FILE, mmap_mode="r")
    with open(build_dir / ANSWER_MAP_FILE, encoding="utf-8") as fh:
        n_rows = sum(1 for _ in fh)
    expected = int(block.get("n_encoded", -1))
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        errors.append(f"{ANSWERS_FILE}: shape {vectors.shape}, manifest says dim={dim}")
    elif not (len(vectors) == n_rows == expected):
        errors.append(f"{ANSWERS_FILE}: {len(vectors)} rows, {ANSWER_MAP_FILE}: {n_rows}, manifest n_encoded={expected}")
    return errors


def _older_than(path: Path, timestamp: float) -> bool:
    try:
        return path.stat().st_mtime < timestamp
    except FileNotFoundError:  # removed meanwhile by another process's clean-up
        return False


def _fsync_dir(path: Path) -> None:
    """Make a rename/symlink durable across a crash (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
