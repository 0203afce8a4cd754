r"""KB and query files: reading them into validated records (kb/records.py) and writing them back.

KB files have one line per question variant:
  JSONL  {"faq_id": str, "question": str, "answer": str, "tags": [str], "metadata": {str: str},
          "source": str, "follow_ups": [{"faq_id": str, "text": str}], "context_only": bool,
          "answers": {language code: str}}
  CSV    columns faq_id, question, answer, tags (tags `;`-separated); header row required; optional
         columns metadata (a JSON object in the cell), source, follow_ups (a JSON list in the cell),
         context_only (true/false, empty = false) and answers (a JSON object in the cell, e.g.
         {"es": "...", "de": "..."}): a file without them reads as before
`answers` holds the answer in other languages (ISO 639-1 codes of kb/records.py ANSWER_LANGUAGES).
`answer`, `tags` and the five FAQ fields after them may be given on every line of an FAQ or only once;
lines that repeat them must agree. Each FAQ mentioned in a file needs an answer somewhere in the file;
the others default to tags [], metadata {}, source null, follow_ups [], context_only false, answers {}.

Query files (for evaluation): JSONL `{"query": str, "faq_id": str | null}` or CSV with those columns.

CSV cells are escaped against formula injection (a spreadsheet runs a cell starting with `=`, `+`, `-`,
`@`, tab or carriage return): the writer puts a `'` before any cell matching `^'*[=+\-@\t\r]`, and the
reader takes exactly one `'` off any cell matching `^'+[=+\-@\t\r]`, so export -> import is lossless (a
cell `'=x` reads as `=x`; write `''=x` for a literal `'=x`).

A file that cannot be parsed at all (bad UTF-8, invalid JSON, JSON nested too deeply or with a number
of more digits than Python converts, a CSV field over the csv module's field limit, a broken CSV
quote) is reported like any invalid row, as `file:line: reason` in a KbFormatError.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kb.records import (
    CSV_TAG_SEPARATOR,
    MAX_QUESTION_CHARS,
    KbFormatError,
    KbRecord,
    QueryRecord,
    check_faq_id,
    check_record,
    check_text,
    follow_up_problems,
    group_records,
    type_name,
)

#: a cell a spreadsheet would run as a formula (possibly behind quotes the escape already added), and a
#: cell the writer escaped; see the module docstring
_FORMULA_CELL = re.compile(r"'*[=+\-@\t\r]")
_ESCAPED_CELL = re.compile(r"'+[=+\-@\t\r]")
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
CSV_SUFFIXES = {".csv"}
KB_COLUMNS = ["faq_id", "question", "answer", "tags", "metadata", "source", "follow_ups", "context_only", "answers"]
STDIO = "-"


def _kind(path: str | Path) -> str:
    if str(path) == STDIO:
        return "jsonl"
    suffix = Path(path).suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in CSV_SUFFIXES:
        return "csv"
    raise KbFormatError([f"{path}: unknown file type {suffix or '(no extension)'!r}; use .jsonl or .csv"])


def csv_escape(cell: str) -> str:
    """`cell` as written to a CSV file: a leading `'` when a spreadsheet would take it for a formula."""
    return "'" + cell if _FORMULA_CELL.match(cell) else cell


def csv_unescape(cell: str) -> str:
    """A CSV cell as read: `csv_escape` undone (one leading `'` off an escaped formula cell)."""
    return cell[1:] if _ESCAPED_CELL.match(cell) else cell


def nesting_problem() -> str:
    """Why json.loads raised RecursionError, in the words of every reader's message."""
    return f"nested too deeply (the parser allows fewer than {sys.getrecursionlimit()} levels of arrays and objects)"


def huge_number_problem(digits: int | None) -> str:
    """Why json.loads refused an integer literal of `digits` digits (None: not known)."""
    limit = sys.get_int_max_str_digits()
    if digits is None:
        return f"a number has more than {limit} digits, the most Python converts"
    return f"a number has {digits} digits, more than the {limit} Python converts"


