"""The offline build job: KB snapshot -> vectors (phrasings, and answers when the KB has real ones:
index/answers.py) -> Annoy forest -> verified, versioned artifact folder -> atomic switch of `current`.

Safety properties:
- Everything is written into `index_dir/.staging-<version>/` and renamed into place only after it
  verified, so an interrupted or failed build never leaves something that looks like a version and
  never touches `current`. Re-running a build is always safe: it just makes a new version.
- Verification re-opens the saved file from disk, checks its checksum and counts, and measures
  self-recall@10 of Annoy against exact search; below `recall_floor` the build fails.
- The store's `index_builds` row goes building -> ready | failed (with the error). SIGTERM and SIGINT
  raise `BuildInterrupted` in the building thread (when it is the main thread) so this cleanup runs
  for them too; only SIGKILL (or a power cut) skips it.
- The build holds an exclusive flock on `index_dir/.staging-<version>.lock` for its whole life
  (`BuildRegistry.build_lock`). `sweep_builds` uses it to find builds whose process is gone, however
  it died, without touching running ones (also those of other processes sharing the database and the
  index directory): their rows become failed and their staging folders are removed.
- The lexical (BM25) indexes of the baseline arms are built under the same version (index/lexical.py):
  tantivy inside the build folder, and an Elasticsearch index `<prefix>-<version>` when an ES URL is
  given; pruned versions lose their Elasticsearch index too.
- With a vector store (`FAQ_VECTOR_STORE=elasticsearch`: the registry's `vector_store`, index/elasticsearch/)
  the phrasing and answer vectors are also written into a new Elasticsearch index of the version and
  verified there before the version can be committed; a failed build deletes that index.
"""
from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator

import numpy as np

from index import artifacts
from index.ann import AnnIndex
from index.artifacts import (
    BuildRegistry, IndexVerificationError, encoder_runtime, sha256_file, verify_build_dir, write_json_atomic,
)
from index.answers import AnswerVectors, answer_policy
from index.calibration import calibrate
from index.elasticsearch.lexical import EsLexicalIndexes
from index.lexical import build_lexical
from models.encoders.base import QueryView

log = logging.getLogger(__name__)

DEFAULT_RECALL_FLOOR = 0.9
VERIFY_SAMPLE = 1000


class BuildError(Exception):
    """The build cannot run (empty KB, bad parameters, encoder output of the wrong shape)."""


class BuildInterrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived during a build. A KeyboardInterrupt, so that code catching Exception
    on the way (encoders, clients) lets it through to the build's cleanup."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by that signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class _Interrupts:
    """SIGTERM/SIGINT handlers for the duration of one build. By default SIGTERM ends the process
    without running any Python, which would leave the build's row at "building" and its staging
    folder on disk; raising instead unwinds through the build's cleanup. Signals can only be handled
    in the main thread, so a build in another thread keeps the process's handlers (its caller owns
    them). The first signal is the one that counts: later ones, or any signal once `defer()` was
    called (cleanup and the final commit must run to the end), are only remembered in `pending`."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.pending: int | None = None
        self.deferred = False

    def install(self) -> "_Interrupts":
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self.SIGNALS:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:  # ignored on purpose, or not ours to replace
                continue
            signal.signal(signum, self._handle)
            self.previous[signum] = previous
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.pending is not None:
            return
        self.pending = signum
        if not self.deferred:
            raise BuildInterrupted(signum)

    def defer(self) -> None:
        self.deferred = True

    def restore(self) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        self.previous.clear()


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


#: texts per encoder call during a build (progress is reported per call)
ENCODE_CHUNK = 1024


def encode_in_batches(encoder: Any, texts: list[str], batch_size: int, progress: bool) -> np.ndarray:
    """Encode with a tqdm bar over sentences; checks the encoder keeps its contract (shape, unit norm).

    Texts go to the encoder shortest first (by characters, a cheap stand-in for tokens), so every batch
    holds texts of about one length and pads little: KB phrasings run from 2 to 40+ words, and a batch
    padded to its longest member wastes most of its work on padding."""
    from tqdm import tqdm

    out = np.empty((len(texts), encoder.dim), dtype=np.float32)
    order = np.argsort([len(t) for t in texts], kind="stable")
    # the encoder gets CHUNK texts per call and batches them itself: fewer calls, and the ONNX runtime
    # tokenizes a call's texts in parallel (measured: 25 % more sentences/s than one call per batch)
    chunk = max(batch_size, ENCODE_CHUNK)
    with tqdm(total=len(texts), unit="sent", desc="encode", disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(texts), chunk):
            rows = order[start : start + chunk]
            batch = [texts[i] for i in rows]
            vecs = np.asarray(encoder.encode(batch, batch_size=batch_size), dtype=np.float32)
            if vecs.shape != (len(batch), encoder.dim):
                raise BuildError(f"encoder {encoder.id!r} returned shape {vecs.shape}, expected ({len(batch)}, {encoder.dim})")
            out[rows] = vecs
            bar.update(len(batch))
    if not np.all(np.isfinite(out)):
        raise BuildError(f"encoder {encoder.id!r} produced NaN/inf vectors")
    norms = np.linalg.norm(out, axis=1)
    if getattr(encoder, "unit", True) and not np.allclose(norms, 1.0, atol=1e-3):
        raise BuildError(f"encoder {encoder.id!r} vectors are not L2-normalised (norms {norms.min():.4f}..{norms.max():.4f})")
    return out


def write_stage_vectors(staging: Any, texts: list[str], sources: Any, batch_size: int,
                        say: Callable[[str], None]) -> dict[str, dict]:
    """Each source's phrasing vectors (`stage_vectors/<vector_key>.npy`, fp16, rows in build order): a
    re-ranking stage that compares sentence vectors (the Siamese matcher) then encodes only the query per
    request. A source has `vector_key`, `id` and `sentence_vectors(texts, batch_size) -> (n, D)`."""
    out: dict[str, dict] = {}
    for source in sources:
        key = str(source.vector_key)
        if key in out:
            continue
        t = time.perf_counter()
        vectors = np.asarray(source.sentence_vectors(texts, batch_size=max(batch_size, 256)), dtype=np.float32)
        if vectors.shape[0] != len(texts):
            raise BuildError(f"stage {source.id} gave {vectors.shape[0]} vectors for {len(texts)} phrasings")
        folder = staging / artifacts.STAGE_VECTORS_DIR
        folder.mkdir(exist_ok=True)
        np.save(folder / f"{key}.npy", vectors.astype(np.float16))
        secs = time.perf_counter() - t
        out[key] = {"stage": str(source.id), "rows": int(vectors.shape[0]), "dim": int(vectors.shape[1]),
                    "seconds": round(secs, 3)}
        say(f"stage vectors: {source.id} ({vectors.shape[1]}-d) for {len(texts)} phrasings in {secs:.1f}s")
    return out


@contextlib.contextmanager
def timed(timings: dict[str, float], step: str) -> Iterator[None]:
    """Record how long the block took as `timings[step]` (the manifest's `timings` block, in seconds)."""
    # a step that raises records no time: the failed build's row keeps the steps that finished
    t = time.perf_counter()
    yield
    timings[step] = time.perf_counter() - t


@dataclass(frozen=True)
class BuildOptions:
    """How `build_index` builds a version (its keyword arguments of the same names)."""

    n_trees: int
    search_k: int = -1
    batch_size: int = 64
    progress: bool = False
    recall_floor: float = DEFAULT_RECALL_FLOOR
    encoder_spec: str | None = None
    lexical: bool = True
    es_url: str | None = None
    es_index_prefix: str = "faq"
    stage_vectors: Any = ()
    query_encoder: dict | None = None
    query_side: Any = None
    languages: Any = None


@dataclass
class VersionBuild:
    """One version being written into its staging folder, step by step: each step writes its files and returns
    its manifest block, and `timed(step)` records how long it took in the manifest's `timings`."""

    staging: Path
    version: str
    snapshot: Any
    encoder: Any
    options: BuildOptions
    say: Callable[[str], None]
    timings: dict[str, float]
    texts: list[str] = field(default_factory=list)
    vectors: Any = None
    answers: AnswerVectors | None = None
    answer_texts: list[str] = field(default_factory=list)

    def timed(self, step: str) -> contextlib.AbstractContextManager[None]:
        return timed(self.timings, step)

    def encode(self, texts: list[str], progress: bool | None = None, encoder: Any = None) -> np.ndarray:
        return encode_in_batches(self.encoder if encoder is None else encoder, texts, self.options.batch_size,
                                 self.options.progress if progress is None else progress)

    @property
    def faq_ids(self) -> list[str]:
        return [v.faq_id for v in self.snapshot.variants]

    @property
    def served_vectors(self) -> np.ndarray:
        """The phrasing vectors as the build folder serves them (fp16)."""
        return self.vectors.astype(np.float16).astype(np.float32)

    @property
    def served_answers(self) -> AnswerVectors | None:
        if self.answers is None:
            return None
        return AnswerVectors(self.answers.faq_ids, self.answers.vectors.astype(np.float16).astype(np.float32))

    def encode_phrasings(self) -> None:
        self.texts = [v.question for v in self.snapshot.variants]
        with self.timed("encode_s"):
            self.vectors = self.encode(self.texts)
        self.timings["encode_sentences_per_s"] = len(self.texts) / max(self.timings["encode_s"], 1e-9)
        device = getattr(self.encoder, "device", None)
        self.say(f"encoded {len(self.texts)} sentences in {self.timings['encode_s']:.1f}s "
                 f"({self.timings['encode_sentences_per_s']:.0f} sentences/s, encoder {self.encoder.id}"
                 f"{', device ' + str(device) if device else ''})")

    def encode_answers(self) -> dict:
        """-> the `answers` block: whether answers are evidence in this build, and why."""
        policy = answer_policy(self.snapshot.faqs)
        if policy.used:
            with self.timed("encode_answers_s"):
                self.answer_texts = [self.snapshot.faqs[f][0] for f in policy.faq_ids]
                self.answers = AnswerVectors(policy.faq_ids, self.encode(self.answer_texts), self.answer_texts)
        self.say(f"answers: {policy.reason}"
                 + (f" (encoded in {self.timings['encode_answers_s']:.1f}s)" if self.answers is not None else ""))
        return policy.report()

    def write_annoy(self) -> str:
        """The Annoy forest, ids, vectors, id map (and answer segment) on disk -> the forest's checksum."""
        with self.timed("annoy_build_s"):
            ann = AnnIndex.build(self.vectors, self.options.n_trees)
        staging = self.staging
        with self.timed("save_s"):
            ann.save(staging / artifacts.ANNOY_FILE)
            ann.unload()
            variants = self.snapshot.variants
            np.save(staging / artifacts.IDS_FILE, np.array([v.variant_id for v in variants], dtype=np.int64))
            np.save(staging / artifacts.VECTORS_FILE, self.vectors.astype(np.float16))
            with open(staging / artifacts.IDMAP_FILE, "w", encoding="utf-8") as fh:
                for v in variants:
                    fh.write(json.dumps({"variant_id": v.variant_id, "faq_id": v.faq_id, "question": v.question},
                                        ensure_ascii=False) + "\n")
            if self.answers is not None:
                np.save(staging / artifacts.ANSWERS_FILE, self.answers.vectors.astype(np.float16))
                with open(staging / artifacts.ANSWER_MAP_FILE, "w", encoding="utf-8") as fh:
                    for faq_id, text in zip(self.answers.faq_ids, self.answer_texts):
                        fh.write(json.dumps({"faq_id": faq_id, "answer": text}, ensure_ascii=False) + "\n")
            checksum = sha256_file(staging / artifacts.ANNOY_FILE)
        return checksum

    def store_vectors(self, vector_store: Any) -> dict | None:
        """-> the `vector_store` block, when the registry has one (None: the build folder alone)."""
        if vector_store is None:
            return None
        served = self.served_answers  # answers as the build folder serves them: both copies give the same cosines
        with self.timed("vector_store_s"):
            block = vector_store.build(
                self.version, [v.variant_id for v in self.snapshot.variants], self.faq_ids, self.vectors,
                served.faq_ids if served is not None else (), served.vectors if served is not None else None)
        self.say(f"vector store: {block['n_phrasings']} phrasings and {block['n_answers']} answers in "
                 f"Elasticsearch index {block['index']} ({block['index_options']['type']}) in "
                 f"{self.timings['vector_store_s']:.1f}s")
        return block

    def write_stage_vectors(self) -> dict | None:
        """-> the `stage_vectors` block (None: no stage stores phrasing vectors)."""
        if not self.options.stage_vectors:
            return None
        with self.timed("stage_vectors_s"):
            return write_stage_vectors(self.staging, self.texts, self.options.stage_vectors, self.options.batch_size,
                                       self.say)

    def write_lexical(self) -> dict | None:
        """-> the `lexical` block (None: built without the lexical arms' indexes)."""
        o = self.options
        if not o.lexical:
            return None
        with self.timed("lexical_s"):
            block = build_lexical(self.staging, self.version, self.snapshot.variants, es_url=o.es_url,
                                  es_prefix=o.es_index_prefix, languages=o.languages)
        es_block = block.get("elasticsearch") or {}
        self.say(f"lexical: tantivy {block['tantivy']['n_docs']} docs"
                 + (f"; Elasticsearch index {es_block['index']}: "
                    + (f"{es_block['n_docs']} docs" if "n_docs" in es_block else f"NOT built ({es_block.get('error')})")
                    if es_block else ""))
        return block

    def verify(self) -> dict:
        """What is on disk, checked exactly as a server would open it -> the `verify` block."""
        floor = self.options.recall_floor
        with self.timed("verify_s"):
            verification = verify_build_dir(self.staging, recall=True, sample=VERIFY_SAMPLE, recall_floor=floor)
        if not verification.ok:
            raise IndexVerificationError(f"build {self.version} failed verification: " + "; ".join(verification.errors))
        self.say(f"verified: self-recall@10 = {verification.self_recall_at_10:.4f} (floor {floor})")
        return {"self_recall_at_10": verification.self_recall_at_10,
                "sample": min(VERIFY_SAMPLE, len(self.texts)), "recall_floor": floor}

    def calibrate(self) -> dict:
        """-> the `calibration` block, fitted on the served (fp16) vectors: what the matcher will see."""
        with self.timed("calibrate_s"):
            ann = AnnIndex.load(self.staging / artifacts.ANNOY_FILE, self.encoder.dim)
            try:
                side = self.options.query_side
                # a held-out phrasing plays a query; where queries are encoded apart, encoded as one
                asks = (None if not isinstance(side, QueryView)
                        else lambda rows: self.encode([self.texts[r] for r in rows], False, side))
                block = calibrate(ann, self.vectors, self.faq_ids, self.encoder, search_k=self.options.search_k,
                                  answers=self.served_answers, query_encode=asks)
            finally:
                ann.unload()
        return block

    def decision_block(self) -> dict:
        """-> the `decision` block: the decision model's references and the expected-precision replay."""
        from index import decision

        with self.timed("decision_s"):
            background = decision.read_background()
            view = decision.KbView.build(self.served_vectors, self.faq_ids, self.texts, self.served_answers,
                                         {f: a for f, (a, _) in self.snapshot.faqs.items()})
            # the replayed queries (held-out phrasings, background questions) go through the query side, as
            # real queries will: in balanced mode its cosines are not the FAQ-side encoder's
            query_side = self.options.query_side
            asker = self.encoder if query_side is None else query_side
            if query_side is not None:
                view.query_encode = lambda t: self.encode(t, False, query_side)
            bg_vectors = decision.background_vectors(asker, background, lambda t: self.encode(t, False, asker))
            block = decision.build_block(view, background, bg_vectors, decision.load_model())
        self.say(f"decision: references and expected-precision replay over {len(background)} background questions "
                 f"in {self.timings['decision_s']:.1f}s")
        return block


def write_version(build: VersionBuild, *, started_at: datetime, t_total: float, vector_store: Any = None) -> dict:
    """Every step of one version, in order, into its staging folder: verified and calibrated -> its manifest."""
    o, encoder, snapshot = build.options, build.encoder, build.snapshot
    build.encode_phrasings()
    answers = build.encode_answers()
    checksum = build.write_annoy()
    vector_block = build.store_vectors(vector_store)
    stage_block = build.write_stage_vectors()
    lexical_block = build.write_lexical()
    manifest: dict[str, Any] = {
        "version": build.version,
        "encoder_id": encoder.id,
        "encoder_spec": o.encoder_spec,
        "encoder_runtime": encoder_runtime(encoder),
        "query_encoder": o.query_encoder,
        "dim": int(encoder.dim),
        "metric": "angular",
        "n_faqs": len(snapshot.faqs),
        "n_variants": len(snapshot.variants),
        "kb_revision": snapshot.revision,
        "checksum": checksum,
        "n_trees": o.n_trees,
        "search_k": o.search_k,
        "annoy_bytes": (build.staging / artifacts.ANNOY_FILE).stat().st_size,
        "created_at": started_at.isoformat(),
        "answers": answers,
    }
    if lexical_block is not None:
        manifest["lexical"] = lexical_block
    if vector_block is not None:
        manifest["vector_store"] = vector_block
    if stage_block:
        manifest["stage_vectors"] = stage_block
    write_json_atomic(build.staging / artifacts.MANIFEST_FILE, manifest)  # verification reads it from disk
    manifest["verify"] = build.verify()
    manifest["calibration"] = build.calibrate()
    manifest["decision"] = build.decision_block()
    cal = manifest["calibration"]
    build.say(f"calibration ({cal['source']}): p = sigmoid({cal['a']:.3f} * cos + {cal['b']:.3f}) "
              f"from {cal['n_positive']}/{cal['n_examples']} positive examples")
    build.timings["total_s"] = time.perf_counter() - t_total
    manifest["timings"] = {k: round(v, 4) for k, v in build.timings.items()}
    write_json_atomic(build.staging / artifacts.MANIFEST_FILE, manifest)
    return manifest


def build_index(
    store: Any,
    encoder: Any,
    registry: BuildRegistry,
    n_trees: int,
    search_k: int = -1,
    batch_size: int = 64,
    progress: bool = False,
    *,
    recall_floor: float = DEFAULT_RECALL_FLOOR,
    report: Callable[[str], None] | None = None,
    encoder_spec: str | None = None,
    lexical: bool = True,
    es_url: str | None = None,
    es_index_prefix: str = "faq",
    stage_vectors: Any = (),
    query_encoder: dict | None = None,
    query_side: Any = None,
    languages: Any = None,
) -> dict:
    """Build and verify a new index version; returns its manifest. The version is never made current here:
    releasing it (app/release/: gate, activate, prune) is the service's decision, not the index's.

    `report`: called with one-line human messages (the CLI prints them).
    `encoder_spec`: how to load the encoder again ("minilm" or a model folder); recorded in the
    manifest so the service serves this build with the encoder that built it.
    `query_encoder`: {spec, id, teacher} of the query encoder the build is served with (balanced mode), recorded
    so the service loads it when FAQ_QUERY_ENCODER is unset; `query_side` is that encoder, loaded: the decision
    block's replayed queries are encoded by it.
    `lexical`: also build the BM25 index(es) of the lexical arms (tantivy; Elasticsearch at `es_url`
    when given, as index `<es_index_prefix>-<version>`), each phrasing analysed in its language (`languages`,
    the KB's setting: index/lexical.py `doc_languages`).
    `stage_vectors`: re-ranking stages whose phrasing-side vectors are stored with the build
    (`write_stage_vectors`; app/stages `vector_stages` picks them from FAQ_RERANKER).
    The registry's `vector_store` (index/elasticsearch/vectors.py EsBuildRegistry), if any, also gets the
    build's vectors. This version, when it fails, loses its copies in the registry's stores
    (with `lexical` and `es_url`, the BM25 index there is one of them).
    Raises BuildError / IndexVerificationError.
    """
    if n_trees < 1:
        raise BuildError(f"n_trees must be >= 1, got {n_trees}")
    if search_k < -1 or search_k == 0:
        raise BuildError(f"search_k must be -1 (Annoy default n_trees*k) or >= 1, got {search_k}")
    if batch_size < 1:
        raise BuildError(f"batch_size must be >= 1, got {batch_size}")
    if not 0.0 <= recall_floor <= 1.0:
        raise BuildError(f"recall_floor must be in [0, 1], got {recall_floor}")
    say = report or (lambda msg: log.info(msg))
    if query_side is None and hasattr(encoder, "encode_queries"):  # queries are encoded apart (multilingual)
        query_side = QueryView(encoder)
    options = BuildOptions(n_trees, search_k, batch_size, progress, recall_floor, encoder_spec, lexical, es_url,
                           es_index_prefix, stage_vectors, query_encoder, query_side, languages)
    if lexical and es_url:
        registry = registry.with_store(EsLexicalIndexes(es_url, es_index_prefix))
    interrupts = _Interrupts().install()
    try:
        timings: dict[str, float] = {}
        t_total = time.perf_counter()

        with timed(timings, "snapshot_s"):
            snapshot = store.snapshot()
        variants = snapshot.variants
        if not variants:
            raise BuildError("the KB has no question variants: import one first (faq kb import PATH)")

        version = registry.new_version(taken=(b["version"] for b in store.list_builds()))
        with registry.build_lock(version):
            started_at = _utcnow()
            staging = None
            recorded = False
            try:
                store.record_build(
                    version=version, encoder_id=encoder.id, n_faqs=len(snapshot.faqs), n_variants=len(variants),
                    dim=encoder.dim, status="building", n_trees=n_trees, search_k=search_k, started_at=started_at,
                )
                recorded = True
                staging = registry.create_staging(version)

                build = VersionBuild(staging, version, snapshot, encoder, options, say, timings)
                manifest = write_version(build, started_at=started_at, t_total=t_total,
                                         vector_store=getattr(registry, "vector_store", None))

                interrupts.defer()  # from here on the build is as good as done: finish it rather than undo it
                registry.commit(staging, version)
                staging = None
            except BaseException as exc:  # also KeyboardInterrupt: the row must not stay "building"
                interrupts.defer()  # a second signal must not cut the cleanup short
                if staging is not None:
                    shutil.rmtree(staging, ignore_errors=True)
                    registry.discard(version)  # the version never became one: its copies elsewhere go too
                try:
                    if recorded:
                        store.update_build(version, status="failed", finished_at=_utcnow(), timings=timings,
                                           error=f"{type(exc).__name__}: {exc}"[:2000])
                except Exception:  # the original error matters more than the bookkeeping one
                    log.exception("could not record the failed build %s", version)
                raise
            store.update_build(version, status="ready", finished_at=_utcnow(), timings=manifest["timings"])
        if interrupts.pending is not None:
            say(f"{signal.Signals(interrupts.pending).name} arrived while the build was being committed: "
                "it was finished first")
        return manifest
    finally:
        interrupts.restore()


#: the error of a build row whose process is gone
ORPHAN_ERROR = "orphaned: the build process is gone"
#: a "building" row with neither a lock file nor a staging folder is only an orphan this long after it
#: started: its process may be a build by a version without locks that has not made its folder yet
ORPHAN_GRACE_SECONDS = 15 * 60


@dataclass
class SweepReport:
    """What `sweep_builds` did (or, dry, would do), as version lists."""

    failed: list[str] = field(default_factory=list)  # rows marked failed
    removed: list[str] = field(default_factory=list)  # staging folders removed
    live: list[str] = field(default_factory=list)  # builds whose process still holds the lock: untouched
    waiting: list[str] = field(default_factory=list)  # no lock to ask, too recent to call orphaned: untouched

    def summary(self) -> str:
        parts = [f"{len(self.failed)} orphaned build(s) marked failed", f"{len(self.removed)} staging folder(s) removed"]
        if self.live:
            parts.append(f"{len(self.live)} running: {', '.join(self.live)}")
        if self.waiting:
            parts.append(f"{len(self.waiting)} without a lock, left alone for now: {', '.join(self.waiting)}")
        return "; ".join(parts)


def sweep_builds(
    store: Any, registry: BuildRegistry, *, grace_s: float = ORPHAN_GRACE_SECONDS,
    stale_staging_s: float = artifacts.STALE_STAGING_SECONDS, dry_run: bool = False, now: datetime | None = None,
) -> SweepReport:
    """Clean up after builds whose process died without its cleanup (SIGKILL, OOM killer, power cut):
    mark their "building" rows failed (`ORPHAN_ERROR`) and remove their staging folders.

    Safe to run from several processes at once, next to running builds, all sharing one database and
    one index directory. A build is an orphan when:
    - its lock file exists and the lock can be taken: the kernel dropped it with the process. The
      sweep holds it while cleaning up, so two sweeps never clean the same build.
    - it has no lock file (a build by a version without locks, or its lock file was deleted) and
      either its staging folder is older than `stale_staging_s` (24 h), or it has no staging folder
      and its row started more than `grace_s` (15 min) ago.
    A build whose lock is held is never touched, however old. Rows are only changed while still
    "building" (a build that finishes meanwhile keeps its own status)."""
    now = now or _utcnow()
    report = SweepReport()
    rows = {b["version"]: b for b in store.list_builds(status="building")}
    for version in sorted(set(rows) | set(registry.unfinished())):
        row = rows.get(version)
        staging = registry.staging_path(version)
        with registry.claim_build(version) as claim:
            if claim == "live":
                report.live.append(version)
                continue
            if claim == "unlocked":
                try:
                    staging_age = now.timestamp() - staging.stat().st_mtime
                except FileNotFoundError:
                    staging_age = None
                if staging_age is None and row is None:
                    continue  # it finished between the listing and now
                if staging_age is not None:
                    orphaned = staging_age > stale_staging_s
                else:
                    orphaned = (now - row["started_at"]).total_seconds() > grace_s
                if not orphaned:
                    report.waiting.append(version)
                    continue
            if staging.is_dir():
                if not dry_run:
                    try:
                        shutil.rmtree(staging)
                    except OSError:  # keep the lock file: the next sweep tries again
                        log.exception("could not remove the staging folder %s of orphaned build %s", staging, version)
                        continue
                report.removed.append(version)
            if row is not None and (dry_run or store.fail_build_if_building(version, ORPHAN_ERROR)):
                report.failed.append(version)
            if claim == "orphaned" and not dry_run:
                registry.drop_build_lock(version)
    if not dry_run and (report.failed or report.removed):
        log.info("build sweep: %s", report.summary())
    return report
