"""AWS QnABot (qnabot-on-aws) content exports: the content designer's JSON, {"qna": [item, ...]}.

Mapping, for items of "type" "qna" (an item without "type" is one; QnABot's schema requires qid, q, a):
  qid                   faq_id, kept as is (the bot's Lambda hooks and chaining rules name items by it)
  q                     the FAQ's phrasings
  a                     answer, verbatim: Handlebars such as {{setSessionAttr ...}} stays in the text (a note
                        counts the answers that hold some)
  t (topic)             metadata {"topic": t}
  tags                  tags (QnABot writes them as one space-separated string; a list is taken too)
  alt.markdown          metadata {"answer_markdown": ...} when it fits a metadata value (500 characters),
                        else not kept, with a note
  alt.ssml              not kept (a note counts them): the KB answers in text
Items of other types (quiz, slottype, text passages) are skipped with one note counting them; the other
fields of an item (response cards, Lambda hooks, next / chaining rules, session attributes, slots, ...)
are listed once in a note. A bare list of items reads too; an export without qna items is an error. Errors
name the line of the item's "qid".
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kb.files import validate_rows
from kb.formats.base import Imported, json_key_pattern, line_finder
from kb.formats.qna import load_json
from kb.records import MAX_METADATA_VALUE_CHARS, KbFormatError, type_name

NAME = "qnabot"

#: what an item's other fields are, for the note saying they were not kept
_OTHER_FIELDS = {
    "r": "response card", "l": "Lambda hook", "args": "Lambda hook arguments", "next": "next item",
    "conditionalChaining": "chaining rule", "elicitResponse": "elicit response", "sa": "session attributes",
    "slots": "slots", "rp": "Alexa reprompt", "botRouting": "bot routing", "clientFilterValues": "client filters",
    "kendraRedirectQueryText": "Kendra redirect", "kendraRedirectQueryArgs": "Kendra query arguments",
    "kendraRedirectQueryConfidenceThreshold": "Kendra confidence threshold", "refMarkdown": "reference markdown",
}
#: fields read, or that no answer depends on (the designer's "_id" and "selected", the Lex intent switch)
_READ = {"qid", "q", "a", "t", "alt", "type", "tags", "_id", "selected", "enableQidIntent"}

Row = tuple[int, dict | None, str | None]


def sniff(path: Path, head: bytes) -> bool:
    return path.suffix.lower() == ".json" and b'"qid"' in head


def read(path: str | Path, name: str) -> Imported:
    doc, text = load_json(path, name)
    items = doc.get("qna") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        got = (type_name(doc) if not isinstance(doc, dict) else "no \"qna\"" if items is None
               else f"{type_name(items)} under \"qna\"")
        raise KbFormatError([f"{name}:1: a QnABot export is an object {{\"qna\": [items]}}, got {got}"],
                            source=name)
    find = line_finder(text)
    pos, line, lost = 0, 1, False
    rows: list[Row] = []
    skipped: Counter[str] = Counter()
    other: Counter[str] = Counter()
    long_markdown: list[str] = []
    ssml: list[str] = []
    templated = 0
    for i, item in enumerate(items):
        # a qid not found as JSON writes it (or none at all) sends the search to the end of the text: after one,
        # the later items keep the last line found rather than search the rest of the text again each
        searched = isinstance(item, dict) and not lost
        at = find(json_key_pattern("qid", item.get("qid")), pos) if searched else None
        lost = lost or (searched and at is None)
        line, pos = at if at is not None else (line if lost else 1, pos)
        if not isinstance(item, dict):
            rows.append((line, None, f"qna[{i}] must be an object, got {type_name(item)}"))
            continue
        kind = item.get("type", "qna")
        if kind != "qna":
            skipped[str(kind)] += 1
            continue
        qid = item.get("qid")
        where = f"qna[{i}]" + (f" (qid {qid!r})" if isinstance(qid, str) else "")
        problems: list[str] = []
        if not isinstance(qid, str) or not qid.strip():
            problems.append(f"qna[{i}] needs a qid string, got {type_name(qid)}")
        questions = item.get("q")
        if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
            problems.append(f"{where}: q must be a list of strings, got {type_name(questions)}")
        elif not any(q.strip() for q in questions):
            problems.append(f"{where} has no questions (q is empty)")
        answer = item.get("a")
        if not isinstance(answer, str) or not answer.strip():
            problems.append(f"{where} has no answer (a)")
        metadata, problem = _metadata(item, where)
        problems += [problem] if problem else []
        tags, problem = _tags(item.get("tags"), where)
        problems += [problem] if problem else []
        if problems:
            rows.extend((line, None, p) for p in problems)
            continue
        alt = item.get("alt") if isinstance(item.get("alt"), dict) else {}
        markdown = alt.get("markdown")
        if isinstance(markdown, str) and markdown.strip():
            if len(markdown.strip()) <= MAX_METADATA_VALUE_CHARS:
                metadata["answer_markdown"] = markdown.strip()
            else:
                long_markdown.append(qid)
        if isinstance(alt.get("ssml"), str) and alt["ssml"].strip():
            ssml.append(qid)
        templated += "{{" in answer
        other.update(k for k, v in item.items() if k not in _READ and _given(v))
        for q in questions:
            if q.strip():
                rows.append((line, {"faq_id": qid, "question": q, "answer": answer.strip(), "tags": tags,
                                    "metadata": metadata}, None))
    if not rows:
        kinds = ", ".join(f"{k}: {n}" for k, n in sorted(skipped.items())) or "none"
        rows.append((1, None, f"no items of type qna in this export (other items: {kinds})"))
    records = validate_rows(name, rows)
    return Imported(format=NAME, records=records,
                    notes=_notes(skipped, other, long_markdown, ssml, templated))


def _metadata(item: dict[str, Any], where: str) -> tuple[dict[str, str], str | None]:
    topic = item.get("t")
    if topic is None or (isinstance(topic, str) and not topic.strip()):
        return {}, None
    if not isinstance(topic, str):
        return {}, f"{where}: t (topic) must be a string, got {type_name(topic)}"
    return {"topic": topic.strip()}, None


def _tags(value: Any, where: str) -> tuple[list[str] | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, str):
        return value.split(), None
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return [t for t in value if t.strip()], None
    return None, f"{where}: tags must be a space-separated string, got {type_name(value)}"


def _given(value: Any) -> bool:
    """Whether a field says something: the designer writes empty response cards ({"title": "", ...})
    and empty "next" strings on items that use neither."""
    if isinstance(value, dict):
        return any(_given(v) for v in value.values())
    if isinstance(value, list):
        return any(_given(v) for v in value)
    if isinstance(value, str):
        return bool(value.strip())
    return value is not None and value is not False


def _notes(skipped: Counter[str], other: Counter[str], long_markdown: list[str], ssml: list[str],
           templated: int) -> list[str]:
    notes: list[str] = []
    if skipped:
        kinds = ", ".join(f"{k}: {n}" for k, n in sorted(skipped.items()))
        notes.append(f"{_n(sum(skipped.values()), 'item')} of other types than qna ({kinds}): skipped")
    if long_markdown:
        notes.append(f"alt.markdown of {_n(len(long_markdown), 'item')} is longer than {MAX_METADATA_VALUE_CHARS} "
                     f"characters, more than metadata holds: not kept ({_listed(long_markdown)})")
    if ssml:
        notes.append(f"alt.ssml of {_n(len(ssml), 'item')}: not kept, the KB answers in text ({_listed(ssml)})")
    if other:
        fields = ", ".join(f"{k} ({_OTHER_FIELDS.get(k, 'field')}) on {n}" for k, n in sorted(other.items()))
        notes.append(f"fields not kept: {fields}")
    if templated:
        notes.append(f"{_n(templated, 'answer')} with Handlebars ({{{{...}}}}), kept as written: QnABot fills them in "
                     "at answer time, the KB shows them as they are")
    return notes


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _listed(qids: list[str], most: int = 5) -> str:
    shown = ", ".join(qids[:most])
    return shown + (f" and {len(qids) - most} more" if len(qids) > most else "")
