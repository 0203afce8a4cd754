"""What QnA Maker and Azure question answering share: a QnA pair (id, questions, answer, source, metadata,
prompts, context-only, suggested questions) as rows of the KB, and back.

Mapping (docs/migrate-from-azure.md has the user's table):
  QnaId / id            faq_id (the number as text), so the pair keeps its id in the bot's code
  Question / questions  the FAQ's phrasings (rows with one QnaId are the alternate questions of one pair)
  Answer                answer (TSV writes a newline as the two characters `\\n`, a backslash as `\\\\`)
  Source                source
  Metadata              metadata: `key:value|key:value`, or JSON [{"name", "value"}] or {"key": "value"}
  Prompts / dialog      follow_ups in displayOrder: qnaId -> faq_id, displayText -> text
  IsContextOnly         context_only
  SuggestedQuestions    proposals in the review queue (never phrasings), and written back on export
The tables (TSV, XLSX) have a header row naming these columns in any order and case; columns they do not
name are ignored and said once in the import's notes.

A TSV cell is text with backslash escapes in Question, Answer and Source (`\\n`, `\\t`, `\\r`, `\\\\`), and as
written in the others (JSON, `key:value`, a boolean, a number: none holds a tab or a newline). Every cell that
a spreadsheet would run as a formula gets a leading `'` on export and loses exactly one on import, as our CSV
(kb/files.py), so export -> import is lossless; an XLSX cell is typed text and needs neither.
A TSV is read one line at a time; a file's tables together may have at most MAX_ROWS rows, a JSON export
as many pairs.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from kb.files import csv_escape, csv_unescape, huge_number_problem, nesting_problem, validate_rows
from kb.formats.base import (
    Imported, KbContents, faq_groups, json_container_problem, line_finder, json_key_pattern, qna_ids,
    suggestions_by_faq,
)
from kb.records import KbFormatError, type_name

COLUMNS = ["Question", "Answer", "Source", "Metadata", "SuggestedQuestions", "IsContextOnly", "Prompts", "QnaId"]
_KNOWN = {c.lower() for c in COLUMNS} | {"sourcedisplayname"}
_UNESCAPE = re.compile(r"\\(\\|n|r|t)")
_UNESCAPED = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
#: metadata written as `key:value|...`; anything else (a tab included, which would split the TSV cell) as JSON
_SAFE_META = re.compile(r"[^:|\t\r\n]+")
#: the columns whose TSV cells use backslash escapes; the others hold JSON or plain values written as they are
_BACKSLASHED = {"question", "answer", "source"}
#: the rows one import reads, every table of the file together (blank lines count: a line's number is
#: what is checked). A QnA Maker KB of tens of thousands of pairs fits (its portal imports TSVs of at most
#: 10 MB, some 20,000 rows of real answers); millions of short or blank lines, which a few KB of ZIP can
#: hold, are refused at the first row past it. Each row costs about 3 KB until the import is written
#: (checked, grouped, stored), so 50,000 keep an import under 200 MB
MAX_ROWS = 50_000

Row = tuple[int, dict | None, str | None]


# ---------------------------------------------------------------- cells

def unescape(cell: str) -> str:
    return _UNESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], cell)


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def write_cell(text: str, column: str | None = None) -> str:
    """`text` as a TSV cell of `column` (lower-case; None: text with backslash escapes), formula-escaped."""
    return csv_escape(escape(text) if column is None or column in _BACKSLASHED else text)


def read_cell(cell: str, column: str | None = None) -> str:
    """`write_cell` undone."""
    text = csv_unescape(cell)
    return unescape(text) if column is None or column in _BACKSLASHED else text


def tsv_text(rows: list[list[str]], columns: list[str] | None = None) -> str:
    """Rows as TSV text, each cell by `write_cell` for its column of `columns` (the header's names; None: every
    cell is escaped text). The header row is written as it is."""
    names = [c.lower() for c in columns] if columns else []
    lines = ["\t".join(rows[0])] if columns and rows else []
    for row in rows[1:] if columns else rows:
        lines.append("\t".join(write_cell(c, names[i] if i < len(names) else None) for i, c in enumerate(row)))
    return "\n".join(lines) + "\n"


def parse_metadata(cell: str | None) -> tuple[dict[str, str] | None, str | None]:
    """A Metadata cell -> (dict, None) or (None, why not)."""
    text = (cell or "").strip()
    if not text or text == "[]" or text == "{}":
        return {}, None
    if text[0] in "[{":
        value, problem = _json_cell("Metadata", text)
        return (None, problem) if problem else metadata_of(value)
    out: dict[str, str] = {}
    for part in text.split("|"):
        if not part.strip():
            continue
        key, sep, value = part.partition(":")
        if not sep:
            return None, f"Metadata {part.strip()[:40]!r} is not key:value (pairs are separated by |)"
        out[key.strip()] = value.strip()
    return out, None


def metadata_of(value: Any) -> tuple[dict[str, str] | None, str | None]:
    """QnA Maker's [{"name", "value"}] or Azure's {"key": "value"} -> dict."""
    if isinstance(value, dict):
        if all(isinstance(v, str) for v in value.values()):
            return dict(value), None
        return None, "metadata values must be strings"
    if isinstance(value, list):
        out: dict[str, str] = {}
        for item in value:
            if not (isinstance(item, dict) and isinstance(item.get("name"), str)
                    and isinstance(item.get("value"), str)):
                return None, 'metadata must be a list of {"name": str, "value": str}'
            out[item["name"]] = item["value"]
        return out, None
    if value is None:
        return {}, None
    return None, f"metadata must be a list or an object, got {type_name(value)}"


def format_metadata(metadata: dict[str, str]) -> str:
    if not metadata:
        return ""
    if all(_SAFE_META.fullmatch(k) and _SAFE_META.fullmatch(v) for k, v in metadata.items()):
        return "|".join(f"{k}:{v}" for k, v in metadata.items())
    return json.dumps([{"name": k, "value": v} for k, v in metadata.items()], ensure_ascii=False)


def parse_bool(cell: str | None) -> tuple[bool | None, str | None]:
    text = (cell or "").strip().lower()
    if text in ("", "false", "0"):
        return False, None
    if text in ("true", "1"):
        return True, None
    return None, f"IsContextOnly must be True or False, got {cell[:20]!r}"


def parse_json_cell(column: str, cell: str | None) -> tuple[Any, str | None]:
    text = (cell or "").strip()
    if not text:
        return [], None
    return _json_cell(column, text)


def _json_cell(column: str, text: str) -> tuple[Any, str | None]:
    """(the cell's JSON, None) or (None, why not): whatever json.loads raises is the cell's fault."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"{column} is not valid JSON: {exc.msg} (column {exc.colno})"
    except RecursionError:
        return None, f"{column} is not valid JSON: {nesting_problem()}"
    except ValueError:  # int() refusing a number of more digits than it converts
        return None, f"{column} is not valid JSON: {huge_number_problem(None)}"


def follow_ups_of(prompts: Any) -> tuple[list[dict[str, str]] | None, str | None]:
    """Prompts [{"displayOrder", "qnaId", "displayText"}] -> follow_ups in display order."""
    if prompts is None:
        return [], None
    if not isinstance(prompts, list):
        return None, f"prompts must be a list, got {type_name(prompts)}"
    ordered: list[tuple[int, int, dict[str, str]]] = []
    for i, p in enumerate(prompts):
        if not isinstance(p, dict):
            return None, f"prompt {i} must be an object"
        p = lower_keys(p)  # the portal's exports write DisplayOrder, QnaId, DisplayText; the APIs camelCase
        qna_id, text = p.get("qnaid"), p.get("displaytext")
        if p.get("qna"):
            return None, (f"prompt {i} holds a new QnA inline (\"qna\"); give that QnA its own rows and "
                          "name it by qnaId")
        if isinstance(qna_id, bool) or not isinstance(qna_id, int):
            return None, f"prompt {i} needs an integer qnaId, got {type_name(qna_id)}"
        if not isinstance(text, str):
            return None, f"prompt {i} needs a displayText string"
        order = p.get("displayorder", i)
        ordered.append((order if isinstance(order, int) and not isinstance(order, bool) else i, i,
                        {"faq_id": str(qna_id), "text": text}))
    return [f for _, _, f in sorted(ordered, key=lambda t: (t[0], t[1]))], None


def prompts_of(follow_ups: list[dict[str, str]], ids: dict[str, int]) -> list[dict[str, Any]]:
    return [{"displayOrder": i, "qnaId": ids[f["faq_id"]], "qna": None, "displayText": f["text"]}
            for i, f in enumerate(follow_ups) if f["faq_id"] in ids]


def lower_keys(obj: dict) -> dict:
    return {str(k).lower(): v for k, v in obj.items()}


def suggested_of(value: Any) -> list[str]:
    """Every suggested question in a SuggestedQuestions cell or activeLearningSuggestions: strings, or
    objects with "question" / "clusterHead", nested under "suggestedQuestions" or "alternateQuestionList"."""
    out: list[str] = []
    # a stack, not recursion: a cell may nest lists almost as deep as the JSON parser allows
    todo: list[Any] = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            if v.strip():
                out.append(v.strip())
        elif isinstance(v, list):
            todo.extend(reversed(v))
        elif isinstance(v, dict):
            v = lower_keys(v)  # ClusterHead / AlternateQuestionList in the portal's TSV, camelCase in JSON
            found = [v[key] for key in ("question", "clusterhead") if isinstance(v.get(key), str)]
            found += [v.get(key) for key in ("suggestedquestions", "alternatequestionlist", "questions")]
            todo.extend(reversed(found))
    return list(dict.fromkeys(out))


def qna_id_of(value: Any) -> tuple[str | None, str | None]:
    if isinstance(value, bool):
        return None, "QnaId must be a positive integer"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    # ASCII digits only: str.isdigit() also takes "²" (which int() refuses) and "٣" (which it reads as 3)
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,18}", value.strip()):
        value = int(value.strip())
    if isinstance(value, int) and value > 0:
        return str(value), None
    return None, f"QnaId must be a positive integer, got {str(value)[:20]!r}"


