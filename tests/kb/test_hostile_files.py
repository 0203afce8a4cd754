"""Hostile KB files: every import path (read_kb, read_queries, `faq kb import`) turns them into
`file:line: reason` errors and writes nothing; a hypothesis fuzz of the readers; and the CSV escape of
formula-leading cells, lossless through `faq kb export` -> `faq kb import`."""
from __future__ import annotations

import csv
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from app.store import FaqStore
from cli.main import main
from kb.records import KbFormatError, KbRecord, check_record, group_records
from kb.files import csv_escape, csv_unescape, read_kb, read_queries, write_kb
from tests.helpers.hostile_files import HOSTILE_FILES, csv_files, jsonl_files

FUZZ = hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- hostile files

@pytest.mark.parametrize("name", list(HOSTILE_FILES))
def test_hostile_file_is_a_format_error_at_its_line(tmp_path, name):
    data, first = HOSTILE_FILES[name]
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(KbFormatError) as info:
        read_kb(path)
    assert info.value.errors[0].startswith(f"{path}:{first}"), info.value.errors
    assert all(re.match(rf"{re.escape(str(path))}:\d+: \S", e) for e in info.value.errors), info.value.errors


def test_query_files_get_the_same_errors(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("query," + "f" * (csv.field_size_limit() + 1) + "\n", encoding="utf-8")
    with pytest.raises(KbFormatError, match=rf"q.csv:1: invalid CSV: a field is longer than "
                                            rf"{csv.field_size_limit()} characters"):
        read_queries(path)
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "ok"}\n{"query": ' + "[" * 3000 + "]" * 3000 + "}\n", encoding="utf-8")
    with pytest.raises(KbFormatError, match=r"q.jsonl:2: invalid JSON: nested too deeply"):
        read_queries(path)


@pytest.mark.parametrize("name", ["long-header.csv", "long-cell.csv", "deep.jsonl", "huge-int.jsonl",
                                  "open-quote.csv"])
def test_cli_import_of_a_hostile_file_fails_cleanly_and_writes_nothing(faq_env, tmp_path, capsys, name):
    data, first = HOSTILE_FILES[name]
    path = tmp_path / name
    path.write_bytes(data)
    code, out, err = run_cli(capsys, "kb", "import", str(path), "--kb", "hostile")
    assert code == 2 and out == ""
    assert f"{path}:{first}" in err and err.rstrip().endswith("nothing was imported"), err
    assert "Traceback" not in err
    from migrations.runner import migrated_store

    with migrated_store(faq_env) as store:
        assert not store.catalog.exists("hostile"), "a file that does not read creates no KB"


# ---------------------------------------------------------------- fuzz

def _read_or_format_error(path, reader) -> None:
    try:
        result = reader(path)
    except KbFormatError as exc:
        assert exc.errors and all(e.startswith(f"{path}:") for e in exc.errors), exc.errors
    else:
        assert isinstance(result, list)


@FUZZ
@given(data=jsonl_files)
def test_fuzz_jsonl_reads_or_is_a_format_error(tmp_path, data):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)
    _read_or_format_error(path, read_kb)
    _read_or_format_error(path, read_queries)


@FUZZ
@given(data=csv_files)
def test_fuzz_csv_reads_or_is_a_format_error(tmp_path, data):
    path = tmp_path / "fuzz.csv"
    path.write_bytes(data)
    _read_or_format_error(path, read_kb)
    _read_or_format_error(path, read_queries)


# ---------------------------------------------------------------- CSV formula escape

def test_escape_is_lossless_and_leaves_plain_cells_alone():
    for cell in ["=1+1", "+1", "-x", "@SUM(A1)", "\tx", "\rx", "'=x", "''-x", "'", "''", "'a", "a=b", "", "x"]:
        assert csv_unescape(csv_escape(cell)) == cell
        assert not csv_escape(cell).startswith(FORMULA_LEADS)
    assert csv_escape("=1") == "'=1" and csv_escape("'=1") == "''=1" and csv_escape("'a") == "'a"
    assert csv_unescape("'=1") == "=1" and csv_unescape("'a") == "'a"


