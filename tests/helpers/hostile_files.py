"""Hostile KB files for the importer's tests: a fixed set (each with the reason read_kb must give),
hypothesis strategies that generate CSV and JSONL bytes (random bytes, broken structure, deep nesting,
huge integers, over-long fields, odd quotes, BOMs, NULs, lone surrogates, formula-leading cells), and
builders of hostile QnA Maker / Azure archives and workbooks (ZIP and XLSX bombs, entity bombs, broken
sheet XML, JSON cells and YAML nested thousands deep)."""
from __future__ import annotations

import csv
import io
import json
import zipfile

from hypothesis import strategies as st

CSV_LIMIT = csv.field_size_limit()
HEADER = "faq_id,question,answer,tags\n"

#: name -> (file bytes, the line and reason read_kb reports first)
HOSTILE_FILES: dict[str, tuple[bytes, str]] = {
    "long-header.csv": ((HEADER.rstrip("\n") + "," + "h" * (CSV_LIMIT + 1) + "\n").encode(),
                        f"1: invalid CSV: a field is longer than {CSV_LIMIT} characters"),
    "long-cell.csv": ((HEADER + "a,q,ok,\nb,q," + "y" * (CSV_LIMIT + 1) + ",\n").encode(),
                      f"3: invalid CSV: a field is longer than {CSV_LIMIT} characters"),
    "deep.jsonl": (('{"faq_id": "a", "question": "q", "answer": ' + "[" * 1200 + "]" * 1200 + "}\n").encode(),
                   "1: invalid JSON: nested too deeply"),
    "deeper.jsonl": (b"[" * 100_000 + b"\n", "1: invalid JSON: nested too deeply"),
    "huge-int.jsonl": (('{"faq_id": "a", "question": "q", "answer": "A.", "tags": ' + "9" * 4301 + "}\n").encode(),
                       "1: invalid JSON: a number has 4301 digits, more than the 4300 Python converts"),
    "open-quote.csv": ((HEADER + 'a,"q,never closed\n').encode(),
                       "2: invalid CSV: a quoted field is not closed before the end of the file"),
    "junk-after-quote.csv": ((HEADER + 'a,"q"x,A.,\n').encode(), "2: invalid CSV: ',' expected after '\"'"),
    "not-utf8.csv": (HEADER.encode() + b"a,q\xff,A.,\n", "1: not valid UTF-8"),
    "not-utf8.jsonl": (b'{"faq_id": "a\xc3", "question": "q", "answer": "A."}\n', "1: not valid UTF-8"),
    "nul.csv": (b"\xef\xbb\xbf" + HEADER.encode() + b"a,q\x00,A.,\n", "2: question must not contain NUL characters"),
    "surrogate.jsonl": (b'{"faq_id": "a", "question": "q\\ud800", "answer": "A."}\n',
                        "1: question must be valid Unicode text"),
    "empty.csv": (b"", "1: empty file (a header row is required)"),
}

# pieces a broken file is made of: structure, quotes, control characters, numbers and text that
# stress each parser
_JSON_PIECES = ['{', '}', '[', ']', '"', ':', ',', '"faq_id"', '"question"', '"answer"', '"tags"', '"q"',
                "\\", "\\ud800", "\\u0000", "\x00", "\ufeff", "\r", "\n", "NaN", "-Infinity", "1e999",
                "9" * 4301, "-" + "1" * 5000, "0.1", "true", "null", "=cmd", " "]
_CSV_PIECES = [",", '"', '""', "'", "\r", "\n", "\r\n", "\x00", "\ufeff", ";", "=", "+", "-", "@", "\t",
               "faq_id", "question", "answer", "tags", "x" * 300, "\udcff", "é", " "]

_text = st.text(st.characters(exclude_categories=()), max_size=12)
_json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | _text
_json_values = st.recursive(_json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(_text, c, max_size=3),
                            max_leaves=8)


def _encode(text: str) -> bytes:
    # surrogatepass: a lone surrogate becomes bytes that are not UTF-8, what a broken exporter writes
    return text.encode("utf-8", "surrogatepass")


def _deep(depth: int, opener: str) -> str:
    inner = "[" * depth + "]" * depth if opener == "[" else '{"a":' * depth + "1" + "}" * depth
    return '{"faq_id": "a", "question": "q", "answer": ' + inner + "}"


