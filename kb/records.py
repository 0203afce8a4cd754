r"""The FAQ data and the one validation used for every way FAQs enter the store (file formats: kb/files.py).

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
  answers       the answer in other languages, beside `answer`: ISO 639-1 code (ANSWER_LANGUAGES; codes
                trimmed and lower-cased) -> a non-empty answer of at most MAX_ANSWER_CHARS characters; a query
                detected in one of them is answered with it (app/api/service.py), else with `answer`

Everything that validates a field lives here (`check_record`, `check_faq`, `group_records`) so the
file importer, `FaqStore.import_records` and the admin CRUD methods accept exactly the same data.
`text_problem` is the one rule for text any store can hold (no NUL, valid UTF-8); the HTTP API's
request models apply it to every string a client can send.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
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
#: the languages an FAQ's `answers` may be given in: app/settings.py LANGUAGE_CODES, repeated here because kb/
#: imports nothing of the project's own (tests/kb/test_faq_answers.py holds the two equal)
ANSWER_LANGUAGES: tuple[str, ...] = ("en", "es", "de", "fr", "it", "pt", "nl")
#: a KB's name: it appears in URLs (/kbs/{kb}/...), folder names and Elasticsearch index names, hence
#: lower case, digits, '-' and '_' only, starting with a letter or digit
MAX_KB_NAME_CHARS = 64
KB_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
DEFAULT_KB = "default"
CSV_TAG_SEPARATOR = ";"
# KbValidationError's message lists at most this many problems (all are kept in `.errors`).
MAX_ERRORS_SHOWN = 50




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
    answers: dict[str, str] | None = None
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
    answers: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"metadata": dict(self.metadata), "source": self.source,
                "follow_ups": [dict(f) for f in self.follow_ups], "context_only": self.context_only,
                "answers": dict(self.answers)}


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
    answers: dict[str, str] = field(default_factory=dict)
    follow_ups_loc: str = ""

    @property
    def details(self) -> FaqDetails:
        return FaqDetails(self.metadata, self.source, self.follow_ups, self.context_only, self.answers)


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


def type_name(value: Any) -> str:
    return {list: "a list", dict: "an object", bool: "a boolean", int: "a number", float: "a number",
            str: "a string"}.get(
        type(value), type(value).__name__
    )


def check_text(name: str, value: Any, max_chars: int, errors: list[str], required: bool = True) -> str | None:
    """Validate a string field; appends problems to `errors` and returns the value when valid."""
    if value is None:
        if required:
            errors.append(f"missing {name}")
        return None
    if not isinstance(value, str):
        errors.append(f"{name} must be a string, got {type_name(value)}")
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
    faq_id = check_text("faq_id", value, MAX_FAQ_ID_CHARS, errors)
    return faq_id.strip() if faq_id is not None else None


def check_question(value: Any, errors: list[str], name: str = "question") -> str | None:
    if isinstance(value, str):
        value = normalize_question(value)
    return check_text(name, value, MAX_QUESTION_CHARS, errors)


def check_answer(value: Any, errors: list[str], required: bool = True) -> str | None:
    return check_text("answer", value, MAX_ANSWER_CHARS, errors, required=required)


def check_tags(value: Any, errors: list[str]) -> list[str] | None:
    """Tags: a list of non-empty strings without `;`; trimmed and de-duplicated in order."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        errors.append(f"tags must be a list of strings, got {type_name(value)}")
        return None
    tags: list[str] = []
    ok = True
    for i, tag in enumerate(value):
        if not isinstance(tag, str):
            errors.append(f"tags[{i}] must be a string, got {type_name(tag)}")
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


def keyed_items(value: dict, name: str, errors: list[str], *, keys: str, same: str,
                key_problem: Callable[[str], str | None]) -> tuple[list[tuple[str, Any]], bool]:
    """(key, value) for each entry of the object `value` whose key is valid text, passes `key_problem` once
    trimmed and lower-cased, and collides with no earlier key (an error naming both); and whether all were."""
    items: list[tuple[str, Any]] = []
    given: dict[str, str] = {}  # normalised key -> the key as given
    ok = True
    for raw_key, raw_value in value.items():
        if not isinstance(raw_key, str):
            errors.append(f"{name} keys must be {keys}, got {type_name(raw_key)}")
            ok = False
            continue
        problem = text_problem(raw_key)
        key = raw_key.strip().lower()
        problem = f"{name} keys {problem}" if problem is not None else key_problem(key)
        if problem is None and key in given:
            problem = (f"{name} keys {given[key]!r} and {raw_key!r} are the same {same} (keys are trimmed and "
                       "matched case-insensitively)")
        if problem is not None:
            errors.append(problem)
            ok = False
            continue
        given[key] = raw_key
        items.append((key, raw_value))
    return items, ok


def _metadata_key_problem(key: str) -> str | None:
    if not key:
        return "metadata has an empty key"
    if len(key) > MAX_METADATA_KEY_CHARS:
        return f"metadata key {key[:20]!r}... is longer than {MAX_METADATA_KEY_CHARS} characters ({len(key)})"
    return None


