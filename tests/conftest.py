"""Shared pytest fixtures.

Databases:
  db_url   - URL of a fresh (empty, unmigrated) SQLite file in tmp_path
  store    - FaqStore on db_url, migrated to head
  pg_url   - URL of a fresh, uniquely named PostgreSQL database (dropped afterwards); skips when the
             server (FAQ_TEST_PG_URL, default postgresql://postgres@127.0.0.1:5432/test) is unreachable
  faq_env  - points app.settings at tmp_path (FAQ_DATA_DIR, FAQ_DATABASE_URL=db_url) for CLI tests
"""
from __future__ import annotations

import os
from pathlib import Path
import uuid
from collections.abc import Iterator

import pytest
from tests.helpers.es import start_es_emulator, stop_es_emulator
from tests.helpers.kb import INDEX_TEST_FAQS

PG_ADMIN_URL = os.environ.get("FAQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
_pg_unreachable: str | None = None  # remembered so a missing server costs one connect timeout, not one per test


# ---------------------------------------------------------------- databases

@pytest.fixture
def db_url(tmp_path) -> str:
    return f"sqlite:///{(tmp_path / 'faq.db').as_posix()}"


@pytest.fixture
def store(db_url):
    from app.store import FaqStore
    from migrations import runner

    runner.upgrade(db_url)
    with FaqStore(db_url) as faq_store:
        yield faq_store


@pytest.fixture
def pg_url() -> Iterator[str]:
    global _pg_unreachable
    import psycopg2
    from sqlalchemy.engine import make_url

    if _pg_unreachable:
        pytest.skip(_pg_unreachable)
    admin_dsn = make_url(PG_ADMIN_URL).set(drivername="postgresql")
    try:
        admin = psycopg2.connect(admin_dsn.render_as_string(hide_password=False), connect_timeout=3)
    except psycopg2.OperationalError as exc:
        _pg_unreachable = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {' '.join(str(exc).split())}"
        pytest.skip(_pg_unreachable)
    admin.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    name = f"faq_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.cursor() as cur:
            try:
                cur.execute(f'CREATE DATABASE "{name}"')
            except psycopg2.Error as exc:
                pytest.skip(f"cannot create a test database on {PG_ADMIN_URL}: {' '.join(str(exc).split())}")
            yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
            # FORCE: a pooled connection left open by a failed test must not block the cleanup
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


# ---------------------------------------------------------------- CLI environment

@pytest.fixture(scope="session")
def shared_model_cache(tmp_path_factory) -> Path:
    """One model cache for the whole run: the encoders' ONNX exports (models/encoders/runtime.py) take seconds
    each and are the same for every test."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def query_encoder_work(tmp_path_factory) -> Path:
    """One vector cache for the query-encoder tests: the teacher's and base's vectors of the demo corpus
    are computed once (training/query_encoder/vectors.py resumes from cached chunks)."""
    return tmp_path_factory.mktemp("query-encoder-work")


@pytest.fixture
def faq_env(tmp_path, monkeypatch, db_url, shared_model_cache):
    """Settings for in-process CLI runs (`cli.main.main([...])`): data under tmp_path/var, the model
    cache shared by the session."""
    from app.settings import get_settings

    monkeypatch.setenv("FAQ_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("FAQ_MODEL_CACHE", str(shared_model_cache))
    monkeypatch.setenv("FAQ_DATABASE_URL", db_url)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


# --- index tests (tests/index/) ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def minilm_encoder():
    """The packaged all-MiniLM-L6-v2 on CPU, loaded once per test session (a few seconds)."""
    import torch

    torch.set_num_threads(1)  # the test machine is shared
    from models.encoders.pretrained import MiniLMEncoder

    return MiniLMEncoder(device="cpu")


@pytest.fixture
def index_kb_records():
    """INDEX_TEST_FAQS as KbRecords, one per question variant."""
    from app.store import KbRecord

    return [KbRecord(faq_id=f, question=q, answer=a, tags=["test"]) for f, a, qs in INDEX_TEST_FAQS for q in qs]


# --- lexical engines (tests/index/test_lexical.py, app/test_arms.py, evaluation/test_ab.py) ---------


@pytest.fixture(scope="session")
def es_emulator_url(tmp_path_factory) -> Iterator[str]:
    """URL of the noida-db Elasticsearch-API EMULATOR (not a real Elasticsearch), started once per test
    session on a free loopback port from its binary, and stopped by its PID afterwards."""
    proc, url = start_es_emulator(tmp_path_factory.mktemp("noida"))
    try:
        yield url
    finally:
        stop_es_emulator(proc)


@pytest.fixture(scope="session")
def real_es_url() -> str:
    """FAQ_ES_URL (a real Elasticsearch 8.x) for tests marked `elasticsearch`; skips when unset."""
    url = os.environ.get("FAQ_ES_URL")
    if not url:
        pytest.skip("FAQ_ES_URL is not set: no real Elasticsearch to test against")
    return url


@pytest.fixture(params=["tantivy", "es-emulator", pytest.param("elasticsearch", marks=pytest.mark.elasticsearch)])
def lexical_engine(request) -> tuple[str, str | None]:
    """(engine, es_url) for tests that run once per lexical engine: tantivy, the noida-db Elasticsearch
    emulator, and a real Elasticsearch when FAQ_ES_URL is set."""
    if request.param == "tantivy":
        return "tantivy", None
    if request.param == "es-emulator":
        return "elasticsearch", request.getfixturevalue("es_emulator_url")
    return "elasticsearch", request.getfixturevalue("real_es_url")


@pytest.fixture(scope="session")
def real_mpnet_cache(tmp_path_factory):
    """One cache folder for every test that needs the real all-mpnet-base-v2 (reassembled once, on first use)."""
    from models.encoders import mpnet

    if not mpnet.available(tmp_path_factory.getbasetemp() / "none"):
        pytest.skip("the all-mpnet-base-v2 parts are not installed (scripts/bootstrap.sh installs them)")
    return tmp_path_factory.mktemp("mpnet-cache")
