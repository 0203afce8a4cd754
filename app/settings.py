"""All runtime configuration in one place, read from the environment with the `FAQ_` prefix."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FAQ_", env_file=".env", extra="ignore")

    # Storage. The embedded default is SQLite under data_dir; PostgreSQL via FAQ_DATABASE_URL.
    data_dir: Path = Path("var")
    database_url: str | None = None
    # Encoder spec: "minilm" (packaged all-MiniLM-L6-v2), "msem" (a general MSEM shipped in models/default,
    # not trained yet: see README "Results") or an MSEM model folder from `faq train msem`.
    # Unset: the service uses the encoder the current index was built with (manifest `encoder_spec`),
    # and builds use MiniLM until a shipped MSEM beats it on KBs it was not trained on.
    encoder: str | None = None

    def encoder_spec(self, manifest: dict | None = None) -> str:
        """The encoder to load: FAQ_ENCODER, else the one that built `manifest`, else MiniLM."""
        return self.encoder or (manifest or {}).get("encoder_spec") or "minilm"
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
    max_body_bytes: int = 64 * 1024
    kb_poll_seconds: float = 5.0
    query_log: bool = True
    # Lexical baseline (issue 5): Elasticsearch URL; empty means the embedded engine.
    es_url: str | None = None

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indexes"

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'faq.db').as_posix()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
