"""Answers per language (`answers`: ISO 639-1 code -> the answer in that language) in KB files: the codes are
the service's, validation names `answers.<code>` with its line, JSONL and CSV read and write them, and
`faq kb export` -> `faq kb import` keeps them; formats that cannot carry them still import."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.settings import LANGUAGE_CODES
from kb.files import read_kb, write_kb
from kb.formats import read_any
from tests.helpers.kb import export_round_trip, run_cli
from kb.records import ANSWER_LANGUAGES, FaqDetails, KbFormatError, KbRecord, KbValidationError, check_faq, check_record

SPANISH = "El reembolso vuelve a tu tarjeta en 10 días."
GERMAN = "Die Erstattung geht innerhalb von 10 Tagen auf deine Karte."
ROWS = [
    {"faq_id": "refund", "question": "How do I get a refund?", "answer": "Refunds go back to your card within 10 days.",
     "answers": {" ES ": SPANISH, "de": GERMAN}},
    {"faq_id": "refund", "question": "¿Cómo consigo un reembolso?", "answers": {"es": SPANISH, "de": GERMAN}},
    {"faq_id": "hours", "question": "When are you open?", "answer": "9 to 5.", "tags": ["store"]},
]
FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def problems_of(tmp_path, rows) -> list[str]:
    with pytest.raises(KbFormatError) as exc:
        read_kb(write_jsonl(tmp_path / "kb.jsonl", rows))
    return [e.split(":", 1)[1] for e in exc.value.errors]  # without the file name


def test_the_codes_are_the_services_languages():
    assert ANSWER_LANGUAGES == LANGUAGE_CODES


def test_jsonl_answers_are_read_with_codes_normalised(tmp_path):
    records = read_kb(write_jsonl(tmp_path / "kb.jsonl", ROWS))
    assert records[0].answers == {"es": SPANISH, "de": GERMAN}  # " ES " read as es, the texts as given
    assert records[1].answers == {"es": SPANISH, "de": GERMAN} and records[2].answers is None
    # a row without them is the plain row it always was
    assert records[2] == KbRecord("hours", "When are you open?", "9 to 5.", ["store"])


def test_every_invalid_answer_is_named_with_its_line(tmp_path):
    base = {"faq_id": "a", "question": "q", "answer": "x"}
    rows = [
        {**base, "answers": {"xx": "hola"}},
        {**base, "faq_id": "b", "answers": {"es": ""}},
        {**base, "faq_id": "c", "answers": {"es": "   "}},
        {**base, "faq_id": "d", "answers": {"es": "x" * 20001}},
        {**base, "faq_id": "e", "answers": {"es": 1}},
        {**base, "faq_id": "f", "answers": ["es"]},
        {**base, "faq_id": "g", "answers": {"ES": "uno", "es": "dos"}},
        {**base, "faq_id": "h", "answers": {"de": "nul\u0000"}},
        {**base, "faq_id": "i", "answers": {"english": "long code"}},
    ]
    assert problems_of(tmp_path, rows) == [
        "1: answers.xx is not a supported language code (one of en, es, de, fr, it, pt, nl)",
        "2: answers.es is empty",
        "3: answers.es is empty",
        "4: answers.es is longer than 20000 characters (20001)",
        "5: answers.es must be a string, got a number",
        "6: answers must be an object of language code -> answer, got a list",
        "7: answers keys 'ES' and 'es' are the same language (keys are trimmed and matched case-insensitively)",
        "8: answers.de must not contain NUL characters",
        "9: answers.english is not a supported language code (one of en, es, de, fr, it, pt, nl)",
    ]


def test_lines_that_repeat_answers_must_agree(tmp_path):
    rows = [{"faq_id": "a", "question": "q1", "answer": "x", "answers": {"es": "uno"}},
            {"faq_id": "a", "question": "q2", "answers": {"es": "dos"}}]
    assert problems_of(tmp_path, rows) == [
        f"2: conflicting answers for faq_id 'a' (differs from the one at {tmp_path / 'kb.jsonl'}:1)"]


def test_check_record_and_check_faq_apply_the_same_rules():
    record, problems = check_record("a", "q", "x", None, answers={"Fr": "Bonjour"})
    assert problems == [] and record.answers == {"fr": "Bonjour"}
    assert check_record("a", "q", "x", None, answers={"zz": "?"})[1] == [
        "answers.zz is not a supported language code (one of en, es, de, fr, it, pt, nl)"]
    assert check_faq("a", "x", ["q"], []).answers == {}  # a whole FAQ defaults to none
    assert check_faq("a", None, None, None, partial=True).answers is None  # an update leaves them alone
    with pytest.raises(KbValidationError) as exc:
        check_faq("a", "x", ["q"], [], answers={"es": "", "it": "ciao"})
    assert exc.value.errors == ["answers.es is empty"]


@pytest.mark.parametrize("name", ["kb.jsonl", "kb.csv"])
def test_write_and_read_back_keep_answers(tmp_path, name):
    records = read_kb(write_jsonl(tmp_path / "in.jsonl", ROWS))
    out = tmp_path / name
    assert write_kb(out, records) == (2, 3)
    if name.endswith(".csv"):  # a JSON object in its own column, on the FAQ's first line
        header, first, second = out.read_text(encoding="utf-8").splitlines()[:3]
        assert header.split(",")[-1] == "answers" and SPANISH in first and SPANISH not in second
    else:
        lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert lines[0]["answers"] == {"es": SPANISH, "de": GERMAN} and "answers" not in lines[1]
        assert "answers" not in lines[2]  # an FAQ without them exports as it always did
    again = read_kb(out)
    assert [(r.faq_id, r.question, r.answers or None) for r in again if r.answer is not None] == [
        ("refund", "How do I get a refund?", {"es": SPANISH, "de": GERMAN}), ("hours", "When are you open?", None)]


def test_csv_answers_column_is_optional_and_checked(tmp_path):
    path = tmp_path / "kb.csv"
    path.write_text('faq_id,question,answer,answers\n'
                    'a,qa,x,"{""pt"": ""Olá""}"\n'
                    'b,qb,y,\n', encoding="utf-8")
    records = read_kb(path)
    assert records[0].answers == {"pt": "Olá"} and records[1].answers is None
    path.write_text('faq_id,question,answer,answers\n'
                    'a,qa,x,{not json\n'
                    'b,qb,y,"{""klingon"": ""x""}"\n', encoding="utf-8")
    with pytest.raises(KbFormatError) as exc:
        read_kb(path)
    assert [e.split(":", 1)[1] for e in exc.value.errors] == [
        "2: answers invalid JSON: Expecting property name enclosed in double quotes (column 2)",
        "3: answers.klingon is not a supported language code (one of en, es, de, fr, it, pt, nl)",
    ]


def test_formats_without_answers_still_import():
    for name in ("qnamaker-export.tsv", "azure-project.json"):
        imported = read_any(FORMATS / name)
        assert imported.records and all(r.answers is None for r in imported.records)


# ---------------------------------------------------------------- faq kb import / export

@pytest.mark.parametrize("name", ["export.jsonl", "export.csv"])
def test_cli_import_export_import_keeps_answers(faq_env, tmp_path, capsys, name):
    export = tmp_path / name
    original, copy = export_round_trip(faq_env.db_url, write_jsonl(tmp_path / "kb.jsonl", ROWS), export, capsys)
    assert copy.faqs == original.faqs and copy.details == original.details
    assert original.details["refund"] == FaqDetails(answers={"es": SPANISH, "de": GERMAN})
    assert original.details["hours"].answers == {}
    # a file that changes only an answer per language is an update
    changed = [{**ROWS[0], "answers": {"es": SPANISH}}, *ROWS[1:2], ROWS[2]]
    changed[1] = {**changed[1], "answers": {"es": SPANISH}}
    code, out, _ = run_cli(capsys, "kb", "import", write_jsonl(tmp_path / "changed.jsonl", changed), "--json")
    assert code == 0 and json.loads(out)["faqs_updated"] == 1