# ---------------------------------------------------------------- tables (TSV, XLSX)

def read_table(name: str, fmt: str, rows: Iterable[tuple[int, list[Any]]], escaped: bool) -> Imported:
    """Rows of cells (the first the header) -> Imported. `escaped`: TSV cells (`read_cell`); else XLSX ones.
    `rows` may be lazy: each is checked as it comes, so only the records are kept."""
    it = iter(rows)
    try:
        header_line, header = next(it)
    except StopIteration:
        raise KbFormatError([f"{name}:1: empty file (a header row with Question and Answer is required)"],
                            source=name) from None
    columns = [str(h or "").strip().lower() for h in header]
    missing = [c for c in ("Question", "Answer") if c.lower() not in columns]
    if missing:
        raise KbFormatError([f"{name}:{header_line}: header lacks column(s) {', '.join(missing)} "
                             f"(a QnA Maker / Azure export has {', '.join(COLUMNS)})"], source=name)
    notes = [f"column {h!r} is not kept" for h in header if str(h or "").strip()
             and str(h).strip().lower() not in _KNOWN]
    suggestions: list[tuple[str, str]] = []
    records = validate_rows(name, _pair_rows(it, columns, escaped, suggestions))
    return Imported(format=fmt, records=records, suggestions=_known(suggestions, records), notes=notes)


