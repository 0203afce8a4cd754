"""The QnA ids of a KB's FAQs (kb/formats/base.py `qna_ids`) for any faq_ids, digits of every script
included: an id of ASCII digits keeps its number, every other id gets a stable one, no two FAQs share one,
and the QnA Maker and Azure exports of such a KB are written and read back."""
from __future__ import annotations

import json

import pytest

from hypothesis import given, settings, strategies as st

from kb.formats import read_any, write_any
from kb.formats.base import MAX_QNA_ID, KbContents, qna_ids
from kb.records import KbRecord

#: text whose str.isdigit() holds though int() refuses it or reads it as another number: "²", "①", "١٢"
unicode_digits = st.text(st.characters(categories=("Nd", "No")).filter(str.isdigit), min_size=1, max_size=6)
faq_ids = st.lists(st.one_of(unicode_digits, st.integers(1, MAX_QNA_ID + 10).map(str), st.text(min_size=1, max_size=8),
                             st.sampled_from(["²", "①", "٣", "007", "0", "1²", str(MAX_QNA_ID)])),
                   min_size=1, max_size=30, unique=True)


@given(ids=faq_ids)
def test_every_faq_id_gets_its_own_qna_id(ids):
    out = qna_ids(ids)
    assert set(out) == set(ids)
    assert len(set(out.values())) == len(ids), "no two FAQs share a QnA id"
    assert all(0 < n <= MAX_QNA_ID for n in out.values())
    for f in ids:
        if f.isascii() and f.isdigit() and f == str(int(f)) and 0 < int(f) <= MAX_QNA_ID:
            assert out[f] == int(f), "an id QnA Maker or Azure gave keeps its number"
    assert qna_ids(reversed(ids)) == out, "the same KB numbers the same way"


@settings(max_examples=15, deadline=None)
@given(ids=st.lists(unicode_digits, min_size=1, max_size=4, unique=True))
def test_a_kb_of_unicode_digit_ids_exports_to_both_services(tmp_path_factory, ids):
    folder = tmp_path_factory.mktemp("qna_ids")
    records = [KbRecord(faq_id=f, question=f"Question {n}?", answer=f"Answer {n}.") for n, f in enumerate(ids)]
    expected = qna_ids(ids)
    for fmt, name in (("qnamaker", "kb.tsv"), ("azure", "kb.json")):
        path = folder / name
        assert write_any(path, fmt, KbContents(records)) == (len(ids), len(ids))
        back = read_any(path, fmt)
        by_answer = {r.answer: r.faq_id for r in back.records}
        assert {by_answer[f"Answer {n}."] for n in range(len(ids))} == {str(expected[f]) for f in ids}
    project = json.loads((folder / "kb.json").read_text(encoding="utf-8"))
    assert sorted(q["id"] for q in project["assets"]["qnas"]) == sorted(expected.values())


@pytest.mark.parametrize("cell", ["²", "①", "٣", "１２", "9" * 5000, "-3", "1.5"])
def test_a_qnaid_cell_of_anything_but_ascii_digits_is_refused_at_its_line(cell):
    from kb.formats.qna import qna_id_of

    faq_id, problem = qna_id_of(cell)
    assert faq_id is None and problem.startswith("QnaId must be a positive integer")
