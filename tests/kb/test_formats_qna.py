"""QnA Maker and Azure question answering exports (kb/formats/qna.py, qnamaker.py, azure.py): what each column
becomes, every file kind read and written back (cells a spreadsheet would run as formulas escaped, and read back
as they were), and broken files refused whole with `file:line: reason`."""
from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from kb.formats import KbContents, detect, read_any, write_any
from kb.formats.base import qna_ids
from kb.formats.qna import COLUMNS, escape, parse_metadata, unescape
from kb.records import KbFormatError, KbRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
TSV = FIXTURES / "qnamaker-export.tsv"
AZURE = FIXTURES / "azure-project.json"


def faqs(imported):
    out = {}
    for r in imported.records:
        f = out.setdefault(r.faq_id, {"questions": [], "record": r})
        f["questions"].append(r.question)
    return out


def test_a_qnamaker_tsv_maps_every_column():
    imported = read_any(TSV)
    assert imported.format == "qnamaker" and detect(TSV) == "qnamaker"
    by_id = faqs(imported)
    assert sorted(by_id, key=int) == [str(i) for i in range(1, 13)]  # QnaIds kept as the FAQ ids
    unlock = by_id["1"]
    assert unlock["questions"] == ["How do I unlock a bike?", "unlock bike with the app", "the bike won't unlock"]
    rec = unlock["record"]
    assert rec.answer.startswith("Open the **Pedal City** app") and "\nThe lock opens" in rec.answer
    assert rec.metadata == {"topic": "riding", "channel": "app"} and rec.source == "Editorial"
    assert rec.follow_ups == [{"faq_id": "2", "text": "It still won't open"}, {"faq_id": "3", "text": "No phone with me"}]
    assert by_id["2"]["record"].context_only is True and rec.context_only is False
    # suggested questions are proposals, never phrasings
    assert ("1", "how do i start a ride") in imported.suggestions
    assert all(q not in by_id[f]["questions"] for f, q in imported.suggestions)
    assert "€0.20 per minute" in by_id["4"]["record"].answer and "\n\n- Day pass" in by_id["4"]["record"].answer


def test_an_azure_project_keeps_synonyms_suggestions_and_its_default_answer():
    imported = read_any(AZURE)
    assert imported.format == "azure" and detect(AZURE) == "azure"
    by_id = faqs(imported)
    assert set(by_id) == {str(i) for i in range(101, 109)}
    freeze = by_id["101"]["record"]
    assert freeze.metadata == {"topic": "membership", "site": "all"} and freeze.source == "member-handbook.pdf"
    assert [f["faq_id"] for f in freeze.follow_ups] == ["102", "104"]
    assert by_id["102"]["record"].context_only
    assert imported.synonyms[2] == ["wifi", "wi-fi", "wireless internet"]
    assert imported.suggestions == [("101", "can i put my membership on hold"), ("101", "hold membership broken leg")]
    assert imported.default_answer.startswith("Sorry, I don't know that one yet")


def test_an_xlsx_written_by_a_spreadsheet_reads_like_the_tsv(tmp_path):
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    for line in TSV.read_text(encoding="utf-8").splitlines():
        cells = line.split("\t")
        # a spreadsheet holds real newlines and numbers, not the TSV's escapes and text
        ws.append([unescape(c) if i < 2 else (int(c) if i == 7 and c.isdigit() else c) for i, c in enumerate(cells)])
    wb.save(tmp_path / "kb.xlsx")
    assert detect(tmp_path / "kb.xlsx") == "qnamaker"
    assert read_any(tmp_path / "kb.xlsx").records == read_any(TSV).records


@pytest.mark.parametrize("fmt,suffix", [("qnamaker", ".tsv"), ("qnamaker", ".xlsx"), ("qnamaker", ".json"),
                                        ("azure", ".json"), ("azure", ".tsv"), ("azure", ".xlsx")])
@pytest.mark.parametrize("source", [TSV, AZURE], ids=["from-qnamaker", "from-azure"])
def test_import_export_import_changes_nothing(tmp_path, fmt, suffix, source):
    first = read_any(source)
    contents = KbContents(first.records, synonyms=first.synonyms, suggestions=first.suggestions,
                          default_answer=first.default_answer)
    out = tmp_path / f"export{suffix}"
    write_any(out, fmt, contents)
    again = read_any(out, fmt)
    assert again.records == first.records
    assert again.suggestions == first.suggestions
    if fmt == "azure" and suffix == ".json":  # the project JSON is the file kind that holds these
        assert again.synonyms == first.synonyms and again.default_answer == first.default_answer


