"""FaqStore: KB import/export, snapshot, CRUD, builds, query log; SQLite and PostgreSQL."""
from __future__ import annotations

from datetime import timezone

import pytest
from sqlalchemy import text

from kb.records import KbRecord, KbValidationError
from app.store import FaqExists, FaqNotFound, FaqStore
from migrations import runner
from tests.helpers.store import KB


def questions_by_faq(store: FaqStore) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in store.snapshot().variants:
        out.setdefault(v.faq_id, []).append(v.question)
    return out


# ---------------------------------------------------------------- import

def test_import_then_reimport_changes_nothing(any_store):
    report = any_store.import_records(KB)
    assert (report.faqs_created, report.faqs_updated, report.faqs_unchanged) == (3, 0, 0)
    assert (report.variants_added, report.variants_removed, report.variants_unchanged) == (5, 0, 0)
    assert report.revision_before == 0 and report.revision == 1 == any_store.revision()

    again = any_store.import_records(KB)
    assert again.changes == 0
    assert (again.faqs_unchanged, again.variants_unchanged) == (3, 5)
    assert any_store.revision() == 1

    snap = any_store.snapshot()
    assert snap.revision == 1
    assert [v.variant_id for v in snap.variants] == sorted(v.variant_id for v in snap.variants)
    assert snap.faqs == {
        "reset": ("Use the reset link.", ["account"]),
        "refund": ("Within 30 days.", ["billing", "orders"]),
        "hours": ("9 to 5, Monday to Friday.", []),
    }
    faq = any_store.get_faq("reset")
    assert faq.questions == ["How do I reset my password?", "I forgot my password"]
    assert faq.created_at.tzinfo == timezone.utc


def test_import_updates_and_sync(any_store):
    any_store.import_records(KB)
    changed = [
        KbRecord("reset", "How do I reset my password?", "Click 'Forgot password'.", ["account"]),
        KbRecord("reset", "Password reset please"),
        KbRecord("refund", "Can I get a refund?", "Within 30 days.", ["billing", "orders"]),
    ]
    report = any_store.import_records(changed)
    # reset: new answer + a new variant; refund: nothing new (its other variant stays without --sync)
    assert (report.faqs_created, report.faqs_updated, report.faqs_unchanged, report.faqs_deleted) == (0, 1, 1, 0)
    assert (report.variants_added, report.variants_removed, report.variants_unchanged) == (1, 0, 2)
    assert len(questions_by_faq(any_store)["reset"]) == 3
    assert any_store.revision() == 2

    report = any_store.import_records(changed, sync=True)
    # sync: reset loses "I forgot my password", refund loses one variant (-> updated), hours deleted
    assert (report.faqs_updated, report.faqs_unchanged, report.faqs_deleted) == (2, 0, 1)
    assert report.variants_removed == 3 and report.variants_added == 0
    assert questions_by_faq(any_store) == {
        "reset": ["How do I reset my password?", "Password reset please"],
        "refund": ["Can I get a refund?"],
    }
    assert any_store.get_faq("hours") is None
    assert any_store.import_records(changed, sync=True).changes == 0


def test_dry_run_writes_nothing(store):
    report = store.import_records(KB, dry_run=True)
    assert report.dry_run and report.faqs_created == 3 and report.variants_added == 5
    assert store.revision() == 0 and store.count_faqs() == 0


def test_invalid_import_writes_nothing_and_lists_every_error(store):
    store.import_records(KB)
    bad = [
        KbRecord("new", "A fine question", "An answer"),
        KbRecord("", "orphan question", "x"),
        KbRecord("refund", "Refund?", "Within 30 days."),
        KbRecord("refund", "x" * 1001),
        KbRecord("refund", "Another refund question", "A different answer"),
        KbRecord("noanswer", "Where is the answer?"),
    ]
    with pytest.raises(KbValidationError) as info:
        store.import_records(bad)
    errors = info.value.errors
    assert "record 2: faq_id is empty" in errors
    assert "record 4: question is longer than 1000 characters (1001)" in errors
    assert "record 5: conflicting answer for faq_id 'refund' (differs from the one at record 3)" in errors
    assert "record 6: faq_id 'noanswer' has no answer on any row (give it on at least one of its rows)" in errors
    assert len(errors) == 4
    assert store.revision() == 1 and store.get_faq("new") is None


def test_whitespace_variants_are_deduplicated(store):
    report = store.import_records([
        KbRecord("a", "  How   do I\n pay? ", "By card."),
        KbRecord("a", "How do I pay?"),
    ])
    assert report.variants_added == 1
    assert store.get_faq("a").questions == ["How do I pay?"]
    # same question under another FAQ is allowed
    store.import_records([KbRecord("b", "How do I pay?", "Other")])
    assert store.stats()["variants"] == 2