_jsonl_lines = st.one_of(
    st.lists(st.sampled_from(_JSON_PIECES), max_size=12).map("".join),
    st.fixed_dictionaries({}, optional={"faq_id": _json_values, "question": _json_values,
                                        "answer": _json_values, "tags": _json_values})
    .map(lambda obj: json.dumps(obj, allow_nan=True)),
    st.builds(_deep, st.integers(1, 3000), st.sampled_from("[{")),
    st.integers(4290, 4310).map(lambda n: '{"faq_id": "a", "question": "q", "answer": ' + "7" * n + "}"),
    _text,
)
_csv_cells = st.one_of(st.lists(st.sampled_from(_CSV_PIECES), max_size=6).map("".join), _text,
                       st.integers(CSV_LIMIT - 2, CSV_LIMIT + 2).map(lambda n: "z" * n))
_csv_headers = st.one_of(st.just(HEADER.rstrip("\n")), st.just("query,faq_id"),
                         st.lists(_csv_cells, max_size=5).map(",".join))
_boms = st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe"])

#: JSONL-ish bytes: lines of broken JSON, odd records, deep nesting, huge ints, random text
jsonl_files = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda bom, lines, end: bom + _encode(end.join(lines)), _boms, st.lists(_jsonl_lines, max_size=5),
              st.sampled_from(["\n", "\r\n", "\r"])),
)
#: CSV-ish bytes: a header (right or not) and rows of odd cells, sometimes over the field limit
csv_files = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda bom, header, rows, end: bom + _encode(end.join([header] + [",".join(r) for r in rows])),
              _boms, _csv_headers, st.lists(st.lists(_csv_cells, max_size=5), max_size=5),
              st.sampled_from(["\n", "\r\n", "\r", ""])),
)


# ---------------------------------------------------------------- QnA Maker / Azure archives and workbooks

QNA_HEADER = "Question\tAnswer\tSource\tMetadata\tSuggestedQuestions\tIsContextOnly\tPrompts\tQnaId\n"
MIB = 1024 * 1024


def zip_of(members: dict[str, bytes | str], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method, compresslevel=9) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def newline_zip(newlines: int = 8 * MIB) -> bytes:
    """A replica whose QnAs.tsv is a header and `newlines` blank lines: 8 KB of ZIP for 8 MiB."""
    return zip_of({"QnAs.tsv": QNA_HEADER + "\n" * newlines})


def row_flood_tsv(rows: int) -> bytes:
    """A QnA table of `rows` one-character rows: about 15 bytes each."""
    return (QNA_HEADER + "".join(f"q\ta\t\t\t\t\t\t{i}\n" for i in range(1, rows + 1))).encode()


