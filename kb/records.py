r"""KB and query files, and the one validation used for every way FAQs enter the store.

KB files have one line per question variant:
  JSONL  {"faq_id": str, "question": str, "answer": str, "tags": [str], "metadata": {str: str},
          "source": str, "follow_ups": [{"faq_id": str, "text": str}], "context_only": bool}
  CSV    columns faq_id, question, answer, tags (tags `;`-separated); header row required; optional
         columns metadata (a JSON object in the cell), source, follow_ups (a JSON list in the cell) and
         context_only (true/false, empty = false): a file without them reads as before
`answer`, `tags` and the four FAQ fields after them may be given on every line of an FAQ or only once;
lines that repeat them must agree. Each FAQ mentioned in a file needs an answer somewhere in the file;
the others default to tags [], metadata {}, source null, follow_ups [], context_only false.

The FAQ fields of conversation-grade matching:
  metadata      string -> string, at most MAX_METADATA_KEYS keys; keys are matched case-insensitively, so
                they are stored trimmed and lower-cased (two keys of one FAQ equal after that are an error);
                values are trimmed
  source        where the answer comes from (a URL, a document), or null
  follow_ups    the prompts shown after this answer, in order: each names another FAQ of the KB and the text
                to show (whitespace collapsed like questions); no FAQ twice, never the FAQ itself. A target
                must be an FAQ of the same file or already of the KB (`read_kb` checks the file, and the KB
                when given its FAQ ids; the store checks the KB again before writing), and deleting an FAQ
                removes it from the follow-ups prompting to it
  context_only  the FAQ is answered only as the follow-up of an FAQ that prompts to it

Query files (for evaluation): JSONL `{"query": str, "faq_id": str | null}` or CSV with those columns.

CSV cells are escaped against formula injection (a spreadsheet runs a cell starting with `=`, `+`, `-`,
`@`, tab or carriage return): the writer puts a `'` before any cell matching `^'*[=+\-@\t\r]`, and the
reader takes exactly one `'` off any cell matching `^'+[=+\-@\t\r]`, so export -> import is lossless (a
cell `'=x` reads as `=x`; write `''=x` for a literal `'=x`).

A file that cannot be parsed at all (bad UTF-8, invalid JSON, JSON nested too deeply or with a number
of more digits than Python converts, a CSV field over the csv module's field limit, a broken CSV
quote) is reported like any invalid row, as `file:line: reason` in a KbFormatError.

Everything that validates a field lives here (`check_record`, `check_faq`, `group_records`) so the
file importer, `FaqStore.import_records` and the admin CRUD methods accept exactly the same data.
`text_problem` is the one rule for text any store can hold (no NUL, valid UTF-8); the HTTP API's
request models apply it to every string a client can send.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# field limits: the database columns are sized from these (app/db/models.py)
MAX_FAQ_ID_CHARS = 200
MAX_QUESTION_CHARS = 1000
MAX_ANSWER_CHARS = 20000
MAX_TAG_CHARS = 100
MAX_TAGS = 50
MAX_METADATA_KEYS = 50
MAX_METADATA_KEY_CHARS = 100
MAX_METADATA_VALUE_CHARS = 500
MAX_SOURCE_CHARS = 500
MAX_FOLLOW_UPS = 20
MAX_FOLLOW_UP_CHARS = 200
#: a KB's name: it appears in URLs (/kbs/{kb}/...), folder names and Elasticsearch index names, hence
#: lower case, digits, '-' and '_' only, starting with a letter or digit
MAX_KB_NAME_CHARS = 64
KB_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
DEFAULT_KB = "default"
CSV_TAG_SEPARATOR = ";"
# KbValidationError's message lists at most this many problems (all are kept in `.errors`).
MAX_ERRORS_SHOWN = 50

#: a cell a spreadsheet would run as a formula (possibly behind quotes the escape already added), and a
#: cell the writer escaped; see the module docstring
_FORMULA_CELL = re.compile(r"'*[=+\-@\t\r]")
_ESCAPED_CELL = re.compile(r"'+[=+\-@\t\r]")

JSONL_SUFFIXES = {".jsonl", ".ndjson"}
CSV_SUFFIXES = {".csv"}
KB_COLUMNS = ["faq_id", "question", "answer", "tags", "metadata", "source", "follow_ups", "context_only"]
STDIO = "-"


@dataclass(frozen=True)
class KbRecord:
    """One question variant of an FAQ; answer, tags and the FAQ fields are None when not given on this row.

    `loc` is where the row was read (`file:line`, set by `read_kb`) so the store's own checks name the
    line too; it takes no part in comparisons."""

    faq_id: str
    question: str
    answer: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, str] | None = None
    source: str | None = None
    follow_ups: list[dict[str, str]] | None = None
    context_only: bool | None = None
    loc: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class QueryRecord:
    """One labelled query: faq_id is the expected FAQ, None when the query should get no answer."""

    query: str
    faq_id: str | None


@dataclass(frozen=True)
class FaqDetails:
    """An FAQ's fields for conversation-grade matching, as stored and served (see the module docstring)."""

    metadata: dict[str, str] = field(default_factory=dict)
    source: str | None = None
    follow_ups: list[dict[str, str]] = field(default_factory=list)
    context_only: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"metadata": dict(self.metadata), "source": self.source,
                "follow_ups": [dict(f) for f in self.follow_ups], "context_only": self.context_only}