class _HugeNumber(ValueError):
    def __init__(self, digits: int):
        super().__init__(huge_number_problem(digits))


def _json_int(digits: str) -> int:
    # json.loads would raise a bare ValueError from int() (its 4300-digit limit) without saying where
    if len(digits) - digits.startswith("-") > sys.get_int_max_str_digits() > 0:
        raise _HugeNumber(len(digits) - digits.startswith("-"))
    return int(digits)


def _parse_json(text: str) -> tuple[Any, str | None]:
    """(the parsed value, None), or (None, why `text` is not JSON this reader accepts).

    The one parsing boundary of the JSONL reader: anything json.loads raises on a string is a property
    of the text (a syntax error, nesting deeper than the parser's recursion allows, a huge number), so
    every exception becomes a problem to report at the line, never a crash.
    """
    try:
        return json.loads(text, parse_int=_json_int), None
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} (column {exc.colno})"
    except RecursionError:
        return None, f"invalid JSON: {nesting_problem()}"
    except _HugeNumber as exc:
        return None, f"invalid JSON: {exc}"
    except Exception as exc:  # noqa: BLE001 - see the docstring: any parser failure is the file's fault
        return None, f"invalid JSON: {type(exc).__name__}: {exc}"


def _csv_problem(exc: Exception) -> str:
    if isinstance(exc, csv.Error) and "field limit" in str(exc):
        return (f"invalid CSV: a field is longer than {csv.field_size_limit()} characters "
                "(the CSV reader's field limit)")
    if isinstance(exc, csv.Error) and "unexpected end of data" in str(exc):
        return "invalid CSV: a quoted field is not closed before the end of the file"
    if isinstance(exc, csv.Error):
        return f"invalid CSV: {exc}"
    return f"invalid CSV: {type(exc).__name__}: {exc}"


def _iter_jsonl(path: str | Path, name: str) -> Iterator[tuple[int, dict | None, str | None]]:
    """Yields (line number, object, problem) for each non-blank line."""
    stream = sys.stdin.buffer if str(path) == STDIO else open(path, "rb")
    try:
        for line_no, raw in enumerate(stream, start=1):
            try:
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                yield line_no, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})"
                continue
            if not text.strip():
                continue
            obj, problem = _parse_json(text.rstrip("\r\n"))  # without the newline, colno points into the line
            if problem is not None:
                yield line_no, None, problem
                continue
            if not isinstance(obj, dict):
                yield line_no, None, f"expected a JSON object, got {type_name(obj)}"
                continue
            yield line_no, obj, None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _iter_csv(path: str | Path, name: str, required: Sequence[str]) -> Iterator[tuple[int, dict | None, str | None]]:
    """Yields (line number, row with empty cells as None, problem); line 1 is the header.

    Cells are `csv_unescape`d. The reader stops at the first record it cannot parse: after a csv.Error
    its position inside the text is unknown, so later lines would be misread.
    """
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        yield 1, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})"
        return
    # strict: a quote left open would otherwise swallow the rest of the file into one cell
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
    except StopIteration:
        yield 1, None, "empty file (a header row is required)"
        return
    except Exception as exc:  # noqa: BLE001 - the csv parser's errors are all the file's fault
        yield 1, None, _csv_problem(exc)
        return
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        yield 1, None, f"header lacks column(s) {', '.join(missing)} (has: {', '.join(header)})"
        return
    end = reader.line_num
    while True:
        start = end + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - as for the header
            yield start, None, _csv_problem(exc)
            return
        end = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        if len(cells) > len(header):
            yield start, None, f"{len(cells)} fields but the header has {len(header)}"
            continue
        cells = [csv_unescape(c) for c in cells]
        row = {h: (c if c.strip() else None) for h, c in zip(header, cells)}
        yield start, row, None


def _iter_rows(path: str | Path, required: Sequence[str]) -> Iterator[tuple[int, dict | None, str | None]]:
    name = "<stdin>" if str(path) == STDIO else str(path)
    if _kind(path) == "jsonl":
        return _iter_jsonl(path, name)
    return _iter_csv(path, name, required)


