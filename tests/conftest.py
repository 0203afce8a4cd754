"""Shared pytest fixtures.

Databases:
  db_url   - URL of a fresh (empty, unmigrated) SQLite file in tmp_path
  store    - FaqStore on db_url, migrated to head
  pg_url   - URL of a fresh, uniquely named PostgreSQL database (dropped afterwards); skips when the
             server (FAQ_TEST_PG_URL, default postgresql://postgres@127.0.0.1:5432/test) is unreachable
  faq_env  - points app.settings at tmp_path (FAQ_DATA_DIR, FAQ_DATABASE_URL=db_url) for CLI tests
"""
from __future__ import annotations

import json
import os
from pathlib import Path
import uuid
from collections.abc import Iterator

import pytest

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


# --- index tests (tests/test_index.py, test_build.py, test_retriever.py) ---------------------------

@pytest.fixture(scope="session")
def minilm_encoder():
    """The packaged all-MiniLM-L6-v2 on CPU, loaded once per test session (a few seconds)."""
    import torch

    torch.set_num_threads(1)  # the test machine is shared
    from models.encoders.pretrained import MiniLMEncoder

    return MiniLMEncoder(device="cpu")


#: a small KB: 30 FAQs with 2-3 phrasings each (faq_id, answer, questions)
INDEX_TEST_FAQS = [
    ("reset-password", "Use 'Forgot password' on the sign-in page.", ["How do I reset my password?", "I forgot my password, what now?", "Can I change a lost password?"]),
    ("change-email", "Go to Settings > Account > Email.", ["How can I change my email address?", "Update the e-mail on my account"]),
    ("delete-account", "Settings > Privacy > Delete account.", ["How do I delete my account?", "I want to close my account permanently", "Remove my profile and data"]),
    ("refund", "Refunds are issued within 14 days of purchase.", ["Can I get a refund?", "How do I ask for my money back?"]),
    ("shipping-time", "Standard shipping takes 3-5 business days.", ["How long does shipping take?", "When will my order arrive?", "Delivery time for orders"]),
    ("track-order", "Use the tracking link in your confirmation email.", ["How can I track my order?", "Where is my package right now?"]),
    ("cancel-order", "Orders can be cancelled until they ship.", ["How do I cancel my order?", "Can I cancel a purchase I just made?"]),
    ("payment-methods", "We accept cards, PayPal and bank transfer.", ["Which payment methods do you accept?", "Can I pay with PayPal?", "Do you take credit cards?"]),
    ("invoice", "Invoices are under Orders > Invoice.", ["Where can I download my invoice?", "I need a receipt for my purchase"]),
    ("opening-hours", "Support is available 9am-5pm, Monday to Friday.", ["What are your opening hours?", "When is customer support available?"]),
    ("contact-support", "Write to support@example.com.", ["How do I contact customer service?", "Is there a support email address?", "How can I talk to a human?"]),
    ("two-factor", "Enable 2FA under Settings > Security.", ["How do I turn on two-factor authentication?", "Enable 2FA on my account"]),
    ("change-username", "Usernames can be changed once a month.", ["Can I change my username?", "How do I pick a new user name?"]),
    ("subscription-cancel", "Cancel any time under Billing > Subscription.", ["How do I cancel my subscription?", "Stop my monthly plan", "End my membership renewal"]),
    ("subscription-upgrade", "Choose a plan under Billing > Plans.", ["How do I upgrade my plan?", "Switch to the premium subscription"]),
    ("student-discount", "Students get 50% off with a valid student email.", ["Do you offer a student discount?", "Is there a cheaper price for students?"]),
    ("gift-card", "Gift cards are redeemed at checkout.", ["How do I redeem a gift card?", "Where do I enter my gift voucher code?"]),
    ("international-shipping", "We ship to 40 countries.", ["Do you ship internationally?", "Can I order from outside the country?", "Do you deliver abroad?"]),
    ("return-item", "Returns are free within 30 days.", ["How do I return an item?", "Can I send back a product I don't like?"]),
    ("damaged-item", "Send us a photo and we replace it.", ["My item arrived broken", "What if the product is damaged on arrival?"]),
    ("app-download", "The app is on the App Store and Google Play.", ["Is there a mobile app?", "Where can I download the app for my phone?"]),
    ("data-export", "Settings > Privacy > Export data.", ["How can I export my data?", "Download a copy of all my information"]),
    ("language", "Change the language under Settings > Language.", ["How do I change the language?", "Can I use the site in Spanish?"]),
    ("dark-mode", "Toggle dark mode under Settings > Appearance.", ["Is there a dark mode?", "How do I switch to a dark theme?"]),
    ("notifications", "Manage notifications under Settings > Notifications.", ["How do I turn off notifications?", "Stop sending me push alerts"]),
    ("newsletter", "Use the unsubscribe link in any newsletter.", ["How do I unsubscribe from the newsletter?", "Stop marketing emails"]),
    ("price-match", "We match prices of major retailers.", ["Do you price match?", "Will you match a lower price from another shop?"]),
    ("warranty", "All products carry a two year warranty.", ["How long is the warranty?", "Is my product still under guarantee?"]),
    ("store-locations", "See the store finder on our website.", ["Where are your physical stores?", "Is there a shop near me?"]),
    ("account-locked", "Accounts unlock automatically after 30 minutes.", ["My account is locked", "Why can't I log in after several attempts?", "Too many login attempts, what now?"]),
]


@pytest.fixture
def index_kb_records():
    """INDEX_TEST_FAQS as KbRecords, one per question variant."""
    from app.store import KbRecord

    return [KbRecord(faq_id=f, question=q, answer=a, tags=["test"]) for f, a, qs in INDEX_TEST_FAQS for q in qs]


def write_kb_jsonl(path, faqs: dict[str, list[str]]):
    """A KB file in the exchange format: one line per phrasing, answer "about <faq_id>"."""
    with open(path, "w") as fh:
        for faq_id, questions in faqs.items():
            for q in questions:
                fh.write(json.dumps({"faq_id": faq_id, "question": q, "answer": f"about {faq_id}"}) + "\n")
    return path


# --- lexical engines (tests/test_lexical.py, test_arms.py, test_ab.py) -----------------------------

def start_es_emulator(data_dir):
    """Start the noida-db binary (Elasticsearch API only) on a free loopback port -> (process, url)
    (bench/es_emulator.py). Stop it with `stop_es_emulator(process)`."""
    from bench.es_emulator import start_emulator

    try:
        return start_emulator(data_dir)
    except RuntimeError as exc:
        pytest.fail(str(exc))


def stop_es_emulator(proc) -> None:
    from bench.es_emulator import stop_emulator

    stop_emulator(proc)


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
