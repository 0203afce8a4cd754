"""Assembling the matching pipeline from settings.

The request path is store -> encoder -> candidate generation (ANN + delta segment + tombstones, or BM25)
-> FAQ grouping and pooling -> optional re-ranking stages -> calibrated decision. This module is where
settings turn into those parts.
"""
from __future__ import annotations

from app.settings import Settings


def encoder_spec(settings: Settings, manifest: dict | None = None) -> str:
    """The encoder to load: FAQ_ENCODER, else the one that built `manifest` (a served index must be
    queried with its own encoder), else the default (mpnet when installed, else minilm)."""
    if settings.encoder:
        return settings.encoder
    if (manifest or {}).get("encoder_spec"):
        return str(manifest["encoder_spec"])
    return default_encoder(settings)


def default_encoder(settings: Settings) -> str:
    """The encoder used when none is configured: mpnet, the most accurate zero-shot base measured
    (docs/results.md), when its packages are installed; else MiniLM. Fine-tuned models are compared
    with it."""
    from models.load import default_encoder_spec

    return default_encoder_spec(settings.mpnet_cache)


def lexical_engine(settings: Settings) -> str:
    """The lexical engine FAQ_LEXICAL_ENGINE names ("auto": Elasticsearch when FAQ_ES_URL is set, else tantivy)."""
    from index.lexical import resolve_engine

    return resolve_engine(settings.lexical_engine, settings.es_url)
