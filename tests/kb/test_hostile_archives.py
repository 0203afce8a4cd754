"""Hostile QnA Maker / Azure archives, workbooks and cells (kb/formats/replica.py, qna.py) and Rasa YAML
(rasa.py): ZIP and XLSX bombs refused on what they declare, before they are unpacked, and with the memory
they cost bounded (tracemalloc's peak, not time); rows read one at a time up to qna.MAX_ROWS; entity bombs,
external entities and broken sheet XML refused unexpanded; JSON cells and YAML nested thousands deep. Every
one is a KbFormatError naming the file, the line where there is one, and the limit."""
from __future__ import annotations

import io
import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from kb.formats import read_any
from kb.formats import qna, replica
from kb.formats.qna import MAX_ROWS, suggested_of
from kb.records import KbFormatError
from tests.helpers import hostile_files as h

#: what refusing a file may cost, whatever it would unpack to: far below the 8 MB the console takes
REFUSAL_BYTES = 24 * 1024 * 1024


def refused(path: Path, fmt: str | None = None, traced: bool = True) -> tuple[list[str], int]:
    """(the KbFormatError's errors, tracemalloc's peak in bytes, 0 untraced) of reading `path`."""
    if traced:
        tracemalloc.start()
    try:
        with pytest.raises(KbFormatError) as info:
            read_any(path, fmt)
        peak = tracemalloc.get_traced_memory()[1] if traced else 0
    finally:
        tracemalloc.stop()
    return info.value.errors, peak


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# ---------------------------------------------------------------- ZIP

def test_a_zip_of_newlines_is_refused_by_its_ratio_before_anything_is_unpacked(tmp_path):
    path = write(tmp_path, "bomb.zip", h.newline_zip(8 * h.MIB))
    assert path.stat().st_size < 16 * 1024  # 8 MiB of newlines in a few KB
    errors, peak = refused(path)
    assert errors == [f"{path}/QnAs.tsv: unpacks to 1,020 times its compressed size (8,388,687 bytes), more than "
                      f"the {replica.MAX_RATIO} times of any real KB file"]
    assert peak < 1024 * 1024


def test_past_the_ratio_the_rows_are_streamed_and_stop_at_the_row_limit(tmp_path, monkeypatch):
    # what the ratio check guards is still bounded without it: blank lines are counted, never kept
    monkeypatch.setattr(replica, "MAX_RATIO", 10**6)
    path = write(tmp_path, "bomb.zip", h.newline_zip(8 * h.MIB))
    errors, peak = refused(path)
    assert errors == [f"{path}/QnAs.tsv:{MAX_ROWS + 1}: more than {MAX_ROWS:,} rows, the most one import reads "
                      "(split the file)"]
    assert peak < REFUSAL_BYTES


def test_a_zip_past_the_unpacked_bytes_is_refused(tmp_path):
    path = write(tmp_path, "bomb.zip", h.newline_zip(64 * h.MIB))
    errors, peak = refused(path)
    assert errors == [f"{path}: unpacks to 67,108,943 bytes, more than the {replica.MAX_UNPACKED_BYTES:,} an "
                      "import reads"]
    assert peak < 1024 * 1024


def test_a_directory_that_lies_about_sizes_is_refused_unread(tmp_path):
    path = write(tmp_path, "lying.zip", h.lying_zip())
    errors, _ = refused(path)
    assert errors == [f"{path}: unpacks to 4,294,967,294 bytes, more than the {replica.MAX_UNPACKED_BYTES:,} an "
                      "import reads"]


def test_a_zip_of_many_entries_is_refused_by_their_number(tmp_path):
    path = write(tmp_path, "many.zip", h.many_members_zip(replica.MAX_MEMBERS + 1))
    errors, peak = refused(path)
    assert errors == [f"{path}: {replica.MAX_MEMBERS + 1:,} entries in the archive, more than the "
                      f"{replica.MAX_MEMBERS:,} an import opens"]
    assert peak < REFUSAL_BYTES


def test_a_zip64_of_more_entries_than_its_end_record_holds_is_refused_before_its_directory_is_read(tmp_path):
    path = write(tmp_path, "many.zip", h.many_members_zip(70_000))  # past 65,535: counted in the ZIP64 record
    errors, peak = refused(path)
    assert errors == [f"{path}: 70,000 entries in the archive, more than the {replica.MAX_MEMBERS:,} an import opens"]
    assert peak < 1024 * 1024  # zipfile never built the 70,000 entries


