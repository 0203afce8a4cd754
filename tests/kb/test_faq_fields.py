"""The FAQ fields of conversation-grade matching (metadata, source, follow_ups, context_only) in KB files:
reading, validation with `file:line` reasons, follow-up targets, and `faq kb export` -> `faq kb import`."""
from __future__ import annotations

import json

import pytest

from app.store import FaqStore
from kb.records import FaqDetails, KbFormatError, KbRecord, check_faq, KbValidationError
from kb.files import read_kb
from tests.helpers.kb import export_round_trip, run_cli

ROWS = [
    {"faq_id": "order", "question": "Where is my order?", "answer": "See Orders.", "tags": ["orders"],
     "metadata": {" Lang ": " en ", "TEAM": "shipping"}, "source": " https://help.example.com/orders ",
     "follow_ups": [{"faq_id": "cancel", "text": "Do you  want to\ncancel it?"}, {"faq_id": "refund", "text": "Refund?"}]},
    {"faq_id": "order", "question": "Track my parcel", "metadata": {"lang": "en", "team": "shipping"}},
    {"faq_id": "cancel", "question": "Cancel my order", "answer": "Press Cancel.", "context_only": True,
     "follow_ups": [{"faq_id": "refund", "text": "Get your money back"}]},
    {"faq_id": "refund", "question": "Refund please", "answer": "Within 10 days.", "context_only": False},
]