def check_metadata(value: Any, errors: list[str]) -> dict[str, str] | None:
    """Metadata: an object of strings; keys trimmed and lower-cased (two that collide are an error naming
    both), values trimmed."""
    if value is None:
        return None
    if not isinstance(value, dict):
        errors.append(f"metadata must be an object of strings, got {type_name(value)}")
        return None
    items, ok = keyed_items(value, "metadata", errors, keys="strings", same="key", key_problem=_metadata_key_problem)
    out: dict[str, str] = {}
    for key, raw_value in items:
        name = f"metadata[{key!r}]"
        if not isinstance(raw_value, str):
            errors.append(f"{name} must be a string, got {type_name(raw_value)}")
            ok = False
            continue
        checked = check_text(name, raw_value.strip(), MAX_METADATA_VALUE_CHARS, errors)
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
    source = check_text("source", value.strip() if isinstance(value, str) else value, MAX_SOURCE_CHARS, errors,
                         required=False)
    return source


def check_follow_ups(value: Any, errors: list[str], faq_id: str | None = None) -> list[dict[str, str]] | None:
    """Follow-ups: a list of {"faq_id", "text"} objects, at most MAX_FOLLOW_UPS, no FAQ twice and never
    `faq_id` itself; the text is whitespace-normalised like a question. Whether each target exists is
    `follow_up_problems`' part."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        errors.append(f"follow_ups must be a list of objects {{\"faq_id\", \"text\"}}, got {type_name(value)}")
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
            errors.append(f"{name} must be an object {{\"faq_id\", \"text\"}}, got {type_name(item)}")
            ok = False
            continue
        unknown = [k for k in item if k not in ("faq_id", "text")]
        if unknown:
            shown = ", ".join(repr(k) if isinstance(k, str) and text_problem(k) is None else "?" for k in unknown)
            errors.append(f"{name} has unknown field(s) {shown} (a follow-up has faq_id and text)")
            ok = False
            continue
        target = check_text(f"{name}.faq_id", item.get("faq_id"), MAX_FAQ_ID_CHARS, errors)
        text = item.get("text")
        text = check_text(f"{name}.text", normalize_question(text) if isinstance(text, str) else text,
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
    errors.append(f"context_only must be true or false, got {type_name(value)}")
    return None


def _answers_key_problem(code: str) -> str | None:
    if code in ANSWER_LANGUAGES:
        return None
    shown = code if len(code) <= 20 else code[:20] + "..."
    return f"answers.{shown} is not a supported language code (one of {', '.join(ANSWER_LANGUAGES)})"


def check_answers(value: Any, errors: list[str]) -> dict[str, str] | None:
    """Answers per language: an object of ANSWER_LANGUAGES codes (trimmed and lower-cased; two that collide
    are an error naming both) to non-empty answers of at most MAX_ANSWER_CHARS characters, kept as given."""
    if value is None:
        return None
    if not isinstance(value, dict):
        errors.append(f"answers must be an object of language code -> answer, got {type_name(value)}")
        return None
    items, ok = keyed_items(value, "answers", errors, keys="language codes", same="language",
                            key_problem=_answers_key_problem)
    out: dict[str, str] = {}
    for code, raw_answer in items:
        checked = check_text(f"answers.{code}", raw_answer, MAX_ANSWER_CHARS, errors)
        if checked is None:
            ok = False
        else:
            out[code] = checked
    return out if ok else None


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
                 follow_ups: Any = None, context_only: Any = None, answers: Any = None,
                 loc: str | None = None) -> tuple[KbRecord | None, list[str]]:
    """Validate one variant row; returns (normalised record, []) or (None, problems)."""
    # Fast path for the common valid row without tags (imports of 100k rows): the same rules as
    # the check_* functions below, without their per-field call overhead.
    if (type(faq_id) is str and type(question) is str and tags is None and (answer is None or type(answer) is str)
            and metadata is None and source is None and follow_ups is None and context_only is None
            and answers is None):
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
    answers = check_answers(answers, errors)
    if errors:
        return None, errors
    return KbRecord(faq_id=faq_id, question=question, answer=answer, tags=tags, metadata=metadata, source=source,
                    follow_ups=follow_ups, context_only=context_only, answers=answers, loc=loc), []


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
    answers: dict[str, str] | None = None


def check_faq(
    faq_id: Any, answer: Any, questions: Any, tags: Any, *, metadata: Any = None, source: Any = KEEP,
    follow_ups: Any = None, context_only: Any = None, answers: Any = None, partial: bool = False
) -> CheckedFaq:
    """Validate a whole FAQ as given to the CRUD API; raises KbValidationError listing every problem.

    With `partial=True` (updates) answer/questions/tags/metadata/follow_ups/context_only/answers may be None and
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
        errors.append(f"questions must be a list of strings, got {type_name(questions)}")
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
    answers = check_answers(answers, errors)
    if errors:
        raise KbValidationError(errors)
    if not partial:
        metadata = metadata or {}
        source = None if source is KEEP else source
        follow_ups = follow_ups or []
        context_only = bool(context_only)
        answers = answers or {}
    return CheckedFaq(faq_id, answer, normalized, tags, metadata, source, follow_ups, context_only, answers)


#: the FAQ fields that group_records merges like tags: given on any row, rows that repeat them agree
_MERGED = ("tags", "metadata", "source", "follow_ups", "context_only", "answers")


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
                                 answers=spec.get("answers") or {},
                                 follow_ups_loc=spec.get("follow_ups_loc") or spec["loc"])
    return result, problems


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