FORMULA_ROWS = [
    {"faq_id": "=cmd", "question": "=1+1 what?", "answer": "=HYPERLINK(\"http://x\",\"y\")",
     "tags": ["=t", "-neg", "@at", "+p", "'=quoted"]},
    {"faq_id": "=cmd", "question": "+ plus question"},
    {"faq_id": "+1", "question": "-minus question", "answer": "\tTab first", "tags": ["plain"]},
    {"faq_id": "-x", "question": "@at question", "answer": "\rCR first\r\nthen more"},
    {"faq_id": "@sum", "question": "\tTabbed question", "answer": "+plus answer", "source": "=HYPERLINK(\"x\")",
     "metadata": {"=k": "-v"}},
    {"faq_id": "'=already", "question": "'=quoted question", "answer": "''-two quotes"},
    {"faq_id": "plain", "question": "It's plain", "answer": "'Quoted' but not a formula", "tags": ["'x"]},
]


def test_csv_export_escapes_formulas_and_cli_round_trip_is_lossless(faq_env, tmp_path, capsys):
    source = tmp_path / "kb.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in FORMULA_ROWS), encoding="utf-8")
    assert run_cli(capsys, "kb", "import", str(source))[0] == 0
    export = tmp_path / "export.csv"
    assert run_cli(capsys, "kb", "export", str(export))[0] == 0
    with open(export, encoding="utf-8", newline="") as fh:
        cells = [cell for row in csv.reader(fh) for cell in row]
    assert len(cells) == 9 * (len(FORMULA_ROWS) + 1)  # faq_id, question, answer, tags and the 5 FAQ fields
    assert not [c for c in cells if c.startswith(FORMULA_LEADS)], cells
    assert "'=cmd" in cells and "'\tTab first" in cells and "''=already" in cells and "It's plain" in cells

    code, _, err = run_cli(capsys, "kb", "import", str(export), "--kb", "copy")
    assert code == 0, err
    with FaqStore(faq_env.db_url) as store:
        original, copy = store.snapshot(), store.for_kb("copy").snapshot()
    assert copy.faqs == original.faqs
    assert copy.details == original.details and original.details["@sum"].source == '=HYPERLINK("x")'
    assert [(v.faq_id, v.question) for v in copy.variants] == [(v.faq_id, v.question) for v in original.variants]
    assert original.faqs["+1"] == ("\tTab first", ["plain"]) and original.faqs["-x"][0] == "\rCR first\r\nthen more"
    assert original.faqs["=cmd"][1] == ["=t", "-neg", "@at", "+p", "'=quoted"]
    # and the exported file itself reads back to the same FAQs
    assert group_records((str(i), r) for i, r in enumerate(read_kb(export)))[0] == \
        group_records((str(i), r) for i, r in enumerate(read_kb(source)))[0]


_odd_text = st.text(st.sampled_from(["=", "+", "-", "@", "\t", "\r", "\n", "'", '"', ",", " ", "a", "é", "\u2028"])
                    | st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=15)
_faqs = st.lists(st.tuples(_odd_text, _odd_text, st.lists(_odd_text, min_size=1, max_size=3),
                           st.lists(_odd_text, max_size=3)), min_size=1, max_size=4)


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(faqs=_faqs)
def test_any_valid_text_survives_csv_export_and_import(tmp_path, faqs):
    records: list[KbRecord] = []
    for faq_id, answer, questions, tags in faqs:
        first, problems = check_record(faq_id, questions[0], answer, tags)
        rest = [check_record(faq_id, q, None, None)[0] for q in questions[1:]]
        if problems or None in rest or any(r.faq_id == first.faq_id for r in records):
            continue  # text the validators refuse cannot be exported
        records += [first, *rest]
    path = tmp_path / "kb.csv"
    write_kb(path, records)
    back = read_kb(path)
    assert [(r.faq_id, r.question) for r in back] == [(r.faq_id, r.question) for r in records]
    assert group_records((str(i), r) for i, r in enumerate(back)) == \
        group_records((str(i), r) for i, r in enumerate(records))
