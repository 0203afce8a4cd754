"""The offline build job: KB snapshot -> vectors (phrasings, and answers when the KB has real ones:
index/answers.py) -> Annoy forest -> verified, versioned artifact folder -> atomic switch of `current`.

Safety properties:
- Everything is written into `index_dir/.staging-<version>/` and renamed into place only after it
  verified, so an interrupted or failed build never leaves something that looks like a version and
  never touches `current`. Re-running a build is always safe: it just makes a new version.
- Verification re-opens the saved file from disk, checks its checksum and counts, and measures
  self-recall@10 of Annoy against exact search; below `recall_floor` the build fails.
- The store's `index_builds` row goes building -> ready | failed (with the error).
- The lexical (BM25) indexes of the baseline arms are built under the same version (index/lexical.py):
  tantivy inside the build folder, and an Elasticsearch index `<prefix>-<version>` when an ES URL is
  given; pruned versions lose their Elasticsearch index too.
"""
from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable

import numpy as np

from index import artifacts
from index.ann import AnnIndex
from index.artifacts import (
    BuildRegistry, IndexVerificationError, encoder_runtime, sha256_file, verify_build_dir, write_json_atomic,
)
from index.answers import AnswerVectors, answer_policy
from index.calibration import calibrate
from index.lexical import build_lexical, delete_es_indexes, es_index_name

log = logging.getLogger(__name__)

DEFAULT_RECALL_FLOOR = 0.9
VERIFY_SAMPLE = 1000


class BuildError(Exception):
    """The build cannot run (empty KB, bad parameters, encoder output of the wrong shape)."""


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
    if not np.allclose(norms, 1.0, atol=1e-3):
        raise BuildError(f"encoder {encoder.id!r} vectors are not L2-normalised (norms {norms.min():.4f}..{norms.max():.4f})")
    return out