def test_export_round_trip(any_store, tmp_path):
    any_store.import_records(KB)
    exported = list(any_store.export_records())
    assert [r.question for r in exported] == [r.question for r in KB]
    with FaqStore(f"sqlite:///{tmp_path / 'copy.db'}") as copy:
        runner.upgrade(str(copy.engine.url))
        copy.import_records(exported)
        a, b = any_store.snapshot(), copy.snapshot()
        assert a.faqs == b.faqs
        assert [(v.faq_id, v.question) for v in a.variants] == [(v.faq_id, v.question) for v in b.variants]
        assert copy.import_records(exported).changes == 0


def test_stats(store):
    assert store.stats()["variants_per_faq"] is None
    store.import_records(KB)
    stats = store.stats()
    assert stats["faqs"] == 3 and stats["variants"] == 5
    assert stats["variants_per_faq"] == {"min": 1, "median": 2, "max": 2}
    assert stats["tags"] == 3 and stats["revision"] == 1 and stats["last_build"] is None
    store.record_build(version="v1", encoder_id="msem", n_faqs=3, n_variants=5, status="ready")
    assert stats != store.stats() and store.stats()["last_build"]["version"] == "v1"


# ---------------------------------------------------------------- CRUD

def test_crud(any_store):
    created = any_store.create_faq("pay", "By card.", ["How do I pay?", "How do I  pay?", "Payment options"],
                                   tags=["billing"])
    assert created.questions == ["How do I pay?", "Payment options"] and created.tags == ["billing"]
    assert any_store.revision() == 1
    with pytest.raises(FaqExists):
        any_store.create_faq("pay", "x", ["q"])

    ids_before = {v.question: v.variant_id for v in any_store.snapshot().variants}
    updated = any_store.update_faq("pay", questions=["Payment options", "Can I pay by card?"])
    assert updated.answer == "By card." and updated.questions == ["Payment options", "Can I pay by card?"]
    ids_after = {v.question: v.variant_id for v in any_store.snapshot().variants}
    assert ids_after["Payment options"] == ids_before["Payment options"]  # kept variants keep their id
    assert updated.updated_at >= created.updated_at
    assert any_store.revision() == 2

    any_store.update_faq("pay", answer="By card.", tags=["billing"])  # no change: no revision bump
    assert any_store.revision() == 2
    assert any_store.update_faq("pay", tags=[]).tags == []
    with pytest.raises(FaqNotFound):
        any_store.update_faq("nope", answer="x")

    any_store.create_faq("ship", "2 days.", ["How long does shipping take?"])
    assert [f.faq_id for f in any_store.list_faqs()] == ["pay", "ship"]
    assert [f.faq_id for f in any_store.list_faqs(offset=1, limit=5)] == ["ship"]
    assert [f.faq_id for f in any_store.list_faqs(q="SHIPPING")] == ["ship"]  # matches a question, any case
    assert [f.faq_id for f in any_store.list_faqs(q="by card")] == ["pay"]  # matches the answer
    assert any_store.list_faqs(q="100%") == [] and any_store.count_faqs(q="ship") == 1
    assert any_store.count_faqs() == 2

    revision = any_store.revision()
    assert any_store.delete_faq("pay") is True and any_store.revision() == revision + 1
    assert any_store.delete_faq("pay") is False and any_store.revision() == revision + 1
    assert [v.faq_id for v in any_store.snapshot().variants] == ["ship"]  # cascade removed the variants


def test_crud_validation_matches_importer(store):
    with pytest.raises(KbValidationError) as info:
        store.create_faq("x", "", ["q" * 1001, 5], tags=["ok", ""])
    assert info.value.errors == [
        "answer is empty",
        "questions[0] is longer than 1000 characters (1001)",
        "questions[1] must be a string, got a number",
        "tags[1] is empty",
    ]
    with pytest.raises(KbValidationError, match="at least one question"):
        store.create_faq("x", "answer", [])
    with pytest.raises(KbValidationError, match="answer is longer than 20000"):
        store.update_faq("x", answer="a" * 20001)
    assert store.revision() == 0


# ---------------------------------------------------------------- builds and query log

def test_builds(any_store):
    any_store.record_build(version="v1", encoder_id="msem", dim=256, n_trees=50)
    any_store.update_build("v1", status="ready", n_faqs=3, n_variants=5, timings={"encode_s": 1.5})
    any_store.record_build(version="v2", encoder_id="minilm", status="building")
    builds = any_store.list_builds()
    assert [b["version"] for b in builds] == ["v2", "v1"]
    assert builds[1]["status"] == "ready" and builds[1]["timings"] == {"encode_s": 1.5}
    assert builds[1]["started_at"].tzinfo is not None
    with pytest.raises(KeyError):
        any_store.update_build("v9", status="failed")
    with pytest.raises(ValueError, match="unknown index build field"):
        any_store.record_build(version="v3", encoder_id="x", colour="red")