@dataclass
class FaqSpec:
    """Everything an import says about one FAQ (validated, questions de-duplicated in file order);
    `follow_ups_loc` is where its follow_ups were given, for the check of their targets."""

    faq_id: str
    answer: str
    tags: list[str]
    questions: list[str]
    metadata: dict[str, str] = field(default_factory=dict)
    source: str | None = None
    follow_ups: list[dict[str, str]] = field(default_factory=list)
    context_only: bool = False
    follow_ups_loc: str = ""

    @property
    def details(self) -> FaqDetails:
        return FaqDetails(self.metadata, self.source, self.follow_ups, self.context_only)


class KbValidationError(ValueError):
    """Invalid KB data; `.errors` lists every problem (as `location: reason` for files)."""

    def __init__(self, errors: Sequence[str], source: str | None = None):
        self.errors = list(errors)
        self.source = source
        shown = self.errors[:MAX_ERRORS_SHOWN]
        lines = [f"{len(self.errors)} invalid {'entry' if len(self.errors) == 1 else 'entries'}"
                 + (f" in {source}" if source else "") + ":"]
        lines += [f"  {e}" for e in shown]
        if len(self.errors) > len(shown):
            lines.append(f"  ... and {len(self.errors) - len(shown)} more")
        super().__init__("\n".join(lines))


class KbFormatError(KbValidationError):
    """A KB or query file could not be read; errors are `file:line: reason`."""


# ---------------------------------------------------------------- field validation