def build_index(
    store: Any,
    encoder: Any,
    registry: BuildRegistry,
    n_trees: int,
    search_k: int = -1,
    batch_size: int = 64,
    progress: bool = False,
    *,
    keep_versions: int | None = None,
    recall_floor: float = DEFAULT_RECALL_FLOOR,
    activate: bool = True,
    report: Callable[[str], None] | None = None,
    encoder_spec: str | None = None,
    lexical: bool = True,
    es_url: str | None = None,
    es_index_prefix: str = "faq",
) -> dict:
    """Build, verify and (by default) activate a new index version; returns its manifest.

    `keep_versions`: prune to that many versions afterwards (None: keep all).
    `report`: called with one-line human messages (the CLI prints them).
    `encoder_spec`: how to load the encoder again ("minilm" or a model folder); recorded in the
    manifest so the service serves this build with the encoder that built it.
    `lexical`: also build the BM25 index(es) of the lexical arms (tantivy; Elasticsearch at `es_url`
    when given, as index `<es_index_prefix>-<version>`).
    Raises BuildError / IndexVerificationError; in that case `current` is unchanged.
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
    timings: dict[str, float] = {}
    t_total = time.perf_counter()

    t = time.perf_counter()
    snapshot = store.snapshot()
    timings["snapshot_s"] = time.perf_counter() - t
    variants = snapshot.variants
    if not variants:
        raise BuildError("the KB has no question variants: import one first (faq kb import PATH)")

    version = registry.new_version(taken=(b["version"] for b in store.list_builds()))
    started_at = _utcnow()
    store.record_build(
        version=version, encoder_id=encoder.id, n_faqs=len(snapshot.faqs), n_variants=len(variants),
        dim=encoder.dim, status="building", n_trees=n_trees, search_k=search_k, started_at=started_at,
    )
    staging = None
    try:
        staging = registry.create_staging(version)

        t = time.perf_counter()
        texts = [v.question for v in variants]
        vectors = encode_in_batches(encoder, texts, batch_size, progress)
        timings["encode_s"] = time.perf_counter() - t
        timings["encode_sentences_per_s"] = len(texts) / max(timings["encode_s"], 1e-9)
        say(f"encoded {len(texts)} sentences in {timings['encode_s']:.1f}s "
            f"({timings['encode_sentences_per_s']:.0f} sentences/s, encoder {encoder.id}"
            f"{', device ' + str(getattr(encoder, 'device', '')) if getattr(encoder, 'device', None) else ''})")

        t = time.perf_counter()
        policy = answer_policy(snapshot.faqs)
        answers = None
        if policy.used:
            answer_texts = [snapshot.faqs[f][0] for f in policy.faq_ids]
            answers = AnswerVectors(policy.faq_ids, encode_in_batches(encoder, answer_texts, batch_size, progress),
                                    answer_texts)
            timings["encode_answers_s"] = time.perf_counter() - t
        say(f"answers: {policy.reason}"
            + (f" (encoded in {timings['encode_answers_s']:.1f}s)" if answers is not None else ""))

        t = time.perf_counter()
        ann = AnnIndex.build(vectors, n_trees)
        timings["annoy_build_s"] = time.perf_counter() - t

        t = time.perf_counter()
        ann.save(staging / artifacts.ANNOY_FILE)
        ann.unload()
        np.save(staging / artifacts.IDS_FILE, np.array([v.variant_id for v in variants], dtype=np.int64))
        np.save(staging / artifacts.VECTORS_FILE, vectors.astype(np.float16))
        with open(staging / artifacts.IDMAP_FILE, "w", encoding="utf-8") as fh:
            for v in variants:
                fh.write(json.dumps({"variant_id": v.variant_id, "faq_id": v.faq_id, "question": v.question},
                                    ensure_ascii=False) + "\n")
        if answers is not None:
            np.save(staging / artifacts.ANSWERS_FILE, answers.vectors.astype(np.float16))
            with open(staging / artifacts.ANSWER_MAP_FILE, "w", encoding="utf-8") as fh:
                for faq_id, text in zip(answers.faq_ids, answer_texts):
                    fh.write(json.dumps({"faq_id": faq_id, "answer": text}, ensure_ascii=False) + "\n")
        checksum = sha256_file(staging / artifacts.ANNOY_FILE)
        timings["save_s"] = time.perf_counter() - t

        lexical_block = None
        if lexical:
            t = time.perf_counter()
            lexical_block = build_lexical(staging, version, variants, es_url=es_url, es_prefix=es_index_prefix)
            timings["lexical_s"] = time.perf_counter() - t
            es_block = lexical_block.get("elasticsearch") or {}
            say(f"lexical: tantivy {lexical_block['tantivy']['n_docs']} docs"
                + (f"; Elasticsearch index {es_block['index']}: "
                   + (f"{es_block['n_docs']} docs" if "n_docs" in es_block else f"NOT built ({es_block.get('error')})")
                   if es_block else ""))

        manifest: dict[str, Any] = {
            "version": version,
            "encoder_id": encoder.id,
            "encoder_spec": encoder_spec,
            "encoder_runtime": encoder_runtime(encoder),
            "dim": int(encoder.dim),
            "metric": "angular",
            "n_faqs": len(snapshot.faqs),
            "n_variants": len(variants),
            "kb_revision": snapshot.revision,
            "checksum": checksum,
            "n_trees": n_trees,
            "search_k": search_k,
            "annoy_bytes": (staging / artifacts.ANNOY_FILE).stat().st_size,
            "created_at": started_at.isoformat(),
            "answers": policy.report(),
        }
        if lexical_block is not None:
            manifest["lexical"] = lexical_block
        write_json_atomic(staging / artifacts.MANIFEST_FILE, manifest)

        # Verify what is on disk, exactly as a server would open it.
        t = time.perf_counter()
        verification = verify_build_dir(staging, recall=True, sample=VERIFY_SAMPLE, recall_floor=recall_floor)
        timings["verify_s"] = time.perf_counter() - t
        if not verification.ok:
            raise IndexVerificationError(f"build {version} failed verification: " + "; ".join(verification.errors))
        manifest["verify"] = {
            "self_recall_at_10": verification.self_recall_at_10,
            "sample": min(VERIFY_SAMPLE, len(variants)),
            "recall_floor": recall_floor,
        }
        say(f"verified: self-recall@10 = {verification.self_recall_at_10:.4f} (floor {recall_floor})")

        t = time.perf_counter()
        ann = AnnIndex.load(staging / artifacts.ANNOY_FILE, encoder.dim)
        try:
            # the served vectors are the fp16 ones: calibrate on what the matcher will see
            stored_answers = None if answers is None else AnswerVectors(
                answers.faq_ids, answers.vectors.astype(np.float16).astype(np.float32))
            manifest["calibration"] = calibrate(ann, vectors, [v.faq_id for v in variants], encoder,
                                                search_k=search_k, answers=stored_answers)
        finally:
            ann.unload()
        timings["calibrate_s"] = time.perf_counter() - t
        cal = manifest["calibration"]
        say(f"calibration ({cal['source']}): p = sigmoid({cal['a']:.3f} * cos + {cal['b']:.3f}) "
            f"from {cal['n_positive']}/{cal['n_examples']} positive examples")

        timings["total_s"] = time.perf_counter() - t_total
        manifest["timings"] = {k: round(v, 4) for k, v in timings.items()}
        write_json_atomic(staging / artifacts.MANIFEST_FILE, manifest)

        registry.commit(staging, version)
        staging = None
        if activate:
            registry.activate(version, verify=False)  # just verified above
        if keep_versions is not None:
            pruned = registry.prune(keep_versions)
            if pruned:
                say(f"pruned old versions: {', '.join(pruned)}")
                if lexical and es_url:
                    delete_es_indexes(es_url, [es_index_name(es_index_prefix, v) for v in pruned])
    except BaseException as exc:  # also KeyboardInterrupt: the row must not stay "building"
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
            if lexical and es_url:  # the version never became one: its Elasticsearch index goes too
                delete_es_indexes(es_url, [es_index_name(es_index_prefix, version)])
        try:
            store.update_build(version, status="failed", finished_at=_utcnow(), timings=timings,
                               error=f"{type(exc).__name__}: {exc}"[:2000])
        except Exception:  # the original error matters more than the bookkeeping one
            log.exception("could not record the failed build %s", version)
        raise
    store.update_build(version, status="ready", finished_at=_utcnow(), timings=manifest["timings"])
    return manifest
