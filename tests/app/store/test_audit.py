"""The audit log at the store: every write leaves one row in its own transaction, with who, through what and the
state before and after; rows are never changed afterwards, outlive a deleted KB, and go only by the prune."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import insert, select

from app.store import KbRecord
from app.store.audit import (ACTIONS, Actor, acting_as, audit_t, change_summary, current_actor, importing,
                             prune_every_kb)
from app.store.reviews import phrasing_key

ANN = Actor("ann", "editor", "api", "req-1")


def rows(store, kb: str | None = None) -> list:
    """Every row of the KB, oldest first."""
    return list(reversed((store.for_kb(kb) if kb else store).audit.read(limit=10_000)))


def raw(store) -> list[tuple]:
    """Every column of every row, as the table holds them."""
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(audit_t).order_by(audit_t.c.id))]


def test_faq_changes_leave_one_row_each_with_the_faq_before_and_after(any_store):
    store = any_store
    with acting_as(ANN):
        store.create_faq("ship", "Three days.", ["How long is shipping?"], tags=["orders"])
        store.update_faq("ship", answer="Two days.", questions=["How long is shipping?", "Delivery time?"])
        store.update_faq("ship", answer="Two days.")  # no change: no row
        store.delete_faq("ship")
    found = rows(store)
    assert [r.action for r in found] == ["faq.create", "faq.update", "faq.delete"]
    create, update, delete = found
    for r in found:
        assert (r.actor, r.role, r.source, r.request_id, r.subject, r.kb) == ("ann", "editor", "api", "req-1",
                                                                               "ship", "default")
    assert create.before is None and create.after["answer"] == "Three days." and create.after["tags"] == ["orders"]
    assert update.before["answer"] == "Three days." and update.after["answer"] == "Two days."
    assert update.after["questions"] == ["How long is shipping?", "Delivery time?"]
    assert delete.before == update.after and delete.after is None


def test_deleting_an_faq_names_the_follow_ups_it_ended(store):
    store.create_faq("a", "A.", ["question a"])
    store.create_faq("b", "B.", ["question b"], follow_ups=[{"faq_id": "a", "text": "see a"}])
    store.delete_faq("a")
    last = rows(store)[-1]
    assert last.action == "faq.delete" and last.before["follow_up_of"] == ["b"]
    assert len(rows(store)) == 3  # the follow-up taken out of b is part of the deletion, not a row of its own


def test_an_import_is_one_row_with_its_file_and_counts_and_a_dry_run_none(any_store):
    store = any_store
    records = [KbRecord(f"f{i}", f"question {i}", f"answer {i}") for i in range(5)]
    store.import_records(records, dry_run=True)
    assert rows(store) == []
    with acting_as(ANN), importing("kb.jsonl", "ab" * 32, format="jsonl"):
        store.import_records(records)
        store.import_records(records)  # nothing changes, but it was done: recorded
    first, again = rows(store)
    assert first.action == again.action == "kb.import" and first.subject == "kb.jsonl"
    assert first.before == {"revision": 0}
    assert first.after["file"] == "kb.jsonl" and first.after["sha256"] == "ab" * 32 and first.after["format"] == "jsonl"
    assert (first.after["faqs_created"], first.after["variants_added"], first.after["revision"]) == (5, 5, 1)
    assert again.after["changes"] == 0 and again.after["faqs_unchanged"] == 5
    store.import_records(records[:1])  # outside `importing`: recorded without a file
    assert rows(store)[-1].after["file"] is None


def test_settings_tokens_and_kbs(any_store):
    store = any_store
    with acting_as(ANN):
        store.catalog.create("shop", {"default_threshold": 0.5})
        shop = store.for_kb("shop")
        shop.catalog.set_settings("shop", {"default_threshold": 0.6})
        shop.catalog.set_settings("shop", {"default_threshold": 0.6})  # the same: no row
        shop.catalog.set_settings("shop", {"default_threshold": 0.6, "small_talk": False}, "small_talk.update")
        token_id, token = store.catalog.issue_token("shop", "editor", "bob's laptop")
        assert store.catalog.revoke_token("shop", token_id)
        assert not store.catalog.revoke_token("shop", token_id)  # already revoked: nothing, no row
    found = rows(store, "shop")
    assert [r.action for r in found] == ["kb.create", "kb.settings", "small_talk.update", "token.create",
                                         "token.revoke"]
    create, settings, small_talk, issued, revoked = found
    assert create.after == {"settings": {"default_threshold": 0.5}}
    assert (settings.before, settings.after) == ({"default_threshold": 0.5}, {"default_threshold": 0.6})
    assert small_talk.after["small_talk"] is False
    assert issued.subject == str(token_id)
    assert issued.after == {"id": token_id, "role": "editor", "name": "bob's laptop"}
    assert revoked.before["revoked_at"] is None and revoked.after["revoked_at"]
    dumped = json.dumps([r.as_dict() for r in found])
    assert token not in dumped and token[len("faqkb_"):] not in dumped  # never the token


def test_a_deleted_kb_keeps_its_history_and_its_deletion(any_store):
    store = any_store
    store.catalog.create("gone")
    gone = store.for_kb("gone")
    gone.import_records([KbRecord("x", "a question", "an answer")])
    counts = store.catalog.delete("gone")
    assert not gone.kb_exists()
    found = rows(store, "gone")
    assert [r.action for r in found] == ["kb.create", "kb.import", "kb.delete"]
    assert found[-1].before["faqs"] == counts["faqs"] == 1 and found[-1].after is None


def test_review_decisions(any_store):
    store = any_store
    store.create_faq("pw", "Use the reset link.", ["reset my password"])
    key = phrasing_key("pw", "forgot my password")
    with acting_as(ANN):
        assert store.reviews.dismiss("phrasing", key, "pw: forgot my password", "not the same", by="ann")
        assert not store.reviews.dismiss("phrasing", key, "pw: forgot my password", "again")  # no row
        assert store.reviews.restore("phrasing", key)
        assert not store.reviews.restore("phrasing", key)  # no row
        store.faqs.add_questions("pw", ["forgot my password"], action="review.accept")
        store.faqs.add_questions("pw", ["forgot my password"], action="review.accept")  # had it: no row
    found = rows(store)[1:]
    assert [r.action for r in found] == ["review.dismiss", "review.restore", "review.accept"]
    dismissed, restored, accepted = found
    assert dismissed.subject == restored.subject == key
    assert dismissed.after["reason"] == "not the same" and dismissed.before is None
    assert restored.before["reason"] == "not the same" and restored.after is None
    assert accepted.subject == "pw" and accepted.after["questions"] == ["reset my password", "forgot my password"]
    assert store.audit.read(faq_id="pw")[0].action == "review.accept"


def test_rows_are_appended_never_changed(store):
    store.create_faq("a", "A.", ["question a"])
    store.update_faq("a", answer="A2.")
    before = raw(store)
    store.update_faq("a", answer="A3.")
    store.catalog.set_settings("default", {"default_threshold": 0.7})
    store.delete_faq("a")
    after = raw(store)
    assert after[:len(before)] == before
    assert [r[0] for r in after] == sorted(r[0] for r in after) and len(after) == len(before) + 3


def test_a_failed_change_leaves_no_row(store):
    from app.store import FaqExists, FaqNotFound

    store.create_faq("a", "A.", ["question a"])
    with pytest.raises(FaqExists):
        store.create_faq("a", "A again.", ["question a"])
    with pytest.raises(FaqNotFound):
        store.update_faq("missing", answer="x")
    assert not store.delete_faq("missing")
    assert [r.action for r in rows(store)] == ["faq.create"]


def test_read_filters(store):
    with acting_as(ANN):
        store.create_faq("a", "A.", ["question a"])
    with acting_as(Actor("bob", "admin", "console")):
        store.create_faq("b", "B.", ["question b"])
        store.catalog.issue_token("default", "viewer", "a")  # a subject "1", another action: not FAQ a's
    assert [r.subject for r in store.audit.read()] == ["1", "b", "a"]  # newest first
    assert [r.actor for r in store.audit.read(actor="bob")] == ["bob", "bob"]
    assert [r.action for r in store.audit.read(faq_id="a")] == ["faq.create"]
    assert len(store.audit.read(limit=1)) == 1
    assert store.audit.read(since=datetime.now(timezone.utc) + timedelta(minutes=1)) == []
    naive = (datetime.now(timezone.utc) - timedelta(minutes=1)).replace(tzinfo=None)  # read as UTC
    assert len(store.audit.read(since=naive)) == 3


def test_without_an_actor_the_operator_acts():
    actor = current_actor()
    assert (actor.role, actor.source) == ("admin", "cli") and actor.name


def test_prune_removes_only_old_rows_of_every_kb(store):
    old = datetime.now(timezone.utc) - timedelta(days=400)
    with store.engine.begin() as conn:
        for kb in ("default", "deleted-long-ago"):
            conn.execute(insert(audit_t).values(kb=kb, created_at=old, actor="x", role="admin", source="cli",
                                                action="faq.create", subject="old"))
    store.create_faq("new", "New.", ["a new question"])
    cutoff = datetime.now(timezone.utc) - timedelta(days=365)
    assert store.audit.prune(cutoff) == 1  # this KB's
    assert [r.subject for r in rows(store)] == ["new"]
    assert prune_every_kb(store.engine, cutoff, dry_run=True) == 1
    assert prune_every_kb(store.engine, cutoff) == 1
    assert rows(store, "deleted-long-ago") == [] and [r.subject for r in rows(store)] == ["new"]


def test_change_summary():
    assert change_summary({"answer": "a", "tags": []}, {"answer": "b", "tags": []}) == 'answer: "a" → "b"'
    assert change_summary({"revision": 1}, {"revision": 2, "file": "kb.csv", "faqs_deleted": 0, "sync": False}) \
        == 'revision: 1 → 2; file: "kb.csv"'
    assert change_summary({"gone": "x", "kept": 1}, {"kept": 1}) == 'gone: "x" → –'
    assert change_summary(None, {"id": 3}) == '– → {"id": 3}'
    assert change_summary({"x": 1}, None) == '{"x": 1} → –'
    assert len(change_summary({"answer": "x" * 5000}, {"answer": "y"})) <= 300


def test_the_documented_actions_are_the_recorded_ones():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    for action in ACTIONS:
        assert f"`{action}`" in doc, action
