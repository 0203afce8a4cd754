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
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kb.files import validate_rows
from kb.formats.base import (
    Imported, KbContents, faq_groups, line_finder, json_key_pattern, qna_ids, suggestions_by_faq,
)
from kb.records import KbFormatError, type_name

COLUMNS = ["Question", "Answer", "Source", "Metadata", "SuggestedQuestions", "IsContextOnly", "Prompts", "QnaId"]
_KNOWN = {c.lower() for c in COLUMNS} | {"sourcedisplayname"}
_UNESCAPE = re.compile(r"\\(\\|n|r|t)")
_UNESCAPED = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
_SAFE_META = re.compile(r"[^:|\r\n]+")

Row = tuple[int, dict | None, str | None]


# ---------------------------------------------------------------- cells

def unescape(cell: str) -> str:
    return _UNESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], cell)


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def parse_metadata(cell: str | None) -> tuple[dict[str, str] | None, str | None]:
    """A Metadata cell -> (dict, None) or (None, why not)."""
    text = (cell or "").strip()
    if not text or text == "[]" or text == "{}":
        return {}, None
    if text[0] in "[{":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, f"Metadata is not valid JSON: {exc.msg} (column {exc.colno})"
        return metadata_of(value)
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
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"{column} is not valid JSON: {exc.msg} (column {exc.colno})"


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

    def walk(v: Any) -> None:
        if isinstance(v, str):
            if v.strip():
                out.append(v.strip())
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            v = lower_keys(v)  # ClusterHead / AlternateQuestionList in the portal's TSV, camelCase in JSON
            for key in ("question", "clusterhead"):
                if isinstance(v.get(key), str):
                    walk(v[key])
            for key in ("suggestedquestions", "alternatequestionlist", "questions"):
                walk(v.get(key))

    walk(value)
    return list(dict.fromkeys(out))


def qna_id_of(value: Any) -> tuple[str | None, str | None]:
    if isinstance(value, bool):
        return None, "QnaId must be a positive integer"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and value > 0:
        return str(value), None
    return None, f"QnaId must be a positive integer, got {str(value)[:20]!r}"


# ---------------------------------------------------------------- tables (TSV, XLSX)

def read_table(name: str, fmt: str, rows: Iterable[tuple[int, list[Any]]], escaped: bool) -> Imported:
    """Rows of cells (the first the header) -> Imported. `escaped`: cells use TSV's `\\n` escapes."""
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
    by_answer: dict[str, str] = {}
    out_rows: list[Row] = []
    for line, cells in it:
        texts = ["" if c is None else str(c) for c in cells]
        if not any(t.strip() for t in texts):
            continue
        cell = {col: (texts[i] if i < len(texts) else "") for i, col in enumerate(columns)}
        if escaped:
            cell = {k: unescape(v) if k in ("question", "answer") else v for k, v in cell.items()}
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
            out_rows.extend((line, None, p) for p in problems)
            continue
        suggestions += [(faq_id, q) for q in suggested_of(suggested)]
        out_rows.append((line, {"faq_id": faq_id, "question": cell["question"], "answer": cell["answer"],
                                "metadata": metadata, "source": cell.get("source", "").strip() or None,
                                "follow_ups": follow_ups, "context_only": context_only}, None))
    records = validate_rows(name, out_rows)
    return Imported(format=fmt, records=records, suggestions=_known(suggestions, records), notes=notes)


def _known(suggestions: list[tuple[str, str]], records: list) -> list[tuple[str, str]]:
    """Suggestions of FAQs the file has, less those already phrasings, once each."""
    phrasings = {(r.faq_id, r.question.strip().lower()) for r in records}
    faqs = {r.faq_id for r in records}
    kept = [(f, " ".join(q.split())) for f, q in suggestions if f in faqs]
    return list(dict.fromkeys((f, q) for f, q in kept if (f, q.lower()) not in phrasings and q))


def tsv_rows(path: str | Path, name: str) -> Iterator[tuple[int, list[str]]]:
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise KbFormatError([f"{name}:1: not valid UTF-8 ({exc.reason} at byte {exc.start})"], source=name) from None
    for line_no, line in enumerate(text.split("\n"), start=1):
        yield line_no, line.rstrip("\r").split("\t")


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
    lines = ["\t".join(escape(c) for c in row) for row in rows]
    _atomic_write(path, "\n".join(lines) + "\n")
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
    find = line_finder(text)
    pos = 0
    rows: list[Row] = []
    suggestions: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        at = find(json_key_pattern("id", item.get("id")), pos) if isinstance(item, dict) else None
        line, pos = at if at is not None else (1, pos)
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