def _source_name(path: str | Path) -> str:
    return "<stdin>" if str(path) == STDIO else str(path)


def _csv_fields(row: dict) -> tuple[dict[str, Any], list[str]]:
    """A CSV row's FAQ fields as read_kb passes them on: metadata, follow_ups and answers parsed from JSON,
    context_only from true/false; problems as reasons."""
    out: dict[str, Any] = {"source": row.get("source")}
    problems: list[str] = []
    for name in ("metadata", "follow_ups", "answers"):
        cell = row.get(name)
        if cell is None:
            out[name] = None
            continue
        value, problem = _parse_json(cell)
        if problem is not None:
            problems.append(f"{name} {problem}")
        out[name] = value
    cell = row.get("context_only")
    flag = cell.strip().lower() if cell is not None else None
    if flag not in (None, "true", "false"):
        problems.append(f"context_only must be true, false or empty, got {cell[:20]!r}")
    out["context_only"] = None if flag is None or flag not in ("true", "false") else flag == "true"
    return out, problems


def read_kb(path: str | Path, known_faq_ids: Iterable[str] | None = None, name: str | None = None) -> list[KbRecord]:
    """Read and validate a KB file (one record per variant, normalised; each with its `loc`); `name` is
    the file's name in messages and locations (default: the path).

    With `known_faq_ids` (the FAQs of the KB the file goes into, none for an import that replaces the
    KB), a follow-up to an FAQ neither in the file nor among them is an error too; without, the store's
    import checks follow-up targets.
    Raises KbFormatError listing every problem as `file:line: reason`; FileNotFoundError/OSError as is.
    """
    name = name or _source_name(path)
    return validate_rows(name, _iter_rows(path, required=["faq_id", "question"]), known_faq_ids,
                         csv_cells=_kind(path) == "csv")


def validate_rows(name: str, rows: Iterable[tuple[int, dict | None, str | None]],
                  known_faq_ids: Iterable[str] | None = None, csv_cells: bool = False) -> list[KbRecord]:
    """The records of `rows` ((line, row, problem) with the JSONL fields of the module docstring), each
    checked by kb/records.py, grouped per FAQ and, with `known_faq_ids`, its follow-ups' targets checked;
    every problem raised at once as `name:line: reason` in a KbFormatError. `csv_cells`: tags, metadata,
    follow_ups, context_only and answers are still text, as a CSV cell holds them. Every importer (this module's
    and kb/formats/) ends here, so all accept exactly the same data."""
    problems: list[tuple[int, str]] = []
    located: list[tuple[str, KbRecord]] = []
    line_of: dict[str, int] = {}
    bad_faq_ids: set[str] = set()
    for line_no, row, problem in rows:
        if problem is not None:
            problems.append((line_no, problem))
            continue
        assert row is not None
        tags = row.get("tags")
        fields: dict[str, Any] = {k: row.get(k) for k in ("metadata", "source", "follow_ups", "context_only",
                                                          "answers")}
        cell_problems: list[str] = []
        if csv_cells:
            if tags is not None:
                tags = [t for t in tags.split(CSV_TAG_SEPARATOR) if t.strip()]
            fields, cell_problems = _csv_fields(row)
        loc = f"{name}:{line_no}"
        record, errors = check_record(row.get("faq_id"), row.get("question"), row.get("answer"), tags, loc=loc,
                                      **fields)
        errors = cell_problems + errors  # a cell that did not parse was passed on as not given
        if record is None or errors:
            problems.extend((line_no, e) for e in errors)
            if isinstance(row.get("faq_id"), str):
                bad_faq_ids.add(row["faq_id"].strip())
            continue
        line_of.setdefault(loc, line_no)
        located.append((loc, record))
    specs, group_problems = group_records(located, skip_missing_answer=bad_faq_ids)
    if known_faq_ids is not None:
        group_problems += follow_up_problems(specs, set(known_faq_ids) | bad_faq_ids)
    problems.extend((line_of[loc], reason) for loc, reason in group_problems)
    if problems:
        problems.sort(key=lambda p: p[0])
        raise KbFormatError([f"{name}:{line}: {reason}" for line, reason in problems], source=name)
    return [rec for _, rec in located]