def write_jsonl(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def problems_of(tmp_path, rows, **kwargs) -> list[str]:
    with pytest.raises(KbFormatError) as exc:
        read_kb(write_jsonl(tmp_path / "kb.jsonl", rows), **kwargs)
    return [e.split(":", 1)[1] for e in exc.value.errors]  # without the file name


def test_jsonl_fields_are_read_and_normalised(tmp_path):
    path = write_jsonl(tmp_path / "kb.jsonl", ROWS)
    records = read_kb(path)
    first = records[0]
    assert first.metadata == {"lang": "en", "team": "shipping"}  # keys trimmed + lower-cased, values trimmed
    assert first.source == "https://help.example.com/orders"
    assert first.follow_ups == [{"faq_id": "cancel", "text": "Do you want to cancel it?"},
                                {"faq_id": "refund", "text": "Refund?"}]
    assert first.loc == f"{path}:1" and records[2].context_only is True
    # a row without them says nothing; the plain four-field row is unchanged
    assert records[3] == KbRecord("refund", "Refund please", "Within 10 days.", None, context_only=False)


def test_every_invalid_field_is_named_with_its_line_and_limit(tmp_path):
    base = {"faq_id": "a", "question": "q", "answer": "x"}
    rows = [
        {**base, "metadata": {f"k{i}": "v" for i in range(51)}},
        {**base, "faq_id": "b", "metadata": {"k" * 101: "v"}},
        {**base, "faq_id": "c", "metadata": {"k": "v" * 501}},
        {**base, "faq_id": "d", "metadata": {"Lang": "en", " lang": "fr"}},
        {**base, "faq_id": "e", "metadata": {"k": 1}},
        {**base, "faq_id": "f", "source": "s" * 501},
        {**base, "faq_id": "g", "follow_ups": [{"faq_id": f"t{i}", "text": "x"} for i in range(21)]},
        {**base, "faq_id": "h", "follow_ups": [{"faq_id": "a", "text": "t" * 201}]},
        {**base, "faq_id": "i", "follow_ups": [{"faq_id": "a", "text": "x"}, {"faq_id": "a", "text": "y"}]},
        {**base, "faq_id": "j", "follow_ups": [{"faq_id": "j", "text": "me"}]},
        {**base, "faq_id": "k", "context_only": "yes"},
        {**base, "faq_id": "l", "metadata": {"k": "nul\u0000"}},
        {**base, "faq_id": "m", "follow_ups": [{"faq_id": "a", "text": "x", "url": "u"}]},
        {**base, "faq_id": "n", "metadata": ["k"]},
    ]
    problems = problems_of(tmp_path, rows)
    assert problems == [
        "1: too many metadata keys (51 > 50)",
        "2: metadata key 'kkkkkkkkkkkkkkkkkkkk'... is longer than 100 characters (101)",
        "3: metadata['k'] is longer than 500 characters (501)",
        "4: metadata keys 'Lang' and ' lang' are the same key (keys are trimmed and matched case-insensitively)",
        "5: metadata['k'] must be a string, got a number",
        "6: source is longer than 500 characters (501)",
        "7: too many follow_ups (21 > 20)",
        "8: follow_ups[0].text is longer than 200 characters (201)",
        "9: follow_ups[1].faq_id 'a' is already follow_ups[0]",
        "10: follow_ups[0].faq_id 'j' is the FAQ itself",
        "11: context_only must be true or false, got a string",
        "12: metadata['k'] must not contain NUL characters",
        "13: follow_ups[0] has unknown field(s) 'url' (a follow-up has faq_id and text)",
        "14: metadata must be an object of strings, got a list",
    ]


def test_lines_that_repeat_a_field_must_agree(tmp_path):
    rows = [{"faq_id": "a", "question": "q1", "answer": "x", "source": "one", "context_only": True},
            {"faq_id": "a", "question": "q2", "source": "two", "context_only": True},
            {"faq_id": "a", "question": "q3", "follow_ups": [{"faq_id": "b", "text": "t"}]},
            {"faq_id": "a", "question": "q4", "follow_ups": [{"faq_id": "b", "text": "other"}]},
            {"faq_id": "b", "question": "q5", "answer": "y"}]
    problems = problems_of(tmp_path, rows)
    assert problems == ["2: conflicting source for faq_id 'a' (differs from the one at "
                        f"{tmp_path / 'kb.jsonl'}:1)",
                        "4: conflicting follow_ups for faq_id 'a' (differs from the one at "
                        f"{tmp_path / 'kb.jsonl'}:3)"]


def test_follow_up_targets_are_checked_against_the_file_and_the_known_faqs(tmp_path):
    rows = [{"faq_id": "a", "question": "q", "answer": "x", "follow_ups": [{"faq_id": "b", "text": "t"},
                                                                          {"faq_id": "old", "text": "u"}]}]
    assert read_kb(write_jsonl(tmp_path / "kb.jsonl", rows))  # without the KB's FAQs, the store checks
    assert problems_of(tmp_path, rows, known_faq_ids=["old"]) == [
        "1: follow_ups[0].faq_id 'b' is not an FAQ of this file or KB"]
    assert read_kb(write_jsonl(tmp_path / "kb.jsonl", rows), known_faq_ids=["old", "b"])


def test_csv_optional_columns(tmp_path):
    path = tmp_path / "kb.csv"
    path.write_text(
        "faq_id,question,answer,tags,metadata,source,follow_ups,context_only\n"
        'a,qa,x,t,"{""Lang"": ""en""}",\'=doc,"[{""faq_id"": ""b"", ""text"": ""go""}]",\n'
        "b,qb,y,,,,,TRUE\n"
        "b,qb2,,,,,,\n",
        encoding="utf-8")
    records = read_kb(path)
    assert (records[0].metadata, records[0].source, records[0].follow_ups, records[0].context_only) == (
        {"lang": "en"}, "=doc", [{"faq_id": "b", "text": "go"}], None)
    assert records[1].context_only is True and records[2].context_only is None

    path.write_text("faq_id,question,answer,metadata,follow_ups,context_only\n"
                    "a,qa,x,{not json,\"{}\",maybe\n", encoding="utf-8")
    with pytest.raises(KbFormatError) as exc:
        read_kb(path)
    assert [e.split(":", 1)[1] for e in exc.value.errors] == [
        "2: metadata invalid JSON: Expecting property name enclosed in double quotes (column 2)",
        "2: context_only must be true, false or empty, got 'maybe'",
        "2: follow_ups must be a list of objects {\"faq_id\", \"text\"}, got an object",
    ]


def test_check_faq_applies_the_same_rules_and_defaults():
    checked = check_faq("a", "x", ["q"], [], metadata={"K": "v"})
    assert (checked.metadata, checked.source, checked.follow_ups, checked.context_only) == ({"k": "v"}, None, [], False)
    with pytest.raises(KbValidationError) as exc:
        check_faq("a", "x", ["q"], [], follow_ups=[{"faq_id": "a", "text": "t"}], source=" ")
    assert exc.value.errors == ["source is empty", "follow_ups[0].faq_id 'a' is the FAQ itself"]


# ---------------------------------------------------------------- faq kb import / export

def test_cli_import_refuses_a_follow_up_to_a_missing_faq_and_imports_nothing(faq_env, tmp_path, capsys):
    assert run_cli(capsys, "kb", "import", write_jsonl(tmp_path / "base.jsonl", ROWS[2:]))[0] == 0
    # `cancel` and `refund` are in the KB: a file that prompts to them imports
    ok = write_jsonl(tmp_path / "ok.jsonl", [{"faq_id": "new", "question": "q", "answer": "x",
                                              "follow_ups": [{"faq_id": "refund", "text": "t"}]}])
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"faq_id": "other", "question": "q2", "answer": "y"},
                                               {"faq_id": "more", "question": "q3", "answer": "z",
                                                "follow_ups": [{"faq_id": "nowhere", "text": "t"}]}])
    code, _, err = run_cli(capsys, "kb", "import", bad)
    assert code != 0 and f"{bad}:2: follow_ups[0].faq_id 'nowhere' is not an FAQ of this file or KB" in err
    assert "nothing was imported" in err
    # --sync deletes the FAQs not in the file, so they cannot be prompted to
    code, _, err = run_cli(capsys, "kb", "import", ok, "--sync")
    assert code != 0 and f"{ok}:1: follow_ups[0].faq_id 'refund' is not an FAQ of this file or KB" in err
    assert run_cli(capsys, "kb", "import", ok)[0] == 0
    with FaqStore(faq_env.db_url) as store:
        assert sorted(f.faq_id for f in store.list_faqs()) == ["cancel", "new", "refund"]
        assert store.get_faq("new").follow_ups == [{"faq_id": "refund", "text": "t"}]


@pytest.mark.parametrize("name", ["export.jsonl", "export.csv"])
def test_cli_export_and_import_reproduce_every_field(faq_env, tmp_path, capsys, name):
    export = tmp_path / name
    original, copy = export_round_trip(faq_env.db_url, write_jsonl(tmp_path / "kb.jsonl", ROWS), export, capsys)
    if name.endswith(".jsonl"):  # the fields are on the first line of each FAQ, like answer and tags
        lines = [json.loads(line) for line in export.read_text(encoding="utf-8").splitlines()]
        assert lines[0]["metadata"] == {"lang": "en", "team": "shipping"} and "metadata" not in lines[1]
        assert lines[2]["context_only"] is True and "context_only" not in lines[3]
    assert copy.faqs == original.faqs and copy.details == original.details
    assert [(v.faq_id, v.question) for v in copy.variants] == [(v.faq_id, v.question) for v in original.variants]
    assert original.details["order"] == FaqDetails(
        {"lang": "en", "team": "shipping"}, "https://help.example.com/orders",
        [{"faq_id": "cancel", "text": "Do you want to cancel it?"}, {"faq_id": "refund", "text": "Refund?"}], False)
    assert original.details["cancel"].context_only is True