def _pair_rows(rows: Iterator[tuple[int, list[Any]]], columns: list[str], escaped: bool,
               suggestions: list[tuple[str, str]]) -> Iterator[Row]:
    """The table's rows after its header as validate_rows takes them; their suggested questions are added to
    `suggestions`."""
    by_answer: dict[str, str] = {}
    for line, cells in rows:
        texts = ["" if c is None else str(c) for c in cells]
        if not any(t.strip() for t in texts):
            continue
        cell = {col: (texts[i] if i < len(texts) else "") for i, col in enumerate(columns)}
        if escaped:
            cell = {k: read_cell(v, k) for k, v in cell.items()}
        problems: list[str] = []
        if "qnaid" in cell and cell["qnaid"].strip():
            faq_id, problem = qna_id_of(cell["qnaid"])
            if problem:
                problems.append(problem)
        else:  # an export without ids: rows with one answer are one pair
            faq_id = by_answer.setdefault(cell["answer"], str(len(by_answer) + 1))
        metadata, problem = parse_metadata(cell.get("metadata"))
        problems += [problem] if problem else []
        context_only, problem = parse_bool(cell.get("iscontextonly"))
        problems += [problem] if problem else []
        prompts, problem = parse_json_cell("Prompts", cell.get("prompts"))
        follow_ups, problem2 = follow_ups_of(prompts) if problem is None else (None, problem)
        problems += [problem2] if problem2 else []
        suggested, problem = parse_json_cell("SuggestedQuestions", cell.get("suggestedquestions"))
        problems += [problem] if problem else []
        if problems:
            yield from ((line, None, p) for p in problems)
            continue
        suggestions.extend((faq_id, q) for q in suggested_of(suggested))
        yield (line, {"faq_id": faq_id, "question": cell["question"], "answer": cell["answer"],
                      "metadata": metadata, "source": cell.get("source", "").strip() or None,
                      "follow_ups": follow_ups, "context_only": context_only}, None)


def _known(suggestions: list[tuple[str, str]], records: list) -> list[tuple[str, str]]:
    """Suggestions of FAQs the file has, less those already phrasings, once each."""
    phrasings = {(r.faq_id, r.question.strip().lower()) for r in records}
    faqs = {r.faq_id for r in records}
    kept = [(f, " ".join(q.split())) for f, q in suggestions if f in faqs]
    return list(dict.fromkeys((f, q) for f, q in kept if (f, q.lower()) not in phrasings and q))


