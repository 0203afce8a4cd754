"""Answers per language (`answers`) in the store, on SQLite and PostgreSQL: stored by import and CRUD, read back
into FaqOut, snapshots and exports, an edit of only them is a change (and the same again is none), and bad ones
write nothing."""
from __future__ import annotations

import pytest

from app.store import KbRecord, KbValidationError
from kb.records import FaqDetails

ES = "Los reembolsos tardan 10 días."
DE = "Erstattungen dauern 10 Tage."


def records(**first) -> list[KbRecord]:
    return [KbRecord("a", "qa", "answer a", [], **first), KbRecord("a", "qa2"), KbRecord("b", "qb", "answer b")]


def test_import_stores_answers_and_counts_a_change_of_only_them(any_store):
    store = any_store
    store.import_records(records(answers={"es": ES}))
    assert store.get_faq("a").answers == {"es": ES} and store.get_faq("b").answers == {}
    assert store.snapshot().details["a"] == FaqDetails(answers={"es": ES})
    assert store.snapshot().details["b"] == FaqDetails()
    exported = list(store.export_records())
    assert [r.answers for r in exported] == [{"es": ES}, {"es": ES}, None]
    revision = store.revision()
    assert store.import_records(records(answers={"es": ES})).changes == 0 and store.revision() == revision
    for answers in [{"es": ES, "de": DE}, {"de": DE}, None]:  # None: the file says none, so they go
        report = store.import_records(records(answers=answers), sync=True)
        assert (report.faqs_updated, report.faqs_unchanged) == (1, 1), answers
        assert store.revision() == revision + 1 and store.snapshot().details["a"].answers == (answers or {})
        revision = store.revision()


def test_crud_writes_answers_and_moves_the_revision_only_on_a_change(any_store):
    store = any_store
    store.import_records(records())
    faq = store.create_faq("c", "answer c", ["qc"], answers={" FR ": "réponse c"})
    assert faq.answers == {"fr": "réponse c"} and faq.as_dict()["answers"] == {"fr": "réponse c"}
    revision = store.revision()
    assert store.update_faq("c", answers={"fr": "réponse c"}).answers == {"fr": "réponse c"}
    assert store.revision() == revision, "the same answers again change nothing"
    assert store.update_faq("c", answer="answer c, edited").answers == {"fr": "réponse c"}, "left out: kept"
    faq = store.update_faq("c", answers={"it": "risposta c", "nl": "antwoord c"})
    assert faq.answers == {"it": "risposta c", "nl": "antwoord c"} and store.revision() == revision + 2
    assert store.snapshot().details["c"].answers == {"it": "risposta c", "nl": "antwoord c"}
    assert store.update_faq("c", answers={}).answers == {} and store.revision() == revision + 3


@pytest.mark.parametrize("answers, named", [
    ({"xx": "?"}, "answers.xx is not a supported language code"),
    ({"es": ""}, "answers.es is empty"),
    ({"de": "x" * 20001}, "answers.de is longer than 20000 characters"),
    ({"pt": 5}, "answers.pt must be a string"),
    ("hola", "answers must be an object"),
])
def test_bad_answers_write_nothing(any_store, answers, named):
    store = any_store
    store.import_records(records())
    revision = store.revision()
    with pytest.raises(KbValidationError, match=named):
        store.create_faq("d", "answer d", ["qd"], answers=answers)
    with pytest.raises(KbValidationError, match=named):
        store.update_faq("a", answers=answers)
    with pytest.raises(KbValidationError, match=named):
        store.import_records([KbRecord("d", "qd", "answer d", answers=answers)])
    assert store.revision() == revision and store.get_faq("d") is None and store.get_faq("a").answers == {}
