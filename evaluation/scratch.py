"""The scratch pipeline every evaluation and benchmark measures: the product's own path on a KB, in a work
folder of its own and never in the configured data directory.

`scratch_pipeline` imports the KB into a fresh SQLite store (Alembic migrations, `import_records`),
builds and activates an index with `index.build.build_index` (Annoy, the lexical index, the calibration
and decision references, the stages' stored vectors), loads the build as the service does (the build plus
the store's KB) and assembles the pipeline with app/match/assembly.py `build_pipeline`: options come from the
caller's settings, so the numbers describe what `faq serve` would answer with the same settings.

With a `fingerprint` (`faq eval ab`), a work folder whose store and build were made for an equal
fingerprint is reused instead of rebuilt.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

DB_FILE = "eval.db"
INDEX_DIR = "indexes"
FINGERPRINT_FILE = "fingerprint.json"


@dataclass
class Scratch:
    """A KB imported, built and served in a work folder, and the pipeline over it."""

    base: Any  # the caller's settings: the pipeline's options
    settings: Any  # their scratch copy: data_dir and database in `work`
    work: Path
    store: Any
    encoder: Any  # the pipeline's encoder (with `memo`, the memoising view of the one that built the index)
    manifest: dict
    retriever: Any  # the build plus the store's KB, as the service loads it
    pipeline: Any
    lexical: Any = None  # the open lexical index of the build (`lexical_engine`), else None
    import_report: Any = None  # None when reused
    reused: bool = False
    timings: dict[str, float] = field(default_factory=dict)  # import_s, load_encoder_s, index_build_s

    def pipeline_with(self, **options: Any) -> Any:
        """Another pipeline over the same build (`build_pipeline` options, e.g. other stages or cache size)."""
        from app.match.assembly import build_pipeline

        if self.lexical is not None:
            lexical = self.lexical
            options.setdefault("lexical", lambda retriever: lexical)
        encoder = options.pop("encoder", self.encoder)  # e.g. a query encoder into the build's space
        return build_pipeline(self.base, encoder, self.retriever, **options)

    def close(self) -> None:
        if self.lexical is not None:
            self.lexical.close()
        self.store.close()


def scratch_pipeline(
    kb: str | Path | Sequence[Any],
    *,
    workdir: str | Path,
    settings: Any = None,
    settings_update: dict[str, Any] | None = None,
    encoder: Any = None,
    spec: str | None = None,
    stages: Sequence[Any] = (),
    store_stage_vectors: bool = True,
    batch_size: int = 64,
    progress: bool = False,
    report: Callable[[str], None] | None = None,
    lexical_engine: str | None = None,
    es_url: str | None = None,
    fingerprint: dict | None = None,
    query_side: Any = None,
    fresh: bool = False,
    memo: bool = False,
    **options: Any,
) -> Scratch:
    """The KB (a KB file or its records) through the product path in `workdir` -> `Scratch`.

    `settings`: the caller's (default: the configured ones); the store and the build use a copy with
    data_dir and database in `workdir`, updated with `settings_update` (e.g. ann_n_trees). `encoder`: one
    already loaded, else `spec` (default FAQ_ENCODER's) is loaded; `spec` is recorded in the build.
    `stages`: the re-ranking stages of the pipeline; the build stores the phrasing vectors of those that
    keep some (`vector_key`) unless `store_stage_vectors` is off. `lexical_engine`: open the build's lexical
    index with that engine (Elasticsearch at `es_url`) and serve the lexical arms from it. `fingerprint`:
    reuse the work folder's store and build when they were made for an equal one (`fresh`: rebuild
    anyway). `memo`: the pipeline's encoder keeps every vector it computes (evaluations that match dev
    queries once per tuned setting).
    Other keyword arguments are `build_pipeline`'s options (cache_size, rerank_k, pool_variants, ...).
    """
    from app.match.assembly import encoder_spec, load_configured_encoder
    from app.settings import get_settings
    from index.artifacts import BuildRegistry
    from app.release import build_current
    from index.retriever import Retriever
    from kb.files import read_kb
    from migrations.runner import migrated_store
    from models.encoders.base import SharedEncoder

    base = settings if settings is not None else get_settings()
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    db_file, fp_path = work / DB_FILE, work / FINGERPRINT_FILE
    scratch_settings = base.model_copy(update={"data_dir": work, "database_url": f"sqlite:///{db_file.as_posix()}",
                                               **(settings_update or {})})
    registry = BuildRegistry(work / INDEX_DIR)
    timings: dict[str, float] = {}
    store = manifest = lexical = import_report = None
    reused = (fingerprint is not None and not fresh and fp_path.is_file() and db_file.is_file()
              and registry.current() is not None and json.loads(fp_path.read_text()) == fingerprint)
    if reused:
        store = migrated_store(scratch_settings)
        manifest = registry.read_manifest(registry.current())
        if lexical_engine is not None:
            lexical, reused = _reopen_lexical(registry, manifest, lexical_engine, es_url, scratch_settings, report)
        if not reused:
            if lexical is not None:
                lexical.close()
                lexical = None
            store.close()
    if reused:
        if report is not None:
            report(f"reusing the store and build {manifest['version']} in {work} (same KB, encoder and index "
                   f"parameters)")
    else:
        # a fresh store every run: remove only what a previous scratch run made here (query vectors stay)
        fp_path.unlink(missing_ok=True)
        db_file.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(str(db_file) + suffix).unlink(missing_ok=True)
        shutil.rmtree(registry.index_dir, ignore_errors=True)
        t = time.perf_counter()
        store = migrated_store(scratch_settings)
        import_report = store.import_records(read_kb(kb) if isinstance(kb, (str, Path)) else list(kb))
        timings["import_s"] = time.perf_counter() - t
    if encoder is None:
        spec = spec or encoder_spec(base)
        t = time.perf_counter()
        encoder = load_configured_encoder(base, spec=spec)
        timings["load_encoder_s"] = time.perf_counter() - t
    if not reused:
        t = time.perf_counter()
        manifest = build_current(
            store, encoder, registry, n_trees=scratch_settings.ann_n_trees, search_k=scratch_settings.ann_search_k,
            batch_size=batch_size, progress=progress, report=report, encoder_spec=spec, es_url=es_url,
            es_index_prefix=scratch_settings.es_index_prefix,
            stage_vectors=[s for s in stages if hasattr(s, "vector_key")] if store_stage_vectors else (),
            query_side=query_side, languages=scratch_settings.languages,
        )
        timings["index_build_s"] = time.perf_counter() - t
        if lexical_engine is not None:
            lexical = _open_new_lexical(registry, manifest, lexical_engine, es_url, scratch_settings)
        if fingerprint is not None:
            fp_path.write_text(json.dumps(fingerprint, indent=2) + "\n")
    retriever = Retriever.load(registry.current_dir()).with_kb(store.snapshot(), encoder)
    if memo:  # after the build: the index and the KB are encoded as `faq index build` encodes them
        encoder = SharedEncoder(encoder, memo=True)
    scratch = Scratch(base, scratch_settings, work, store, encoder, manifest, retriever, None, lexical=lexical,
                      import_report=import_report, reused=reused, timings=timings)
    scratch.pipeline = scratch.pipeline_with(stages=list(stages), **options)
    return scratch


def _reopen_lexical(registry: Any, manifest: dict, engine: str, es_url: str | None, settings: Any,
                    report: Callable[[str], None] | None) -> tuple[Any, bool]:
    """A reused build's lexical index and whether it is whole (its documents are the build's phrasings)."""
    from index.lexical import LexicalUnavailable, open_lexical

    lexical = open_lexical(registry.current_dir(), manifest, engine, es_url=es_url,
                           es_prefix=settings.es_index_prefix, es_timeout_s=30.0)
    try:
        return lexical, lexical.count() == int(manifest["n_variants"])
    except LexicalUnavailable as exc:  # e.g. the Elasticsearch index is gone: rebuild everything
        if report is not None:
            report(f"not reusing the build in {registry.index_dir.parent}: {exc}")
        return lexical, False


def _open_new_lexical(registry: Any, manifest: dict, engine: str, es_url: str | None, settings: Any) -> Any:
    from index.lexical import LexicalUnavailable, open_lexical

    es_block = (manifest.get("lexical") or {}).get("elasticsearch") or {}
    if engine == "elasticsearch" and "error" in es_block:
        raise LexicalUnavailable(f"the Elasticsearch index was not built: {es_block['error']}")
    return open_lexical(registry.current_dir(), manifest, engine, es_url=es_url, es_prefix=settings.es_index_prefix,
                        es_timeout_s=30.0)