def test_query_log_and_feedback(any_store):
    any_store.log_queries([
        {"request_id": "r1", "query": "how to pay", "faq_id": "pay", "score": 0.9, "latency_ms": 3.2, "arm": "a"},
        {"request_id": "r2", "query": "???", "faq_id": None, "score": 0.1, "latency_ms": 2.0},
    ])
    assert any_store.record_feedback("r1", True, None) is True
    assert any_store.record_feedback("r2", False, "pay") is True
    assert any_store.record_feedback("missing", True, None) is False
    with any_store.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT request_id, feedback_correct, feedback_faq_id, arm FROM query_log ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [("r1", True, None, "a"), ("r2", False, "pay", None)]
    with pytest.raises(ValueError, match="unknown field"):
        any_store.log_queries([{"request_id": "r3", "query": "q", "bogus": 1}])


def test_read_query_log_for_mining(any_store):
    """What `faq kb mine` reads: oldest first, `since` inclusive (aware or naive UTC), feedback attached."""
    from datetime import datetime, timezone

    old, new = datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 6, 1, 12, tzinfo=timezone.utc)
    any_store.log_queries([
        {"request_id": "a", "query": "how to pay", "faq_id": "pay", "score": 0.93, "created_at": old},
        {"request_id": "b", "query": "pay by card?", "faq_id": "pay", "score": 0.71, "created_at": new},
        {"request_id": "c", "query": "weather", "faq_id": None, "score": 0.12, "created_at": new},
    ])
    any_store.record_feedback("b", False, "card")
    rows = any_store.read_query_log()
    assert [(r["query"], r["faq_id"], r["feedback_correct"], r["feedback_faq_id"]) for r in rows] == [
        ("how to pay", "pay", None, None), ("pay by card?", "pay", False, "card"), ("weather", None, None, None)]
    assert rows[0]["score"] == pytest.approx(0.93)
    assert [r["query"] for r in any_store.read_query_log(since=new)] == ["pay by card?", "weather"]
    assert [r["query"] for r in any_store.read_query_log(since=new.replace(tzinfo=None))] == ["pay by card?", "weather"]
    assert any_store.read_query_log(since=datetime(2027, 1, 1, tzinfo=timezone.utc)) == []
    # what `faq index calibrate` and the build gate read: only rows with feedback
    assert [r["query"] for r in any_store.read_query_log(with_feedback=True)] == ["pay by card?"]


# ---------------------------------------------------------------- engine / concurrency / speed

def test_sqlite_pragmas_and_concurrent_reader(store, db_url):
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    store.import_records(KB)
    # a second process-like store reads while the first holds the write lock (WAL: no blocking)
    with FaqStore(db_url) as other, store.locked_write() as conn:
        conn.exec_driver_sql("DELETE FROM faqs")
        assert len(other.snapshot().faqs) == 3  # sees the committed state only
    assert other.snapshot().faqs == {}


def test_from_settings_needs_a_migrated_database(tmp_path):
    """Opening a store never migrates (entry points do): an empty or outdated database is refused with
    the command that fixes it, and a migrated one opens."""
    from app.settings import Settings
    from app.store import SchemaNotReady
    from migrations.runner import migrated_store
    from migrations import runner

    settings = Settings(data_dir=tmp_path / "deep" / "var", database_url=None)
    with pytest.raises(SchemaNotReady, match="has no schema yet.*faq db upgrade"):
        FaqStore.from_settings(settings)
    assert (tmp_path / "deep" / "var").is_dir()
    with migrated_store(settings) as first:
        assert (tmp_path / "deep" / "var" / "faq.db").exists()
        first.create_faq("a", "b", ["c"])
    with FaqStore.from_settings(settings) as second:  # already at head: just a version check
        assert second.revision() == 1
    with FaqStore(settings.db_url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0000'")
    with pytest.raises(SchemaNotReady, match="is at schema revision 0000, this version needs " + runner.head()):
        FaqStore.from_settings(settings)


def test_bulk_import_snapshot_and_idempotent_reimport(store):
    # correctness at a size where per-row code paths would show; speed is measured in bench/store_import.py
    n_faqs, per_faq = 5_000, 4
    records = [
        KbRecord(f"faq{i}", f"question {j} about topic {i}", f"answer {i}" if j == 0 else None)
        for i in range(n_faqs) for j in range(per_faq)
    ]
    report = store.import_records(records)
    assert report.variants_added == n_faqs * per_faq
    snap = store.snapshot()
    assert len(snap.variants) == n_faqs * per_faq
    assert store.import_records(records).changes == 0
