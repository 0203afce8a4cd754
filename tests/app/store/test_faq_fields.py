"""The FAQ fields (metadata, source, follow_ups, context_only) in the store, on SQLite and PostgreSQL: import
(incl. sync) counts an edit of only these fields as a change, follow-up targets are checked against the KB
before anything is written, and deleting an FAQ takes it out of the follow-ups naming it."""
from __future__ import annotations

import pytest

from app.store import KbRecord, KbValidationError
from kb.records import FaqDetails


def records(**first) -> list[KbRecord]:
    return [KbRecord("a", "qa", "answer a", [], **first), KbRecord("b", "qb", "answer b")]


def test_import_counts_a_change_of_only_the_fields(any_store):
    store = any_store
    store.import_records(records())
    revision = store.revision()
    for fields in [{"metadata": {"K": "v"}}, {"source": "doc"}, {"follow_ups": [{"faq_id": "b", "text": "t"}]},
                   {"context_only": True}]:
        report = store.import_records(records(**fields), sync=True)
        assert (report.faqs_updated, report.faqs_unchanged) == (1, 1), fields
        assert store.revision() == revision + 1 and store.import_records(records(**fields)).changes == 0
        revision = store.revision()
        name, value = next(iter(fields.items()))
        got = getattr(store.snapshot().details["a"], name)
        assert got == ({"k": "v"} if name == "metadata" else value)
    assert store.snapshot().details["b"] == FaqDetails()


def test_follow_up_to_a_missing_faq_writes_nothing(any_store):
    store = any_store
    store.import_records(records())
    revision = store.revision()
    bad = [KbRecord("c", "qc", "answer c", follow_ups=[{"faq_id": "zzz", "text": "t"}], loc="kb.jsonl:3")]
    with pytest.raises(KbValidationError) as exc:
        store.import_records(bad)
    assert exc.value.errors == ["kb.jsonl:3: follow_ups[0].faq_id 'zzz' is not an FAQ of this file or KB"]
    # a target already in the KB is fine without sync, not with it (sync deletes it)
    ok = [KbRecord("c", "qc", "answer c", follow_ups=[{"faq_id": "a", "text": "t"}])]
    with pytest.raises(KbValidationError):
        store.import_records(ok, sync=True)
    assert store.revision() == revision and store.get_faq("c") is None
    store.import_records(ok)
    with pytest.raises(KbValidationError, match="'zzz' is not an FAQ of this KB"):
        store.update_faq("a", follow_ups=[{"faq_id": "zzz", "text": "t"}])
    with pytest.raises(KbValidationError, match="'zzz' is not an FAQ of this KB"):
        store.create_faq("d", "answer d", ["qd"], follow_ups=[{"faq_id": "zzz", "text": "t"}])
    assert store.get_faq("d") is None


def test_delete_takes_the_faq_out_of_follow_ups(any_store):
    store = any_store
    store.import_records([
        KbRecord("a", "qa", "answer a", follow_ups=[{"faq_id": "b", "text": "to b"}, {"faq_id": "c", "text": "to c"}]),
        KbRecord("b", "qb", "answer b", follow_ups=[{"faq_id": "c", "text": "to c"}]),
        KbRecord("c", "qc", "answer c", context_only=True)])
    assert store.prompting_to("c") == ["a", "b"]
    revision = store.revision()
    assert store.delete_faq("c")
    assert store.revision() == revision + 1 and store.prompting_to("c") == []
    assert store.get_faq("a").follow_ups == [{"faq_id": "b", "text": "to b"}] and store.get_faq("b").follow_ups == []
    exported = list(store.export_records())
    assert exported[0].follow_ups == [{"faq_id": "b", "text": "to b"}] and exported[1].follow_ups is None