def test_the_row_limit_is_for_all_the_tables_of_a_zip_together(tmp_path):
    half = h.row_flood_tsv(MAX_ROWS // 2)  # a header and MAX_ROWS / 2 rows: one more line than half
    path = write(tmp_path, "two.zip", h.zip_of({"a/QnAs.tsv": half, "b/QnAs.tsv": half}))
    errors, _ = refused(path)
    assert errors == [f"{path}/b/QnAs.tsv:{MAX_ROWS // 2}: more than {MAX_ROWS:,} rows, the most one import reads "
                      "(split the file)"]


def test_a_broken_member_is_named(tmp_path):
    data = bytearray(h.zip_of({"QnAs.tsv": h.row_flood_tsv(2000)}))
    data[60:70] = b"\xff" * 10  # inside the deflate stream
    errors, _ = refused(write(tmp_path, "broken.zip", bytes(data)))
    assert len(errors) == 1 and re.match(rf"{re.escape(str(tmp_path))}/broken.zip/QnAs.tsv:1: cannot be read \(",
                                         errors[0]), errors


def test_a_workbook_inside_a_zip_is_held_to_the_same_bounds(tmp_path):
    path = write(tmp_path, "replica.zip", h.zip_of({"replica.xlsx": h.xml_bomb_workbook(20)}))
    errors, peak = refused(path)
    assert len(errors) == 1 and errors[0].startswith(f"{path}/replica.xlsx/{h.SHEET}: unpacks to ")
    assert "more than the 100 times of any real KB file" in errors[0] and peak < REFUSAL_BYTES


# ---------------------------------------------------------------- TSV

def test_a_tsv_of_too_many_rows_is_refused_before_any_is_checked(tmp_path):
    path = write(tmp_path, "flood.tsv", h.row_flood_tsv(MAX_ROWS))  # the header makes it one too many
    errors, peak = refused(path)
    assert errors == [f"{path}:{MAX_ROWS + 1}: more than {MAX_ROWS:,} rows, the most one import reads "
                      "(split the file)"]
    assert peak < REFUSAL_BYTES


def test_bad_utf8_is_named_at_its_line(tmp_path):
    path = write(tmp_path, "kb.tsv", h.row_flood_tsv(3)[:-1] + b"\xff\n")
    errors, _ = refused(path)
    assert errors == [f"{path}:4: not valid UTF-8 (invalid start byte at byte 10 of the line)"]


@pytest.mark.parametrize("column", ["Prompts", "SuggestedQuestions", "Metadata"])
def test_a_json_cell_nested_thousands_deep_is_a_problem_at_its_line(tmp_path, column):
    path = write(tmp_path, "deep.tsv", h.deep_cell_tsv(column))
    errors, _ = refused(path)
    assert len(errors) == 1
    assert errors[0].startswith(f"{path}:2: {column} is not valid JSON: nested too deeply (the parser allows")


def test_a_json_cell_nested_thousands_deep_inside_a_zip(tmp_path):
    path = write(tmp_path, "deep.zip", h.zip_of({"QnAs.tsv": h.deep_cell_tsv("Prompts")}))
    errors, _ = refused(path)
    assert len(errors) == 1 and errors[0].startswith(f"{path}/QnAs.tsv:2: Prompts is not valid JSON: nested too")


def test_a_json_cell_with_a_number_python_does_not_convert(tmp_path):
    data = h.deep_cell_tsv("SuggestedQuestions").replace(h.deep_json().encode(), b"[" + b"9" * 5000 + b"]")
    errors, _ = refused(write(tmp_path, "huge.tsv", data))
    assert errors[0].endswith("SuggestedQuestions is not valid JSON: a number has more than 4300 digits, the most "
                              "Python converts")


def test_suggestions_nested_as_deep_as_the_parser_allows_are_found_without_recursion():
    value: list = ["deep question"]
    for _ in range(20_000):
        value = [value, {"clusterHead": "head"}]
    assert suggested_of(value) == ["deep question", "head"]


def test_a_json_export_of_more_pairs_than_rows_is_refused(tmp_path):
    path = write(tmp_path, "many.json", '{"qnaDocuments": [' + ",".join(["{}"] * (MAX_ROWS + 1)) + "]}")
    errors, _ = refused(path, "qnamaker", traced=False)
    assert errors == [f"{path}:1: qnaDocuments holds {MAX_ROWS + 1:,} QnA pairs, more than the {MAX_ROWS:,} rows one "
                      "import reads (split the file)"]


def test_after_an_id_not_found_in_the_text_the_pairs_keep_the_last_line_found(tmp_path):
    # 2e0 is the id 2, but not as json.dumps writes it: the text is searched to its end once, not once a pair
    pairs = ['{"id": 1, "answer": "A.", "questions": ["one"]}', '{"id": 2e0, "answer": "B.", "questions": ["two"]}',
             '{"id": 3, "answer": "C.", "questions": "three"}']
    path = write(tmp_path, "lost.json", '{"qnaDocuments": [\n' + ",\n".join(pairs) + "\n]}\n")
    errors, _ = refused(path, "qnamaker", traced=False)
    assert errors == [f"{path}:2: qnaDocuments[2]: questions must be a list of strings"]


# ---------------------------------------------------------------- XLSX

def test_an_xlsx_bomb_is_refused_before_openpyxl_opens_it(tmp_path):
    path = write(tmp_path, "bomb.xlsx", h.xml_bomb_workbook(80))
    assert path.stat().st_size < 256 * 1024
    errors, peak = refused(path)
    assert len(errors) == 1 and errors[0].startswith(f"{path}: unpacks to 83,9")
    assert errors[0].endswith(f"more than the {replica.MAX_UNPACKED_BYTES:,} an import reads")
    assert peak < 1024 * 1024


@pytest.mark.parametrize("make", [h.billion_laughs, h.external_entity], ids=["billion-laughs", "external-entity"])
def test_entities_are_refused_never_expanded(tmp_path, make):
    path = write(tmp_path, "entities.xlsx", h.workbook_with(h.SHEET, make()))
    errors, peak = refused(path)
    assert errors == [f"{path}/{h.SHEET}:2: declares a DTD (entity definitions), which no workbook has: refused "
                      "unread"]
    assert peak < REFUSAL_BYTES


def test_entities_in_a_part_with_another_name_are_refused_too(tmp_path):
    # openpyxl finds the parts through the workbook's relations, so a sheet may be called anything
    path = write(tmp_path, "renamed.xlsx", h.workbook_with("xl/worksheets/notes.bin", h.billion_laughs()))
    errors, _ = refused(path)
    assert errors[0].startswith(f"{path}/xl/worksheets/notes.bin:2: declares a DTD")


def test_broken_sheet_xml_is_named_at_its_line(tmp_path):
    path = write(tmp_path, "broken.xlsx", h.workbook_with(h.SHEET, h.broken_sheet()))
    errors, _ = refused(path)
    assert len(errors) == 1 and re.fullmatch(rf"{re.escape(str(path))}/{h.SHEET}:2: invalid XML: mismatched tag "
                                             r"\(column \d+\)", errors[0]), errors


def test_a_cell_past_the_widest_sheet_is_refused(tmp_path):
    path = write(tmp_path, "wide.xlsx", h.workbook_with(h.SHEET, h.wide_row_sheet("XFD")))
    errors, _ = refused(path)
    assert errors == [f"{path}/{h.SHEET}:2: a cell past column IV ({replica.MAX_COLUMNS}), the widest sheet an "
                      "import reads"]
    # up to column IV a sheet reads, what lies right of the table's columns ignored
    sheet = h.sheet_xml('<row r="2"><c r="A2" t="inlineStr"><is><t>How?</t></is></c><c r="B2" t="inlineStr">'
                        '<is><t>Like this.</t></is></c><c r="IV2" t="inlineStr"><is><t>x</t></is></c></row>')
    imported = read_any(write(tmp_path, "iv.xlsx", h.workbook_with(h.SHEET, sheet)))
    assert [(r.question, r.answer) for r in imported.records] == [("How?", "Like this.")]


def test_too_many_xml_elements_are_refused_while_scanning(tmp_path, monkeypatch):
    monkeypatch.setattr(replica, "MAX_XML_ELEMENTS", 10_000)
    rows = "".join(f'<row r="{i}"><c r="A{i}"><v>{i}</v></c></row>' for i in range(2, 6000))
    path = write(tmp_path, "cells.xlsx", h.workbook_with(h.SHEET, h.sheet_xml(rows)))
    errors, _ = refused(path)
    assert len(errors) == 1 and re.fullmatch(rf"{re.escape(str(path))}/{h.SHEET}:\d+: more than 10,000 XML elements "
                                             "in the workbook, the most an import reads", errors[0]), errors


def test_a_sheet_of_gaps_is_refused_by_its_last_row_number_while_scanning(tmp_path):
    # openpyxl yields every row number up to the sheet's last: one row far down is a billion blank rows
    sheet = h.sheet_xml(f'<row r="{10**9}"><c r="A{10**9}" t="inlineStr"><is><t>q</t></is></c></row>')
    path = write(tmp_path, "gaps.xlsx", h.workbook_with(h.SHEET, sheet))
    errors, peak = refused(path)
    assert errors == [f"{path}/{h.SHEET}:2: row 1,000,000,000 of a sheet: more than {MAX_ROWS:,} rows, the most "
                      "one import reads (split the file)"]
    assert peak < REFUSAL_BYTES


def test_the_row_limit_is_for_all_the_sheets_of_a_workbook_together(tmp_path):
    rows = "".join(f'<row r="{i}"><c r="A{i}"><v>{i}</v></c></row>' for i in range(2, MAX_ROWS // 2 + 2))
    sheet = h.sheet_xml(rows)
    path = write(tmp_path, "two.xlsx", h.workbook_with("xl/worksheets/sheet2.xml", sheet, base=h.workbook_with(
        h.SHEET, sheet)))
    errors, _ = refused(path)
    assert errors == [f"{path}/xl/worksheets/sheet2.xml:2: row {MAX_ROWS // 2:,} of a sheet: more than "
                      f"{MAX_ROWS:,} rows, the most one import reads (split the file)"]


def test_rows_are_streamed_blank_ones_never_kept_and_stop_at_the_limit():
    # the reader behind every TSV, alone or in a ZIP (which counts its lines first as well)
    stream = io.BytesIO(h.QNA_HEADER.encode() + b"\n" * (8 * h.MIB))
    tracemalloc.start()
    try:
        rows = qna.tsv_stream(stream, "kb.tsv", qna.RowLimit("kb.tsv"))
        assert next(rows)[0] == 1  # the header
        with pytest.raises(qna.TooManyRows) as info:
            next(rows)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.errors == [f"kb.tsv:{MAX_ROWS + 1}: more than {MAX_ROWS:,} rows, the most one import reads "
                                 "(split the file)"]
    assert peak < 1024 * 1024 and stream.tell() < 1024 * 1024


def test_a_lying_dimension_does_not_widen_the_rows(tmp_path):
    sheet = h.sheet_xml('<row r="2"><c r="A2" t="inlineStr"><is><t>How?</t></is></c>'
                        '<c r="B2" t="inlineStr"><is><t>Like this.</t></is></c></row>')
    sheet = sheet.replace("<sheetData>", '<dimension ref="A1:XFD1048576"/><sheetData>')
    imported = read_any(write(tmp_path, "dimension.xlsx", h.workbook_with(h.SHEET, sheet)))
    assert [(r.question, r.answer) for r in imported.records] == [("How?", "Like this.")]


def test_row_limit_counts_every_table(tmp_path):
    limit = qna.RowLimit("kb.zip", most=3)
    for line in (1, 2, 3):
        limit.count(f"kb.zip/a.tsv:{line}")
    with pytest.raises(qna.TooManyRows, match=r"^1 invalid entry in kb.zip:\n  kb.zip/b.tsv:1: more than 3 rows"):
        limit.count("kb.zip/b.tsv:1")


# ---------------------------------------------------------------- Rasa YAML

@pytest.mark.parametrize("flow", [True, False], ids=["flow", "block"])
def test_rasa_yaml_nested_thousands_deep_is_refused_at_its_line(tmp_path, flow):
    path = write(tmp_path, "deep.yml", h.deep_rasa_yaml(3000, flow))
    errors, _ = refused(path, "rasa", traced=False)
    from kb.formats.rasa import MAX_YAML_DEPTH

    assert len(errors) == 1
    where, reason = re.fullmatch(rf"{re.escape(str(path))}:(\d+): (.*)", errors[0]).groups()
    assert reason == f"invalid YAML: nested deeper than {MAX_YAML_DEPTH} levels of lists and mappings"
    # the line of the first node too deep: in the flow, the line of the brackets; in the block, a key
    assert path.read_text().splitlines()[int(where) - 1].strip().startswith("- text: [[[" if flow else "k")


# ---------------------------------------------------------------- fuzz

def _valid(suffix: str) -> bytes:
    if suffix == ".xlsx":
        return h.workbook()
    return h.zip_of({"QnAs.tsv": h.row_flood_tsv(20), "Synonyms.tsv": 'Synonyms\n"a","b"\n',
                     "Settings.tsv": "Key\tValue\nDefaultAnswerForKB\tSorry\n"})


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(suffix=st.sampled_from([".zip", ".xlsx"]),
       edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=4)), min_size=1,
                      max_size=6))
def test_a_damaged_archive_or_workbook_is_a_format_error_never_a_crash(tmp_path, suffix, edits):
    data = bytearray(_valid(suffix))
    for where, new in edits:
        at = int(where * len(data))
        data[at:at + len(new)] = new
    path = write(tmp_path, f"damaged{suffix}", bytes(data))
    try:
        read_any(path, "qnamaker")
    except KbFormatError as exc:
        assert all(e.startswith(str(path)) for e in exc.errors), exc.errors