def many_members_zip(count: int = 100_000) -> bytes:
    """A ZIP of `count` empty entries (stored, so no compressor state per entry)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("QnAs.tsv", QNA_HEADER + "q\ta\t\t\t[]\tFalse\t[]\t1\n")
        for i in range(count - 1):
            archive.writestr(f"{i:x}", b"")
    return out.getvalue()


def lying_zip(declared: int = 1 << 40) -> bytes:
    """A replica whose central directory says QnAs.tsv unpacks to `declared` bytes (it holds a few)."""
    data = bytearray(zip_of({"QnAs.tsv": QNA_HEADER + "q\ta\t\t\t[]\tFalse\t[]\t1\n"}, zipfile.ZIP_STORED))
    at = data.rfind(b"PK\x01\x02")  # the one central directory entry: uncompressed size at offset 24, 4 bytes
    size = min(declared, 0xFFFFFFFE)
    data[at + 24:at + 28] = size.to_bytes(4, "little")
    return bytes(data)


def workbook(rows: list[list[str]] | None = None) -> bytes:
    """A QnA Maker workbook (one sheet, QnAs) as openpyxl writes it."""
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "QnAs"
    for row in [QNA_HEADER.rstrip("\n").split("\t")] + (rows or [["How?", "Like this.", "", "", "[]", "False",
                                                                      "[]", "1"]]):
        ws.append(row)
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


def workbook_with(part: str, data: bytes | str, method: int = zipfile.ZIP_DEFLATED, base: bytes | None = None) -> bytes:
    """`base` (`workbook()`) with one part (xl/worksheets/sheet1.xml, xl/sharedStrings.xml, ...) replaced or
    added."""
    with zipfile.ZipFile(io.BytesIO(base or workbook())) as source:
        members: dict[str, bytes | str] = {i.filename: source.read(i) for i in source.infolist()}
    members[part] = data
    return zip_of(members, method)


SHEET = "xl/worksheets/sheet1.xml"
_SHEET_OPEN = ('<?xml version="1.0" encoding="UTF-8"?>\n'
               '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>')
_SHEET_CLOSE = "</sheetData></worksheet>"
_HEADER_ROW = ('<row r="1">' + "".join(f'<c r="{col}1" t="inlineStr"><is><t>{name}</t></is></c>'
                                         for col, name in zip("ABCDEFGH", QNA_HEADER.split())) + "</row>")


def sheet_xml(rows: str, prolog: str = "") -> str:
    """A worksheet holding the QnA header row and `rows` (XML), `prolog` between the declaration and it."""
    head, body = _SHEET_OPEN.split("\n", 1)
    return f"{head}\n{prolog}{body}{_HEADER_ROW}{rows}{_SHEET_CLOSE}"


def billion_laughs(levels: int = 10) -> str:
    """A worksheet whose DTD defines an entity that expands to 10**levels "lol"s, used in a cell."""
    entities = ['<!ENTITY lol0 "lol">'] + [f'<!ENTITY lol{i} "{("&lol%d;" % (i - 1)) * 10}">'
                                          for i in range(1, levels)]
    return sheet_xml(f'<row r="2"><c r="A2" t="inlineStr"><is><t>&lol{levels - 1};</t></is></c></row>',
                     "<!DOCTYPE worksheet [" + "".join(entities) + "]>\n")


def external_entity(url: str = "file:///etc/passwd") -> str:
    """A worksheet that reads `url` into a cell through an external entity."""
    return sheet_xml('<row r="2"><c r="A2" t="inlineStr"><is><t>&ext;</t></is></c></row>',
                     f'<!DOCTYPE worksheet [<!ENTITY ext SYSTEM "{url}">]>\n')


def broken_sheet() -> str:
    return sheet_xml('<row r="2"><c r="A2" t="inlineStr"><is><t>never closed</is></c></row>')


def wide_row_sheet(column: str = "XFD") -> str:
    """A worksheet whose second row has one cell in `column` (openpyxl widens the row to it)."""
    return sheet_xml(f'<row r="2"><c r="{column}2" t="inlineStr"><is><t>x</t></is></c></row>')


def xml_bomb_workbook(megabytes: int = 200) -> bytes:
    """A workbook whose sheet unpacks to `megabytes` MiB of empty rows: a few hundred KB of XLSX."""
    return workbook_with(SHEET, sheet_xml("<row/>" * (megabytes * MIB // 6)))


def deep_json(depth: int = 3000) -> str:
    return "[" * depth + "]" * depth


def deep_cell_tsv(column: str, depth: int = 3000) -> bytes:
    """A QnA Maker TSV whose `column` cell (Prompts, SuggestedQuestions, Metadata) nests `depth` lists."""
    cells = {"Question": "How?", "Answer": "Like this.", "Source": "", "Metadata": "", "SuggestedQuestions": "[]",
             "IsContextOnly": "False", "Prompts": "[]", "QnaId": "1"}
    cells[column] = deep_json(depth)
    return (QNA_HEADER + "\t".join(cells.values()) + "\n").encode()


def deep_rasa_yaml(depth: int = 3000, flow: bool = True) -> str:
    """Rasa NLU data with a response nested `depth` deep: flow (`[[[...]]]`) or block (indented mappings)."""
    head = "version: \"3.1\"\nnlu:\n- intent: faq/hours\n  examples: |\n    - when are you open\nresponses:\n"
    if flow:
        return head + "  utter_faq/hours:\n  - text: " + deep_json(depth) + "\n"
    return head + "  utter_faq/hours:\n  - text: open\n    extra:\n" + "".join(
        " " * (6 + i) + f"k{i}:\n" for i in range(depth)) + " " * (6 + depth) + "v\n"
