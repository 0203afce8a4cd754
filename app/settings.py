"""All runtime configuration in one place, read from the environment with the `FAQ_` prefix."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from app.arms import ArmSplit


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FAQ_", env_file=".env", extra="ignore")

    # Storage. The embedded default is SQLite under data_dir; PostgreSQL via FAQ_DATABASE_URL.
    data_dir: Path = Path("var")
    database_url: str | None = None
    # Encoder spec: "mpnet" (all-mpnet-base-v2: accurate mode), "minilm" (all-MiniLM-L6-v2: fast mode),
    # "msem" (the general MSEM shipped in models/default) or a model folder from `faq train msem`.
    # Unset: the service uses the encoder the current index was built with (manifest `encoder_spec`),
    # and builds use `default_encoder()`.
    encoder: str | None = None
    # Where all-mpnet-base-v2 is reassembled on first use (models/mpnet.py); unset: <data_dir>/models.
    model_cache: Path | None = None

    def encoder_spec(self, manifest: dict | None = None) -> str:
        """The encoder to load: FAQ_ENCODER, else the one that built `manifest`, else the default."""
        return self.encoder or (manifest or {}).get("encoder_spec") or self.default_encoder()

    def default_encoder(self) -> str:
        """mpnet, the most accurate zero-shot base measured (docs/results.md), when its packages are
        installed; else MiniLM."""
        from models.mpnet import available

        return "mpnet" if available(self.mpnet_cache) else "minilm"

    @property
    def mpnet_cache(self) -> Path:
        return self.model_cache or self.data_dir / "models"
    # Annoy parameters: defaults chosen by bench/ann_params.py (recall@10 >= 0.99 on 100k questions).
    ann_n_trees: int = 100
    ann_search_k: int = 50000  # nodes inspected per query; -1 = Annoy default (n_trees * k): far too low for recall@10 >= 0.99
    keep_versions: int = 3
    # Serving.
    admin_token: str | None = None
    torch_threads: int = 2
    encode_workers: int = 1
    default_top_k: int = 5
    default_threshold: float = 0.5
    # a FAQ's cosine = mean of its best N phrasings' cosines (index/pooling.py); 1 = its best alone.
    # Builds calibrate N = 1..5 (index/calibration.py), hence the cap.
    pool_variants: int = Field(default=2, ge=1, le=5)
    max_body_bytes: int = 64 * 1024
    kb_poll_seconds: float = 5.0
    query_log: bool = True
    # Lexical baseline: Elasticsearch URL; empty means the embedded engine.
    es_url: str | None = None
    # "auto": Elasticsearch when FAQ_ES_URL is set, else the embedded tantivy index; or "tantivy" /
    # "elasticsearch" explicitly. Builds always write the tantivy index (and the ES one with a URL).
    lexical_engine: str = "auto"
    lexical_k: int = Field(default=30, ge=1, le=1000)  # BM25 candidates per query (the paper's 30)
    es_index_prefix: str = "faq"  # ES index of a build: "<prefix>-<version>"
    es_timeout_s: float = Field(default=2.0, gt=0)  # per ES request while serving: fail fast -> 503
    # Arms (app/arms.py): the arm of a request that names none; FAQ_AB_SPLIT ("ann:90,lexical:10")
    # overrides it with a split sticky per session_id.
    default_arm: str = "ann"
    ab_split: str | None = None
    # Cross-encoder re-ranker: a folder made by `faq train reranker`; None = none installed, so
    # `rerank: true` / the `+rerank` arms answer 409. rerank_k = FAQs the re-ranker re-scores per query.
    reranker: str | None = None
    rerank_k: int = Field(default=20, ge=1, le=200)
    # cross-encoder weight in its pool with the calibrated cosine (models/reranker.py `pool`); unset: the
    # re-ranker folder's `fusion_weight`
    rerank_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    # how the re-ranker runs (models/reranker.py RUNTIMES): "auto" = int8 ONNX when the folder has it,
    # "onnx" = fp32 ONNX (exact, slower on one thread), "torch" (what CUDA uses)
    rerank_runtime: str = "auto"

    @field_validator("rerank_runtime")
    @classmethod
    def _known_runtime(cls, value: str) -> str:
        if value not in ("auto", "onnx-int8", "onnx", "torch"):
            raise ValueError(f"FAQ_RERANK_RUNTIME must be auto, onnx-int8, onnx or torch, got {value!r}")
        return value

    @field_validator("lexical_engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in ("auto", "tantivy", "elasticsearch"):
            raise ValueError(f"FAQ_LEXICAL_ENGINE must be auto, tantivy or elasticsearch, got {value!r}")
        return value

    @field_validator("default_arm")
    @classmethod
    def _known_arm(cls, value: str) -> str:
        from app.arms import ARMS

        if value not in ARMS:
            raise ValueError(f"FAQ_DEFAULT_ARM must be one of {', '.join(ARMS)}, got {value!r}")
        return value

    @field_validator("ab_split")
    @classmethod
    def _valid_split(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        from app.arms import parse_split

        return str(parse_split(value))  # raises with the bad part named

    def arm_split(self) -> "ArmSplit | None":
        from app.arms import parse_split

        return parse_split(self.ab_split) if self.ab_split else None

    def resolved_lexical_engine(self) -> str:
        from index.lexical import resolve_engine

        return resolve_engine(self.lexical_engine, self.es_url)

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indexes"

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'faq.db').as_posix()}"


@lru_cache
def get_settings() -> Settings:
    settings = Settings()
    # models/ reads the cache folder from the environment (it never imports app): hand it the one
    # resolved here, so a value from .env or the data dir reaches every encoder loaded in-process.
    os.environ.setdefault("FAQ_MODEL_CACHE", str(settings.mpnet_cache))
    return settings
