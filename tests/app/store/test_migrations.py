"""Alembic migrations up and down on SQLite and PostgreSQL, models == migrations, `faq db` commands, and
0002 (knowledge bases), 0005 (FAQ fields) and 0007 (answers per language) carrying databases with rows up and
back down without losing one, and 0008 keeping the tokens made before roles, each working with its role."""
from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from cli.main import main
from app.db import Base, make_engine
from migrations import runner

TABLES = {"kbs", "kb_tokens", "faqs", "question_variants", "index_builds", "query_log", "review_dismissals",
          "console_sessions", "suggested_phrasings", "publications", "audit_log"}
TABLES_0001 = {"faqs", "question_variants", "index_builds", "query_log", "kb_meta"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_url(request) -> str:
    return request.getfixturevalue("db_url" if request.param == "sqlite" else "pg_url")


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_and_downgrade(any_url):
    assert runner.current(any_url) is None
    runner.upgrade(any_url)
    assert runner.current(any_url) == runner.head() == "0008"
    assert table_names(any_url) == TABLES
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT name, revision FROM kbs")).all() == [("default", 0)]
    finally:
        engine.dispose()
    runner.upgrade(any_url)  # idempotent
    runner.downgrade(any_url, "base")
    assert runner.current(any_url) is None
    assert table_names(any_url) == set()
    runner.upgrade(any_url)  # and back up again
    assert table_names(any_url) == TABLES


def test_models_match_migrations(any_url):
    runner.upgrade(any_url)
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_cascade_and_unique_constraints_exist(any_url):
    from kb.records import KbRecord
    from app.store import FaqStore

    runner.upgrade(any_url)
    with FaqStore(any_url) as store:
        store.import_records([KbRecord("a", "q1", "answer"), KbRecord("a", "q2")])
        with pytest.raises(Exception, match="(?i)unique"):
            with store.engine.begin() as conn:
                conn.execute(text("INSERT INTO question_variants (faq_id, question, created_at, updated_at) "
                                  "VALUES ('a', 'q1', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"))
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM faqs WHERE faq_id = 'a'"))
            assert conn.execute(text("SELECT count(*) FROM question_variants")).scalar() == 0


def test_db_cli(faq_env, capsys):
    assert main(["db", "current"]) == 0
    assert "empty, no migration applied (head is 0008)" in capsys.readouterr().out
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out.strip().endswith(": at 0008 (head)")
    assert main(["db", "downgrade", "base"]) == 0
    assert "empty" in capsys.readouterr().out
    assert table_names(faq_env.db_url) == set()
    assert main(["db", "upgrade", "0001"]) == 0
    assert main(["db", "current"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("at 0001 (head is 0008)")
    assert table_names(faq_env.db_url) == TABLES_0001
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("at 0008 (head)")
    assert main(["db", "downgrade", "-1"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("at 0007 (head is 0008)")


def test_the_code_expects_the_latest_revision():
    """A new migration must move SCHEMA_REVISION with it, or every store would refuse the fresh schema."""
    from app.db.models import SCHEMA_REVISION
    from migrations import runner

    assert SCHEMA_REVISION == runner.head()


# ---------------------------------------------------------------- 0002 on a database with data

#: a single-KB database as revision 0001 held it: (faq_id, answer, tags) and (variant id, faq_id, question)
OLD_FAQS = [("refund", "Refunds within 14 days.", ["billing", "refund"]),
            ("reset-password", "Use 'Forgot password'.", []),
            ("shipping", "3-5 business days.", ["orders"]),
            ("contact", "Write to support@example.com.", ["help"])]
# ids with gaps and out of FAQ order, as years of edits leave them: builds refer to phrasings by id
OLD_VARIANTS = [(3, "refund", "Can I get a refund?"), (5, "reset-password", "I forgot my password"),
                (6, "refund", "money back please"), (9, "shipping", "How long does shipping take?"),
                (12, "reset-password", "How do I reset my password?"), (13, "contact", "How do I reach you?"),
                (20, "shipping", "When will my order arrive?")]
OLD_REVISION = 7
COUNTED = ("faqs", "question_variants", "index_builds", "query_log")


def _fill_0001(url: str) -> None:
    """The rows a deployment at 0001 has, written with plain SQL against the 0001 schema."""
    engine = make_engine(url)
    at = "2026-11-01 10:00:00"
    try:
        with engine.begin() as conn:
            for faq_id, answer, tags in OLD_FAQS:
                conn.execute(text("INSERT INTO faqs (faq_id, answer, tags, created_at, updated_at) "
                                  "VALUES (:f, :a, :t, :at, :at)"),
                             {"f": faq_id, "a": answer, "t": json.dumps(tags), "at": at})
            for vid, faq_id, question in OLD_VARIANTS:
                conn.execute(text("INSERT INTO question_variants (id, faq_id, question, created_at, updated_at) "
                                  "VALUES (:i, :f, :q, :at, :at)"), {"i": vid, "f": faq_id, "q": question, "at": at})
            for i, status in enumerate(["ready", "failed", "ready"], start=1):
                conn.execute(text(
                    "INSERT INTO index_builds (version, encoder_id, n_faqs, n_variants, dim, status, n_trees, "
                    "search_k, started_at, finished_at, timings, error) VALUES (:v, 'all-MiniLM-L6-v2', 4, 7, 384, "
                    ":s, 10, 100, :at, :at, :timings, :e)"),
                    {"v": f"20261101T10000{i}Z-00000{i}", "s": status, "at": at,
                     "timings": json.dumps({"total_s": 1.5}),
                     "e": "OSError: disk full" if status == "failed" else None})
            for i in range(5):
                conn.execute(text(
                    "INSERT INTO query_log (request_id, created_at, arm, query, faq_id, score, latency_ms, "
                    "index_version, feedback_correct, feedback_faq_id) VALUES (:r, :at, 'ann', :q, :f, 0.9, 12.5, "
                    "'20261101T100003Z-000003', :ok, NULL)"),
                    {"r": f"req-{i}", "at": at, "q": f"query {i}", "f": "refund" if i % 2 else None,
                     "ok": None if i == 4 else bool(i % 2)})
            conn.execute(text("UPDATE kb_meta SET value = :r WHERE key = 'revision'"), {"r": OLD_REVISION})
    finally:
        engine.dispose()


def _fill_old(url: str, insert_faq: str, more: Callable[[str], dict]) -> None:
    """OLD_FAQS (through `insert_faq`, given :f :a :t and `more(faq_id)`) and OLD_VARIANTS, as an older schema
    holds them."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for faq_id, answer, tags in OLD_FAQS:
                conn.execute(text(insert_faq), {"f": faq_id, "a": answer, "t": json.dumps(tags), **more(faq_id)})
            for vid, faq_id, question in OLD_VARIANTS:
                conn.execute(text("INSERT INTO question_variants (id, kb, faq_id, question, created_at, updated_at) "
                                  "VALUES (:i, 'default', :f, :q, '2026-11-01 10:00:00', '2026-11-01 10:00:00')"),
                             {"i": vid, "f": faq_id, "q": question})
    finally:
        engine.dispose()


def _counts_and_variants(url: str) -> tuple[dict[str, int], list[tuple]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            counts = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in COUNTED}
            variants = [tuple(r) for r in conn.execute(text("SELECT id, faq_id, question FROM question_variants "
                                                            "ORDER BY id")).all()]
    finally:
        engine.dispose()
    return counts, variants


def test_0002_carries_a_single_kb_database_up_and_back_down(any_url):
    from app.store import FaqStore, KbRecord

    runner.upgrade(any_url, "0001")
    _fill_0001(any_url)
    before = _counts_and_variants(any_url)
    assert before == ({"faqs": 4, "question_variants": 7, "index_builds": 3, "query_log": 5}, OLD_VARIANTS)

    runner.upgrade(any_url)
    assert runner.current(any_url) == runner.head() and table_names(any_url) == TABLES
    assert _counts_and_variants(any_url) == before  # every row, and the phrasings under their old ids
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT name, revision FROM kbs")).all() == [("default", OLD_REVISION)]
            for table in COUNTED:  # every row now belongs to the default KB
                assert conn.execute(text(f"SELECT DISTINCT kb FROM {table}")).scalars().all() == ["default"]
    finally:
        engine.dispose()
    answers = {f: (a, t) for f, a, t in OLD_FAQS}
    first_seen = list(dict.fromkeys(f for _, f, _ in OLD_VARIANTS))
    expected = [KbRecord(f, q, answers[f][0], answers[f][1])
                for f in first_seen for _, g, q in OLD_VARIANTS if g == f]
    with FaqStore(any_url) as store:
        assert list(store.export_records()) == expected
        assert store.revision() == OLD_REVISION
        assert [b["status"] for b in store.list_builds()] == ["ready", "failed", "ready"]
        assert len(store.read_query_log()) == 5

    runner.downgrade(any_url, "0001")
    assert runner.current(any_url) == "0001" and table_names(any_url) == TABLES_0001
    assert _counts_and_variants(any_url) == before
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT value FROM kb_meta WHERE key = 'revision'")).scalar() == OLD_REVISION
    finally:
        engine.dispose()


def test_downgrade_below_0002_is_refused_while_another_kb_exists(any_url):
    from app.store import FaqStore, KbRecord

    runner.upgrade(any_url)
    with FaqStore(any_url) as store:
        store.import_records([KbRecord("a", "q1", "answer")])
        store.catalog.create("support")
        store.for_kb("support").import_records([KbRecord("b", "q2", "other answer")])
    with pytest.raises(RuntimeError, match="'default'.*support.*faq kb delete"):
        runner.downgrade(any_url, "0001")
    assert runner.current(any_url) == runner.head()
    with FaqStore(any_url) as store:  # nothing was touched
        assert store.catalog.names() == ["default", "support"]
        assert [r.faq_id for r in store.for_kb("support").export_records()] == ["b"]
        store.catalog.delete("support")
    runner.downgrade(any_url, "0001")
    assert runner.current(any_url) == "0001"
    assert _counts_and_variants(any_url)[0] == {"faqs": 1, "question_variants": 1, "index_builds": 0, "query_log": 0}


# ---------------------------------------------------------------- 0005 on a database with data

def test_0005_adds_the_faq_fields_with_defaults_and_keeps_every_row(any_url):
    from app.store import FaqStore

    runner.upgrade(any_url, "0004")
    _fill_old(any_url, "INSERT INTO faqs (kb, faq_id, answer, tags, created_at, updated_at) "
                       "VALUES ('default', :f, :a, :t, '2026-11-01 10:00:00', '2026-11-01 10:00:00')",
              lambda faq_id: {})
    before = _counts_and_variants(any_url)

    runner.upgrade(any_url)
    assert runner.current(any_url) == runner.head() and _counts_and_variants(any_url) == before
    with FaqStore(any_url) as store:
        faq = store.get_faq("refund")
        assert (faq.answer, faq.tags, faq.questions) == ("Refunds within 14 days.", ["billing", "refund"],
                                                         ["Can I get a refund?", "money back please"])
        assert (faq.metadata, faq.source, faq.follow_ups, faq.context_only) == ({}, None, [], False)
        store.update_faq("refund", metadata={"Lang": "en"}, source="policy.pdf",
                         follow_ups=[{"faq_id": "contact", "text": "Still stuck?"}], context_only=True)
        faq = store.get_faq("refund")
        assert (faq.metadata, faq.source, faq.follow_ups, faq.context_only) == (
            {"lang": "en"}, "policy.pdf", [{"faq_id": "contact", "text": "Still stuck?"}], True)

    runner.downgrade(any_url, "0004")  # the columns go; every FAQ and phrasing stays
    assert runner.current(any_url) == "0004" and _counts_and_variants(any_url) == before
    runner.upgrade(any_url)
    with FaqStore(any_url) as store:
        faq = store.get_faq("refund")
        assert faq.questions == ["Can I get a refund?", "money back please"] and faq.metadata == {}


# ---------------------------------------------------------------- 0007 on a database with data

def test_0007_adds_answers_per_language_and_keeps_every_row(any_url):
    from app.store import FaqStore

    runner.upgrade(any_url, "0006")
    _fill_old(any_url, "INSERT INTO faqs (kb, faq_id, answer, tags, metadata, source, follow_ups, context_only, "
                       "created_at, updated_at) VALUES ('default', :f, :a, :t, :m, :s, '[]', :c, "
                       "'2026-11-01 10:00:00', '2026-11-01 10:00:00')",
              lambda faq_id: {"m": json.dumps({"team": faq_id}), "s": f"{faq_id}.pdf", "c": faq_id == "contact"})
    before = _counts_and_variants(any_url)

    runner.upgrade(any_url)
    assert runner.current(any_url) == runner.head() == "0008" and _counts_and_variants(any_url) == before
    with FaqStore(any_url) as store:
        faq = store.get_faq("refund")
        assert (faq.answer, faq.tags, faq.questions) == ("Refunds within 14 days.", ["billing", "refund"],
                                                         ["Can I get a refund?", "money back please"])
        assert (faq.metadata, faq.source, faq.context_only, faq.answers) == (
            {"team": "refund"}, "refund.pdf", False, {})
        assert store.get_faq("contact").context_only is True
        assert all(d.answers == {} for d in store.snapshot().details.values())
        store.update_faq("refund", answers={"es": "Reembolsos en 14 días."})
        assert store.get_faq("refund").answers == {"es": "Reembolsos en 14 días."}

    runner.downgrade(any_url, "0006")  # the column goes; every FAQ, phrasing and other field stays
    assert runner.current(any_url) == "0006" and _counts_and_variants(any_url) == before
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            assert "answers" not in {c["name"] for c in inspect(conn).get_columns("faqs")}
            assert conn.execute(text("SELECT source FROM faqs WHERE faq_id = 'refund'")).scalar() == "refund.pdf"
    finally:
        engine.dispose()
    runner.upgrade(any_url)
    with FaqStore(any_url) as store:
        faq = store.get_faq("refund")
        assert faq.questions == ["Can I get a refund?", "money back please"] and faq.answers == {}


# ---------------------------------------------------------------- 0008 on a database with tokens

def test_0008_keeps_the_tokens_and_each_works_with_its_role(any_url):
    """Tokens made before roles existed: an admin token is the admin role under its old label, a read token
    the match-only key; no row changes."""
    from app.api.roles import may, principal_of_info
    from app.store import FaqStore
    from app.store.catalog import token_digest

    runner.upgrade(any_url, "0007")
    made = {"faqkb_old-admin-token": ("admin", "ops laptop"), "faqkb_old-read-token": ("read", "chat widget"),
            "faqkb_old-unnamed-admin": ("admin", None)}
    engine = make_engine(any_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO kbs (name, revision, settings, created_at, updated_at) VALUES "
                              "('shop', 0, '{}', '2026-11-01 10:00:00', '2026-11-01 10:00:00')"))
            for token, (kind, label) in made.items():
                conn.execute(text("INSERT INTO kb_tokens (kb, kind, token_sha256, label, created_at) "
                                  "VALUES ('shop', :k, :d, :l, '2026-11-01 10:00:00')"),
                             {"k": kind, "d": token_digest(token), "l": label})
            before = conn.execute(text("SELECT * FROM kb_tokens ORDER BY id")).all()
    finally:
        engine.dispose()

    runner.upgrade(any_url)
    assert runner.current(any_url) == "0008"
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT * FROM kb_tokens ORDER BY id")).all() == before
    finally:
        engine.dispose()
    with FaqStore(any_url, kb="shop") as store:
        admin, read, unnamed = (principal_of_info(store.catalog.verify_token(t)) for t in made)
        assert (admin.kb, admin.role, admin.name) == ("shop", "admin", "ops laptop")
        assert all(admin.may(role) for role in ("viewer", "editor", "publisher", "admin"))
        assert (read.role, read.name) == ("read", "chat widget") and not may(read.role, "viewer")
        assert (unnamed.role, unnamed.name) == ("admin", f"token {unnamed.token_id}")
        assert [(t.kind, t.label) for t in store.catalog.tokens("shop")] == list(made.values())