def read_queries(path: str | Path) -> list[QueryRecord]:
    """Read a query file (JSONL or CSV); raises KbFormatError listing every bad row."""
    name = _source_name(path)
    problems: list[str] = []
    queries: list[QueryRecord] = []
    for line_no, row, problem in _iter_rows(path, required=["query"]):
        if problem is not None:
            problems.append(f"{name}:{line_no}: {problem}")
            continue
        errors: list[str] = []
        query = check_text("query", row.get("query"), MAX_QUESTION_CHARS, errors)
        faq_id = check_faq_id(row["faq_id"], errors) if row.get("faq_id") is not None else None
        if errors:
            problems.extend(f"{name}:{line_no}: {e}" for e in errors)
        else:
            queries.append(QueryRecord(query=query, faq_id=faq_id))
    if problems:
        raise KbFormatError(problems, source=name)
    return queries


# ---------------------------------------------------------------- writing files

def write_kb(path: str | Path, records: Iterable[KbRecord]) -> tuple[int, int]:
    """Write records as JSONL or CSV (by extension; `-` is JSONL on stdout).

    Answer and tags are written on the first line of each FAQ only. The file is written to a
    temporary name and renamed, so a failed export never leaves a truncated file behind.
    Returns (number of FAQs, number of variants) written.
    """
    kind = _kind(path)
    if str(path) == STDIO:
        return write_records(sys.stdout, kind, records)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            counts = write_records(fh, kind, records)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return counts


def write_records(fh: Any, kind: str, records: Iterable[KbRecord]) -> tuple[int, int]:
    """`records` as JSONL or CSV (`kind`) on an open text file, as `write_kb` writes them; (FAQs, variants)."""
    seen: set[str] = set()
    n_variants = 0
    writer = csv.writer(fh, lineterminator="\n") if kind == "csv" else None
    # QUOTE_MINIMAL quotes only the lineterminator's characters, yet the reader ends a record at a bare
    # carriage return too: rows with one get every cell quoted
    quoted = csv.writer(fh, lineterminator="\n", quoting=csv.QUOTE_ALL) if kind == "csv" else None
    if writer is not None:
        writer.writerow(KB_COLUMNS)
    for rec in records:
        first = rec.faq_id not in seen
        seen.add(rec.faq_id)
        n_variants += 1
        if writer is not None:
            row = [rec.faq_id, rec.question, "", "", "", "", "", "", ""]
            if first:
                row[2:] = [rec.answer or "", CSV_TAG_SEPARATOR.join(rec.tags or []),
                           json.dumps(rec.metadata, ensure_ascii=False) if rec.metadata else "", rec.source or "",
                           json.dumps(rec.follow_ups, ensure_ascii=False) if rec.follow_ups else "",
                           "true" if rec.context_only else "",
                           json.dumps(rec.answers, ensure_ascii=False) if rec.answers else ""]
            cells = [csv_escape(c) for c in row]
            (quoted if any("\r" in c for c in cells) else writer).writerow(cells)
        else:
            obj: dict[str, Any] = {"faq_id": rec.faq_id, "question": rec.question}
            if first:
                obj["answer"] = rec.answer
                obj["tags"] = list(rec.tags or [])
                # the newer fields only when set, so a KB without them exports as it always did
                if rec.metadata:
                    obj["metadata"] = dict(rec.metadata)
                if rec.source is not None:
                    obj["source"] = rec.source
                if rec.follow_ups:
                    obj["follow_ups"] = [dict(f) for f in rec.follow_ups]
                if rec.context_only:
                    obj["context_only"] = True
                if rec.answers:
                    obj["answers"] = dict(rec.answers)
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return len(seen), n_variants