NUL_PROBLEM = "must not contain NUL characters"
SURROGATE_PROBLEM = "must be valid Unicode text (it contains an unpaired surrogate)"


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored as text, or None when it can.

    PostgreSQL text cannot hold NUL at all, and neither driver can encode a lone surrogate (which
    JSON's `\\ud800` escapes produce): such text fails in the database, or worse, is stored and then
    breaks every reader (SQLite keeps it inside JSON columns). Rejecting both everywhere keeps the
    two backends accepting exactly the same data.
    """
    if "\x00" in value:
        return NUL_PROBLEM
    if not (value.isascii() or _utf8_ok(value)):
        return SURROGATE_PROBLEM
    return None


def field_problem(value: str, max_chars: int) -> str | None:
    """`text_problem`, or that `value` is longer than `max_chars`: a form field's check."""
    problem = text_problem(value)
    if problem is not None:
        return problem
    if len(value) > max_chars:
        return f"must be at most {max_chars} characters"
    return None


def _storable(value: str) -> bool:
    # the inline form of text_problem(value) is None, for the import fast path
    return "\x00" not in value and (value.isascii() or _utf8_ok(value))


def _utf8_ok(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def normalize_question(question: str) -> str:
    """Collapse runs of whitespace (incl. newlines) and trim: the form stored and de-duplicated on."""
    return " ".join(question.split())


_PLACEHOLDER = re.compile(r"^\s*\[[^\]]*\]\s*$")


def is_placeholder(answer: str | None) -> bool:
    """An answer that says nothing about the FAQ: empty, only a bracketed tag such as "[intent: balance]"
    (what `faq data prepare` writes for datasets without answers), or a single word: intent KBs exported
    with their label as the answer ("alarm_query", "card-arrival") would otherwise pull every query toward
    the labels' wording."""
    if answer is None or not answer.strip() or _PLACEHOLDER.match(answer):
        return True
    return len(answer.split()) == 1


def _type_name(value: Any) -> str:
    return {list: "a list", dict: "an object", bool: "a boolean", int: "a number", float: "a number",
            str: "a string"}.get(
        type(value), type(value).__name__
    )


def _check_text(name: str, value: Any, max_chars: int, errors: list[str], required: bool = True) -> str | None:
    """Validate a string field; appends problems to `errors` and returns the value when valid."""
    if value is None:
        if required:
            errors.append(f"missing {name}")
        return None
    if not isinstance(value, str):
        errors.append(f"{name} must be a string, got {_type_name(value)}")
        return None
    problem = text_problem(value)
    if problem is not None:
        errors.append(f"{name} {problem}")
        return None
    if not value.strip():
        errors.append(f"{name} is empty")
        return None
    if len(value) > max_chars:
        errors.append(f"{name} is longer than {max_chars} characters ({len(value)})")
        return None
    return value


def check_faq_id(value: Any, errors: list[str]) -> str | None:
    faq_id = _check_text("faq_id", value, MAX_FAQ_ID_CHARS, errors)
    return faq_id.strip() if faq_id is not None else None


def check_question(value: Any, errors: list[str], name: str = "question") -> str | None:
    if isinstance(value, str):
        value = normalize_question(value)
    return _check_text(name, value, MAX_QUESTION_CHARS, errors)


def check_answer(value: Any, errors: list[str], required: bool = True) -> str | None:
    return _check_text("answer", value, MAX_ANSWER_CHARS, errors, required=required)


def check_tags(value: Any, errors: list[str]) -> list[str] | None:
    """Tags: a list of non-empty strings without `;`; trimmed and de-duplicated in order."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        errors.append(f"tags must be a list of strings, got {_type_name(value)}")
        return None
    tags: list[str] = []
    ok = True
    for i, tag in enumerate(value):
        if not isinstance(tag, str):
            errors.append(f"tags[{i}] must be a string, got {_type_name(tag)}")
            ok = False
            continue
        problem = text_problem(tag)
        tag = tag.strip()
        if problem is not None:
            errors.append(f"tags[{i}] {problem}")
            ok = False
        elif not tag:
            errors.append(f"tags[{i}] is empty")
            ok = False
        elif len(tag) > MAX_TAG_CHARS:
            errors.append(f"tags[{i}] is longer than {MAX_TAG_CHARS} characters ({len(tag)})")
            ok = False
        elif CSV_TAG_SEPARATOR in tag:
            errors.append(f"tags[{i}] must not contain {CSV_TAG_SEPARATOR!r} (the CSV tag separator)")
            ok = False
        elif tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        errors.append(f"too many tags ({len(tags)} > {MAX_TAGS})")
        ok = False
    return tags if ok else None


def check_metadata(value: Any, errors: list[str]) -> dict[str, str] | None:
    """Metadata: an object of strings; keys trimmed and lower-cased (two that collide are an error naming
    both), values trimmed."""
    if value is None:
        return None
    if not isinstance(value, dict):
        errors.append(f"metadata must be an object of strings, got {_type_name(value)}")
        return None
    out: dict[str, str] = {}
    given: dict[str, str] = {}  # normalised key -> the key as given
    ok = True
    for raw_key, raw_value in value.items():
        if not isinstance(raw_key, str):
            errors.append(f"metadata keys must be strings, got {_type_name(raw_key)}")
            ok = False
            continue
        problem = text_problem(raw_key)
        key = raw_key.strip().lower()
        if problem is not None:
            errors.append(f"metadata keys {problem}")
            ok = False
            continue
        if not key:
            errors.append("metadata has an empty key")
            ok = False
            continue
        if len(key) > MAX_METADATA_KEY_CHARS:
            errors.append(f"metadata key {key[:20]!r}... is longer than {MAX_METADATA_KEY_CHARS} characters ({len(key)})")
            ok = False
            continue
        if key in given:
            errors.append(f"metadata keys {given[key]!r} and {raw_key!r} are the same key (keys are trimmed and "
                          "matched case-insensitively)")
            ok = False
            continue
        given[key] = raw_key
        name = f"metadata[{key!r}]"
        if not isinstance(raw_value, str):
            errors.append(f"{name} must be a string, got {_type_name(raw_value)}")
            ok = False
            continue
        checked = _check_text(name, raw_value.strip(), MAX_METADATA_VALUE_CHARS, errors)
        if checked is None:
            ok = False
        else:
            out[key] = checked
    if len(value) > MAX_METADATA_KEYS:
        errors.append(f"too many metadata keys ({len(value)} > {MAX_METADATA_KEYS})")
        ok = False
    return out if ok else None


def check_source(value: Any, errors: list[str]) -> str | None:
    """Source: a string of 1..MAX_SOURCE_CHARS characters after trimming (None: not given)."""
    source = _check_text("source", value.strip() if isinstance(value, str) else value, MAX_SOURCE_CHARS, errors,
                         required=False)
    return source


def check_follow_ups(value: Any, errors: list[str], faq_id: str | None = None) -> list[dict[str, str]] | None:
    """Follow-ups: a list of {"faq_id", "text"} objects, at most MAX_FOLLOW_UPS, no FAQ twice and never
    `faq_id` itself; the text is whitespace-normalised like a question. Whether each target exists is
    `follow_up_problems`' part."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        errors.append(f"follow_ups must be a list of objects {{\"faq_id\", \"text\"}}, got {_type_name(value)}")
        return None
    if len(value) > MAX_FOLLOW_UPS:
        errors.append(f"too many follow_ups ({len(value)} > {MAX_FOLLOW_UPS})")
        return None
    out: list[dict[str, str]] = []
    at: dict[str, int] = {}
    ok = True
    for i, item in enumerate(value):
        name = f"follow_ups[{i}]"
        if not isinstance(item, dict):
            errors.append(f"{name} must be an object {{\"faq_id\", \"text\"}}, got {_type_name(item)}")
            ok = False
            continue
        unknown = [k for k in item if k not in ("faq_id", "text")]
        if unknown:
            shown = ", ".join(repr(k) if isinstance(k, str) and text_problem(k) is None else "?" for k in unknown)
            errors.append(f"{name} has unknown field(s) {shown} (a follow-up has faq_id and text)")
            ok = False
            continue
        target = _check_text(f"{name}.faq_id", item.get("faq_id"), MAX_FAQ_ID_CHARS, errors)
        text = item.get("text")
        text = _check_text(f"{name}.text", normalize_question(text) if isinstance(text, str) else text,
                           MAX_FOLLOW_UP_CHARS, errors)
        if target is None or text is None:
            ok = False
            continue
        target = target.strip()
        if faq_id is not None and target == faq_id:
            errors.append(f"{name}.faq_id {target!r} is the FAQ itself")
            ok = False
        elif target in at:
            errors.append(f"{name}.faq_id {target!r} is already follow_ups[{at[target]}]")
            ok = False
        else:
            at[target] = i
            out.append({"faq_id": target, "text": text})
    return out if ok else None


def check_context_only(value: Any, errors: list[str]) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    errors.append(f"context_only must be true or false, got {_type_name(value)}")
    return None


def follow_up_problems(specs: dict[str, FaqSpec], known: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(location, reason) for each follow-up whose target is neither one of `specs` nor in `known`."""
    have = set(specs).union(known)
    problems: list[tuple[str, str]] = []
    for spec in specs.values():
        for i, f in enumerate(spec.follow_ups):
            if f["faq_id"] not in have:
                problems.append((spec.follow_ups_loc, f"follow_ups[{i}].faq_id {f['faq_id']!r} is not an FAQ of "
                                                      "this file or KB"))
    return problems


def check_record(faq_id: Any, question: Any, answer: Any, tags: Any, metadata: Any = None, source: Any = None,
                 follow_ups: Any = None, context_only: Any = None,
                 loc: str | None = None) -> tuple[KbRecord | None, list[str]]:
    """Validate one variant row; returns (normalised record, []) or (None, problems)."""
    # Fast path for the common valid row without tags (imports of 100k rows): the same rules as
    # the check_* functions below, without their per-field call overhead.
    if (type(faq_id) is str and type(question) is str and tags is None and (answer is None or type(answer) is str)
            and metadata is None and source is None and follow_ups is None and context_only is None):
        stripped_id = faq_id.strip()
        normalized = " ".join(question.split())
        if (stripped_id and normalized and len(faq_id) <= MAX_FAQ_ID_CHARS and len(normalized) <= MAX_QUESTION_CHARS
                and (answer is None or (len(answer) <= MAX_ANSWER_CHARS and not answer.isspace() and answer))
                and _storable(faq_id) and _storable(question) and (answer is None or _storable(answer))):
            return KbRecord(stripped_id, normalized, answer, None, loc=loc), []
    errors: list[str] = []
    faq_id = check_faq_id(faq_id, errors)
    question = check_question(question, errors)
    answer = check_answer(answer, errors, required=False)
    tags = check_tags(tags, errors)
    metadata = check_metadata(metadata, errors)
    source = check_source(source, errors)
    follow_ups = check_follow_ups(follow_ups, errors, faq_id)
    context_only = check_context_only(context_only, errors)
    if errors:
        return None, errors
    return KbRecord(faq_id=faq_id, question=question, answer=answer, tags=tags, metadata=metadata, source=source,
                    follow_ups=follow_ups, context_only=context_only, loc=loc), []


#: check_faq's answer for a field left out of a partial update (None is a value for `source`)
KEEP: Any = type("Keep", (), {"__repr__": lambda self: "KEEP"})()


@dataclass(frozen=True)
class CheckedFaq:
    """A whole FAQ as `check_faq` validated it; with `partial`, a field None (source: KEEP) is "keep"."""

    faq_id: str
    answer: str | None
    questions: list[str] | None
    tags: list[str] | None
    metadata: dict[str, str] | None = None
    source: Any = KEEP
    follow_ups: list[dict[str, str]] | None = None
    context_only: bool | None = None


def check_faq(
    faq_id: Any, answer: Any, questions: Any, tags: Any, *, metadata: Any = None, source: Any = KEEP,
    follow_ups: Any = None, context_only: Any = None, partial: bool = False
) -> CheckedFaq:
    """Validate a whole FAQ as given to the CRUD API; raises KbValidationError listing every problem.

    With `partial=True` (updates) answer/questions/tags/metadata/follow_ups/context_only may be None and
    source KEEP, meaning "leave unchanged"; without it they take their defaults. Whether follow-up targets
    exist is the store's check (it knows the KB).
    """
    errors: list[str] = []
    faq_id = check_faq_id(faq_id, errors)
    answer = check_answer(answer, errors, required=not partial)
    normalized: list[str] | None = None
    if questions is None:
        if not partial:
            errors.append("missing questions")
    elif isinstance(questions, (str, bytes)) or not isinstance(questions, Iterable):
        errors.append(f"questions must be a list of strings, got {_type_name(questions)}")
    else:
        normalized = []
        for i, q in enumerate(questions):
            q = check_question(q, errors, name=f"questions[{i}]")
            if q is not None and q not in normalized:
                normalized.append(q)
        if not normalized and not errors:
            errors.append("questions must contain at least one question")
    tags = check_tags(list(tags) if isinstance(tags, tuple) else tags, errors)
    metadata = check_metadata(metadata, errors)
    if source is not KEEP:
        source = check_source(source, errors)
    follow_ups = check_follow_ups(follow_ups, errors, faq_id)
    context_only = check_context_only(context_only, errors)
    if errors:
        raise KbValidationError(errors)
    if not partial:
        metadata = metadata or {}
        source = None if source is KEEP else source
        follow_ups = follow_ups or []
        context_only = bool(context_only)
    return CheckedFaq(faq_id, answer, normalized, tags, metadata, source, follow_ups, context_only)


#: the FAQ fields that group_records merges like tags: given on any row, rows that repeat them agree
_MERGED = ("tags", "metadata", "source", "follow_ups", "context_only")


def group_records(
    located: Iterable[tuple[str, KbRecord]], skip_missing_answer: set[str] | frozenset[str] = frozenset()
) -> tuple[dict[str, FaqSpec], list[tuple[str, str]]]:
    """Merge validated variant rows into one FaqSpec per faq_id (in order of first appearance).

    `located` pairs each record with its location ("file:line"). Returns the specs and a list of
    (location, reason) for FAQs without an answer or with conflicting answers/tags/FAQ fields. FAQs in
    `skip_missing_answer` (those with a malformed row, which may have held the answer) are not
    reported as missing one. Follow-up targets are `follow_up_problems`' check.
    """
    specs: dict[str, dict[str, Any]] = {}
    problems: list[tuple[str, str]] = []
    for loc, rec in located:
        spec = specs.get(rec.faq_id)
        if spec is None:
            spec = specs[rec.faq_id] = {"loc": loc, "answer": None, "answer_loc": None, "questions": {}}
        if rec.answer is not None:
            if spec["answer"] is None:
                spec["answer"], spec["answer_loc"] = rec.answer, loc
            elif rec.answer != spec["answer"]:
                problems.append((loc, f"conflicting answer for faq_id {rec.faq_id!r} "
                                      f"(differs from the one at {spec['answer_loc']})"))
        if rec.tags is not None:
            if spec.get("tags") is None:
                spec["tags"], spec["tags_loc"] = rec.tags, loc
            elif rec.tags != spec["tags"]:
                problems.append((loc, f"conflicting tags for faq_id {rec.faq_id!r} "
                                      f"(differ from the ones at {spec['tags_loc']})"))
        for name in _MERGED[1:]:
            value = getattr(rec, name)
            if value is None:
                continue
            if spec.get(name) is None:
                spec[name], spec[name + "_loc"] = value, loc
            elif value != spec[name]:
                problems.append((loc, f"conflicting {name} for faq_id {rec.faq_id!r} "
                                      f"(differs from the one at {spec[name + '_loc']})"))
        spec["questions"].setdefault(rec.question, None)
    result: dict[str, FaqSpec] = {}
    for faq_id, spec in specs.items():
        if spec["answer"] is None:
            if faq_id not in skip_missing_answer:
                problems.append((spec["loc"], f"faq_id {faq_id!r} has no answer on any row "
                                              "(give it on at least one of its rows)"))
            continue
        result[faq_id] = FaqSpec(faq_id, spec["answer"], spec.get("tags") or [], list(spec["questions"]),
                                 metadata=spec.get("metadata") or {}, source=spec.get("source"),
                                 follow_ups=spec.get("follow_ups") or [],
                                 context_only=bool(spec.get("context_only")),
                                 follow_ups_loc=spec.get("follow_ups_loc") or spec["loc"])
    return result, problems


# ---------------------------------------------------------------- reading files

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
                yield line_no, None, f"expected a JSON object, got {_type_name(obj)}"
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
    """A CSV row's FAQ fields as read_kb passes them on: metadata and follow_ups parsed from JSON,
    context_only from true/false; problems as reasons."""
    out: dict[str, Any] = {"source": row.get("source")}
    problems: list[str] = []
    for name in ("metadata", "follow_ups"):
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
    is_csv = _kind(path) == "csv"
    problems: list[tuple[int, str]] = []
    located: list[tuple[str, KbRecord]] = []
    line_of: dict[str, int] = {}
    bad_faq_ids: set[str] = set()
    for line_no, row, problem in _iter_rows(path, required=["faq_id", "question"]):
        if problem is not None:
            problems.append((line_no, problem))
            continue
        tags = row.get("tags")
        fields: dict[str, Any] = {k: row.get(k) for k in ("metadata", "source", "follow_ups", "context_only")}
        cell_problems: list[str] = []
        if is_csv:
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
        line_of[loc] = line_no
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
        query = _check_text("query", row.get("query"), MAX_QUESTION_CHARS, errors)
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
            row = [rec.faq_id, rec.question, "", "", "", "", "", ""]
            if first:
                row[2:] = [rec.answer or "", CSV_TAG_SEPARATOR.join(rec.tags or []),
                           json.dumps(rec.metadata, ensure_ascii=False) if rec.metadata else "", rec.source or "",
                           json.dumps(rec.follow_ups, ensure_ascii=False) if rec.follow_ups else "",
                           "true" if rec.context_only else ""]
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
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return len(seen), n_variants


def kb_groups(records: Iterable[Any]) -> dict[str, list[str]]:
    """Records (anything with `.faq_id` and `.question`) -> faq_id -> its distinct phrasings in file
    order, whitespace normalised as the store keeps them; empty questions are skipped."""
    groups: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for rec in records:
        q = normalize_question(rec.question)
        if not q or (rec.faq_id, q) in seen:
            continue
        seen.add((rec.faq_id, q))
        groups.setdefault(rec.faq_id, []).append(q)
    return groups


def kb_name_problem(name: Any) -> str | None:
    """Why `name` cannot name a KB (None: it can)."""
    if not isinstance(name, str) or not re.fullmatch(KB_NAME_PATTERN, name):
        return (f"a KB name is 1-{MAX_KB_NAME_CHARS} characters of a-z, 0-9, '-' and '_', starting with a letter "
                f"or digit; got {name!a}")
    return None