def test_faq_ids_that_are_not_numbers_get_stable_qna_ids(tmp_path):
    ids = qna_ids(["billing-refund", "7", "account-delete", "007"])
    assert ids["7"] == 7 and all(v > 1_000_000 for k, v in ids.items() if k != "7")
    assert qna_ids(["account-delete", "billing-refund", "7", "007"]) == ids  # order does not matter


def test_cells_escape_and_metadata_forms():
    text = "line one\nline\ttwo \\n literal"
    assert unescape(escape(text)) == text
    assert parse_metadata("Topic: riding | channel:app") == ({"Topic": "riding", "channel": "app"}, None)
    assert parse_metadata('[{"name": "a", "value": "b"}]') == ({"a": "b"}, None)
    assert parse_metadata('{"a": "b"}') == ({"a": "b"}, None)
    assert parse_metadata("[]") == ({}, None)
    assert parse_metadata("topic")[1].startswith("Metadata 'topic' is not key:value")


def _tsv(tmp_path, *rows: list[str]) -> Path:
    path = tmp_path / "broken.tsv"
    path.write_text("\n".join("\t".join(r) for r in [COLUMNS, *rows]) + "\n", encoding="utf-8")
    return path


def test_broken_rows_are_named_by_line_and_nothing_is_read(tmp_path):
    good = ["How?", "Like this.", "Editorial", "", "[]", "False", "[]", "1"]
    path = _tsv(tmp_path, good,
                ["Other way?", "Like that.", "Editorial", "", "[]", "False", "[]", "1"],  # same QnaId, other answer
                ["Q", "A", "", "topic", "[]", "False", "[]", "2"],
                ["Q2", "A2", "", "", "[]", "maybe", "[]", "3"],
                ["Q3", "A3", "", "", "[]", "False", '[{"displayOrder": 0, "qnaId": "x", "displayText": "t"}]', "4"],
                ["Q4", "A4", "", "", "[]", "False", "[]", "-5"],
                ["Q5", "A5", "", "", "[not json", "False", "[]", "6"])
    with pytest.raises(KbFormatError) as err:
        read_any(path)
    errors = err.value.errors
    name = str(path)
    assert f"{name}:3: conflicting answer for faq_id '1' (differs from the one at {name}:2)" in errors
    assert any(e.startswith(f"{name}:4: Metadata 'topic' is not key:value") for e in errors)
    assert f"{name}:5: IsContextOnly must be True or False, got 'maybe'" in errors
    assert f"{name}:6: prompt 0 needs an integer qnaId, got a string" in errors
    assert f"{name}:7: QnaId must be a positive integer, got '-5'" in errors
    assert any(e.startswith(f"{name}:8: SuggestedQuestions is not valid JSON") for e in errors)


def test_a_broken_azure_json_names_the_line_of_the_pair(tmp_path):
    doc = json.loads(AZURE.read_text(encoding="utf-8"))
    doc["assets"]["qnas"][3]["dialog"]["prompts"][0]["qnaId"] = "101"
    doc["assets"]["qnas"][5]["questions"] = "not a list"
    path = tmp_path / "project.json"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    lines = path.read_text(encoding="utf-8").splitlines()
    line_of = {n: i for i, line in enumerate(lines, start=1) for n in (104, 106) if f'"id": {n},' in line}
    with pytest.raises(KbFormatError) as err:
        read_any(path)
    assert err.value.errors == [
        f"{path}:{line_of[104]}: qnas[3]: prompt 0 needs an integer qnaId, got a string",
        f"{path}:{line_of[106]}: qnas[5]: questions must be a list of strings"]


def test_files_that_are_not_what_they_claim(tmp_path):
    (tmp_path / "bad.json").write_text('{"assets": {"qnas": [}', encoding="utf-8")
    with pytest.raises(KbFormatError, match=r"bad.json:1: invalid JSON"):
        read_any(tmp_path / "bad.json")
    (tmp_path / "fake.xlsx").write_bytes(b"PK\x03\x04 not really a workbook")
    with pytest.raises(KbFormatError, match=r"fake.xlsx:1: not an XLSX workbook"):
        read_any(tmp_path / "fake.xlsx")
    shutil.copy(TSV, tmp_path / "kb.tsv")
    (tmp_path / "kb.tsv").write_text("Question\tSource\nq\ts\n", encoding="utf-8")
    with pytest.raises(KbFormatError, match=r"kb.tsv:1: header lacks column\(s\) Answer"):
        read_any(tmp_path / "kb.tsv", "qnamaker")


MICROSOFT = FIXTURES / "microsoft"