class TooManyRows(KbFormatError):
    """A file past MAX_ROWS: the whole import stops there, whichever table it was reading."""


class RowLimit:
    """The rows an import may still read (MAX_ROWS), shared by every table of one file: a ZIP's TSVs, a
    workbook's sheets."""

    def __init__(self, source: str, most: int = MAX_ROWS):
        self.source, self.most, self.read = source, most, 0

    def count(self, where: str) -> None:
        """One more row, at `where` (`file:line`); KbFormatError past the limit."""
        self.read += 1
        if self.read > self.most:
            raise self._past(where)

    def ahead(self, name: str, lines: int) -> None:
        """KbFormatError at once when `lines` more rows of `name` would be past the limit."""
        if self.read + lines > self.most:
            raise self._past(f"{name}:{self.most - self.read + 1}")

    def _past(self, where: str) -> TooManyRows:
        return TooManyRows([f"{where}: more than {self.most:,} rows, the most one import reads (split the file)"],
                             source=self.source)


def line_count(stream: IO[bytes]) -> int:
    """The lines `tsv_stream` would read from `stream`, counted at C speed a MB at a time: checking them
    against the limit first refuses a file of too many rows before any is checked, which takes seconds."""
    lines, last = 0, b"\n"
    for chunk in iter(lambda: stream.read(1 << 20), b""):
        lines, last = lines + chunk.count(b"\n"), chunk
    return lines + (not last.endswith(b"\n"))


def tsv_rows(path: str | Path, name: str, limit: RowLimit | None = None) -> Iterator[tuple[int, list[str]]]:
    limit = limit or RowLimit(name)
    with open(path, "rb") as fh:
        limit.ahead(name, line_count(fh))
        fh.seek(0)
        yield from tsv_stream(fh, name, limit)


