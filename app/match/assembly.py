"""The one place the matching pipeline is assembled from settings: the encoder a service or a build runs,
the lexical engine, the decision model served, and `build_pipeline`.

The service (`app/api/state.py`), `faq eval match`, `faq eval ab` (through evaluation/scratch.py) and the
benchmarks all get their pipeline from `build_pipeline`, so a new option or runtime is wired in here once;
the re-ranking stages come from app/stages (`load_stages`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from app.conversation.small_talk.responder import SmallTalk
from app.match.decider import Decider
from app.match import Pipeline
from app.match.served import OpenBuilds
from app.settings import Settings
from app.stages import Stage
from index.candidates import RetrieverLike
from index.decision import load_model

__all__ = [
    "DeferredEncoder", "build_encoder_for", "build_pipeline", "default_encoder", "encoder_runtime", "encoder_spec", "lexical_engine", "load_configured_encoder",
    "served_model_path",
]


def encoder_spec(settings: Settings, manifest: dict | None = None) -> str:
    """The encoder to load: FAQ_ENCODER, else the one that built `manifest` (a served index must be
    queried with its own encoder), else the default."""
    if settings.encoder:
        return settings.encoder
    if (manifest or {}).get("encoder_spec"):
        return str(manifest["encoder_spec"])
    return default_encoder(settings)


def encoder_runtime(settings: Settings, manifest: dict | None = None) -> str:
    """The encoder runtime to load: FAQ_ENCODER_RUNTIME, else the one that built `manifest` (builds
    from before runtimes were recorded ran PyTorch), else "auto"."""
    if settings.encoder_runtime:
        return settings.encoder_runtime
    if manifest:
        return str(manifest.get("encoder_runtime", "torch"))
    return "auto"


def load_configured_encoder(settings: Settings, manifest: dict | None = None, spec: str | None = None):
    """The encoder a service or a build runs: `spec` (else `encoder_spec`) on `encoder_runtime`."""
    from models.encoders.load import load_encoder

    return load_encoder(spec or encoder_spec(settings, manifest), runtime=encoder_runtime(settings, manifest),
                        threads=settings.encoder_threads, device=settings.device, cache_dir=settings.mpnet_cache)


class DeferredEncoder:
    """The build's own encoder, loaded on the first text it has to encode. In balanced mode queries have
    their own encoder, and the build's only encodes what KB edits add between builds, so a service nobody
    edits never holds it: all-mpnet-base-v2's int8 session and its arenas (docs/results.md).

    `id`, `dim` and `runtime` are the build's (manifest), which is what the swap checks compare; the
    loaded encoder must have that id, or encoding fails and says which setting to fix."""

    def __init__(self, load: Callable[[], Any], *, id: str, dim: int, runtime: str):
        import threading

        self._load, self.id, self.dim, self.runtime = load, id, int(dim), runtime
        self._inner: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._inner is not None

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> Any:
        import numpy as np

        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._get().encode(list(texts), batch_size=batch_size, show_progress_bar=show_progress_bar)

    def _get(self) -> Any:
        with self._lock:
            if self._inner is None:
                inner = self._load()
                if inner.id != self.id or inner.dim != self.dim:
                    raise RuntimeError(f"the build was encoded by {self.id!r} ({self.dim}-d) but {inner.id!r} "
                                       f"({inner.dim}-d) loaded for its KB edits: set FAQ_ENCODER to the build's "
                                       f"encoder or rebuild the index")
                self._inner = inner
            return self._inner


def build_encoder_for(settings: Settings, manifest: dict | None, has_query_encoder: bool) -> Any:
    """The encoder of the FAQ side a service holds: deferred (`DeferredEncoder`) when queries have their
    own encoder and the service runs the build's encoder and runtime (unset, or set to the same), else
    loaded now."""
    from models.encoders.base import pick_device
    from models.encoders.runtime import RuntimeUnavailable, resolve_runtime

    built = manifest or {}
    try:
        runtime = resolve_runtime(encoder_runtime(settings, manifest), pick_device(settings.device))
    except RuntimeUnavailable:
        runtime = None  # loading it now says why
    follows = settings.encoder in (None, built.get("encoder_spec")) and runtime == built.get("encoder_runtime")
    if has_query_encoder and follows and built.get("encoder_id") and built.get("dim"):
        return DeferredEncoder(lambda: load_configured_encoder(settings, manifest), id=built["encoder_id"],
                               dim=built["dim"], runtime=str(built.get("encoder_runtime", "torch")))
    return load_configured_encoder(settings, manifest)


def default_encoder(settings: Settings) -> str:
    """The encoder used when none is configured: mpnet, the most accurate zero-shot base measured
    (docs/results.md), when its packages are installed; else MiniLM. Fine-tuned models are compared
    with it."""
    from models.encoders.load import default_encoder_spec

    return default_encoder_spec(settings.mpnet_cache)


def lexical_engine(settings: Settings) -> str:
    """The lexical engine FAQ_LEXICAL_ENGINE names ("auto": Elasticsearch when FAQ_ES_URL is set, else tantivy)."""
    from index.lexical import resolve_engine

    return resolve_engine(settings.lexical_engine, settings.es_url)


def served_model_path(settings: Settings) -> Any:
    """The decision model file served: FAQ_DECISION_MODEL, else this KB's own (`faq index calibrate`), else
    None (the shipped cross-KB model)."""
    if settings.decision_model is not None:
        if not settings.decision_model.is_file():
            raise ValueError(f"FAQ_DECISION_MODEL={settings.decision_model}: no such file")
        return settings.decision_model
    return settings.kb_decision_model if settings.kb_decision_model.is_file() else None


def build_pipeline(settings: Settings, encoder: Any, retriever: Callable[[], RetrieverLike | None] | RetrieverLike, *,
                   lexical: Callable[[RetrieverLike], Any] | None = None, stages: Sequence[Stage] = (),
                   pool_variants: int | None = None, rerank_k: int | None = None,
                   lexical_k: int | None = None, answer_weight: float | None = None,
                   cache_size: int | None = None, builds: OpenBuilds | None = None) -> Pipeline:
    """The matching pipeline: settings give every option a caller does not override. `builds`: the build
    versions open for serving that the pipeline shares (a KB's, app/api/state.py), else its own."""
    return Pipeline(
        encoder, retriever, lexical=lexical,
        lexical_k=settings.lexical_k if lexical_k is None else lexical_k,
        stages=stages,
        rerank_k=settings.rerank_k if rerank_k is None else rerank_k,
        pool_variants=settings.pool_variants if pool_variants is None else pool_variants,
        answer_weight=settings.answer_weight if answer_weight is None else answer_weight,
        cache_size=settings.query_cache_size if cache_size is None else cache_size,
        decider=Decider(load_model(served_model_path(settings)) if settings.scoring == "model" else None,
                        oos_share=settings.oos_share,
                        target_precision=settings.target_precision, default_threshold=settings.default_threshold),
        scoring=settings.scoring,
        builds=builds,
        small_talk=small_talk_for(settings, encoder),
    )


def small_talk_for(settings: Settings, encoder: Any) -> SmallTalk | None:
    """The KB's small talk (its persona and edited answers), read with the detector of the encoder that
    encodes its queries; None when the KB turned small talk off."""
    if not settings.small_talk:
        return None
    return SmallTalk(getattr(encoder, "id", None), getattr(encoder, "dim", None), settings.small_talk_persona,
                     settings.small_talk_answers)