def test_microsofts_own_export_with_prompts_and_suggestions_in_pascal_case():
    imported = read_any(MICROSOFT / "SampleActiveLearning.tsv")
    by_id = faqs(imported)
    pen = by_id["91"]["record"]
    assert [f["text"] for f in pen.follow_ups] == ["Write and draw", "Navigate and click using your pen",
                                                    "Use the top button of your pen", "Customize your pen",
                                                    "Try these apps with your pen"]
    assert by_id["92"]["questions"] == ["Write and draw", "draw with your pen"]
    assert ("92", "can i draw with surface pen") in imported.suggestions
    assert ("118", "help with my surface pen") in imported.suggestions
    assert "| If you want to | Do this with your pen |\n| --- | --- |" in by_id["95"]["record"].answer


@pytest.mark.parametrize("name", ["SampleKBReplicaWithTsvs.zip", "SampleKBReplica.zip"])
def test_microsofts_kb_replica_brings_its_synonyms(name):
    imported = read_any(MICROSOFT / name)
    assert detect(MICROSOFT / name) == "qnamaker" and len(faqs(imported)) == 11
    assert imported.synonyms == [["sdk", "software development kit"], ["channel", "teams", "skype", "whatsapp"]]
    assert imported.default_answer is None  # the service's own default is not a setting to keep
    assert any(n.startswith("settings not kept (no meaning here): EnableActiveLearning") for n in imported.notes)


@pytest.mark.parametrize("suffix", [".xlsx", ".zip"])
def test_a_replica_written_here_keeps_synonyms_and_the_default_answer(tmp_path, suffix):
    first = read_any(AZURE)
    out = tmp_path / f"replica{suffix}"
    write_any(out, "azure", KbContents(first.records, first.synonyms, first.suggestions, first.default_answer))
    again = read_any(out, "azure")
    assert (again.records, again.synonyms, again.suggestions, again.default_answer) == (
        first.records, first.synonyms, first.suggestions, first.default_answer)


FORMULA_LEADS = ["=SUM(A1)", "+1 555", "-5 degrees", "@here", "'=quoted", "''-twice", "'plain"]


def _formula_kb() -> KbContents:
    records = [KbRecord(str(i), f"{lead} how {i}?", f"{lead} answer {i}\nsecond line \\ and\ta tab",
                        metadata={"k": f"{lead} value", "tabbed": "a\tb"}, source=f"{lead} source",
                        follow_ups=[{"faq_id": str(i % len(FORMULA_LEADS) + 1), "text": f'{lead} "quoted" \\ text'}])
               for i, lead in enumerate(FORMULA_LEADS, start=1)]
    return KbContents(records, synonyms=[["=sum", "total"], ["-x", "+y", "@z"]], default_answer="=Sorry,\nno answer",
                      suggestions=[("1", "=HYPERLINK(1)")])


def _cells(text: str) -> list[str]:
    return [cell for line in text.splitlines() for cell in line.split("\t")]


@pytest.mark.parametrize("fmt,suffix", [("qnamaker", ".tsv"), ("azure", ".tsv"), ("azure", ".zip"),
                                        ("qnamaker", ".zip"), ("qnamaker", ".xlsx")])
def test_formula_cells_are_escaped_and_read_back_as_they_were(tmp_path, fmt, suffix):
    contents = _formula_kb()
    out = tmp_path / f"kb{suffix}"
    write_any(out, fmt, contents)
    if suffix == ".tsv":
        texts = [out.read_text(encoding="utf-8")]
    elif suffix == ".zip":
        with zipfile.ZipFile(out) as archive:
            texts = [archive.read(i).decode("utf-8") for i in archive.infolist()]
    else:
        texts = []  # a workbook's cells are typed text: nothing to escape
    for text in texts:
        assert not [c for c in _cells(text) if re.match(r"[=+\-@]", c)]
    again = read_any(out, fmt)
    fields = [(r.faq_id, r.question, r.answer, r.metadata, r.source, r.follow_ups) for r in contents.records]
    assert [(r.faq_id, r.question, r.answer, r.metadata, r.source, r.follow_ups) for r in again.records] == fields
    assert again.suggestions == contents.suggestions
    if suffix != ".tsv":
        assert (again.synonyms, again.default_answer) == (contents.synonyms, contents.default_answer)


def test_a_tsv_of_another_product_keeps_its_raw_formula_cells(tmp_path):
    path = tmp_path / "kb.tsv"
    path.write_text("\t".join(COLUMNS) + "\n=1+1\t@team: ask here\t\t\t[]\tFalse\t[]\t1\n", encoding="utf-8")
    assert [(r.question, r.answer) for r in read_any(path).records] == [("=1+1", "@team: ask here")]
