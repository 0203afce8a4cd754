"""Hostile KB files for the importer's tests: a fixed set (each with the reason read_kb must give) and
hypothesis strategies that generate CSV and JSONL bytes (random bytes, broken structure, deep nesting,
huge integers, over-long fields, odd quotes, BOMs, NULs, lone surrogates, formula-leading cells)."""
from __future__ import annotations

import csv
import json

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