def tsv_stream(stream: IO[bytes], name: str, limit: RowLimit) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each line of `stream` that holds something, read one line at a time; a blank
    line is counted against `limit` but never decoded or kept."""
    for line_no, raw in enumerate(stream, start=1):
        limit.count(f"{name}:{line_no}")
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise KbFormatError([f"{name}:{line_no}: not valid UTF-8 ({exc.reason} at byte {exc.start} of the "
                                 "line)"], source=limit.source) from None
        yield line_no, (text[:-1] if text.endswith("\n") else text).rstrip("\r").split("\t")


def table_rows(contents: KbContents) -> tuple[list[list[str]], list[str]]:
    """The KB as table rows (header first; cells unescaped) and the notes of what a table cannot hold."""
    faqs = faq_groups(contents.records)
    ids = qna_ids(f["faq_id"] for f in faqs)
    suggested = suggestions_by_faq(contents.suggestions)
    rows: list[list[str]] = [list(COLUMNS)]
    notes: list[str] = []
    tagged = sum(1 for f in faqs if f["tags"])
    if tagged:
        notes.append(f"{tagged} FAQs have tags, which QnA Maker and Azure do not have: not written")
    for f in faqs:
        prompts = json.dumps(prompts_of(f["follow_ups"], ids), ensure_ascii=False)
        shared = [f["answer"], f["source"] or "", format_metadata(f["metadata"]),
                  json.dumps(suggested.get(f["faq_id"], []), ensure_ascii=False),
                  "True" if f["context_only"] else "False", prompts, str(ids[f["faq_id"]])]
        for q in f["questions"] or [""]:
            rows.append([q, *shared])
    return rows, notes


def write_tsv(path: str | Path, contents: KbContents) -> tuple[int, int]:
    rows, _ = table_rows(contents)
    _atomic_write(path, tsv_text(rows, COLUMNS))
    return counts(contents)


def counts(contents: KbContents) -> tuple[int, int]:
    faqs = faq_groups(contents.records)
    return len(faqs), sum(len(f["questions"]) for f in faqs)


def _atomic_write(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, document: Any) -> None:
    _atomic_write(path, json.dumps(document, ensure_ascii=False, indent=2) + "\n")


# ---------------------------------------------------------------- JSON documents

def load_json(path: str | Path, name: str) -> tuple[Any, str]:
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise KbFormatError([f"{name}:1: not valid UTF-8 ({exc.reason} at byte {exc.start})"], source=name) from None
    problem = json_container_problem(text)
    if problem is not None:
        raise KbFormatError([f"{name}:1: {problem}"], source=name)
    try:
        return json.loads(text), text
    except json.JSONDecodeError as exc:
        raise KbFormatError([f"{name}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})"],
                            source=name) from None
    except (RecursionError, ValueError) as exc:
        raise KbFormatError([f"{name}:1: invalid JSON: {exc}"], source=name) from None


def qna_items(name: str, fmt: str, items: Any, text: str, list_key: str, metadata_key: str,
              dialog_key: str, suggestions_key: str) -> tuple[list[Row], list[tuple[str, str]]]:
    """QnA objects of a JSON export -> rows (one per question, at the line of the QnA's id) and suggestions."""
    if not isinstance(items, list):
        return [(1, None, f"{list_key} must be a list of QnA objects, got {type_name(items)}")], []
    if len(items) > MAX_ROWS:  # each pair is a row at least
        raise TooManyRows([f"{name}:1: {list_key} holds {len(items):,} QnA pairs, more than the {MAX_ROWS:,} rows "
                           "one import reads (split the file)"], source=name)
    find = line_finder(text)
    pos, line, lost = 0, 1, False
    rows: list[Row] = []
    suggestions: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        # an id not found as JSON writes it (spelt 1.0, say) sends the search to the end of the text: after
        # one, the later pairs keep the last line found rather than search the rest of the text again
        searched = isinstance(item, dict) and "id" in item and not lost
        at = find(json_key_pattern("id", item["id"]), pos) if searched else None
        lost = lost or (searched and at is None)
        line, pos = at if at is not None else (line if lost else 1, pos)
        where = f"{list_key}[{i}]"
        if not isinstance(item, dict):
            rows.append((line, None, f"{where} must be an object, got {type_name(item)}"))
            continue
        faq_id, problem = qna_id_of(item.get("id"))
        metadata, problem2 = metadata_of(item.get(metadata_key))
        dialog = item.get(dialog_key) or {}
        follow_ups, problem3 = (follow_ups_of(dialog.get("prompts")) if isinstance(dialog, dict)
                                else (None, f"{dialog_key} must be an object"))
        context_only = dialog.get("isContextOnly", False) if isinstance(dialog, dict) else False
        problem4 = None if isinstance(context_only, bool) else "isContextOnly must be true or false"
        questions = item.get("questions")
        problem5 = (None if isinstance(questions, list) and all(isinstance(q, str) for q in questions)
                    else "questions must be a list of strings")
        problems = [f"{where}: {p}" for p in (problem, problem2, problem3, problem4, problem5) if p]
        if problems:
            rows.extend((line, None, p) for p in problems)
            continue
        if not questions:
            rows.append((line, None, f"{where} (id {faq_id}) has no questions; every pair here needs one"))
            continue
        for q in questions:
            rows.append((line, {"faq_id": faq_id, "question": q, "answer": item.get("answer"),
                                "metadata": metadata, "source": item.get("source") or None,
                                "follow_ups": follow_ups, "context_only": context_only}, None))
        suggestions += [(faq_id, q) for q in suggested_of(item.get(suggestions_key))]
    return rows, suggestions


def finish(name: str, fmt: str, rows: list[Row], suggestions: list[tuple[str, str]], **extra: Any) -> Imported:
    records = validate_rows(name, rows)
    return Imported(format=fmt, records=records, suggestions=_known(suggestions, records), **extra)


def qna_documents(contents: KbContents, metadata_style: str, dialog_key: str,
                  suggestions_key: str) -> list[dict[str, Any]]:
    """The KB as QnA objects: QnA Maker's (`metadata_style` "list", prompts under "context") or Azure's
    ("dict", under "dialog")."""
    faqs = faq_groups(contents.records)
    ids = qna_ids(f["faq_id"] for f in faqs)
    suggested = suggestions_by_faq(contents.suggestions)
    docs = []
    for f in faqs:
        metadata: Any = ([{"name": k, "value": v} for k, v in f["metadata"].items()]
                         if metadata_style == "list" else dict(f["metadata"]))
        prompts = prompts_of(f["follow_ups"], ids)
        if metadata_style == "dict":
            prompts = [{k: v for k, v in p.items() if k != "qna"} for p in prompts]
        doc: dict[str, Any] = {"id": ids[f["faq_id"]], "answer": f["answer"], "source": f["source"] or "",
                               "questions": list(f["questions"]), "metadata": metadata,
                               dialog_key: {"isContextOnly": f["context_only"], "prompts": prompts}}
        qs = suggested.get(f["faq_id"], [])
        doc[suggestions_key] = ([{"clusterHead": q, "suggestedQuestions": [
            {"question": q, "userSuggestedCount": 0, "autoSuggestedCount": 1}]} for q in qs])
        docs.append(doc)
    return docs
