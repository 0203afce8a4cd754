"""What every importer returns and the small helpers they share.

An importer turns a file in another product's format into rows of the JSONL fields (kb/files.py), which
`validate_rows` checks exactly as a JSONL import is checked, plus what the KB keeps beside its FAQs:
synonyms, suggested phrasings (proposals for the review queue, never phrasings) and the default answer.
Errors are `file:line: reason`; a format without lines (XLSX) uses its row numbers.
"""
from __future__ import annotations

import hashlib
import json
import re
import unicodedata
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kb.records import KbRecord

#: the numbers QnA Maker and Azure use as QnA ids are 32-bit signed integers (their .NET clients parse them so)
MAX_QNA_ID = 2**31 - 1
#: a faq_id that is a QnA id as those services write one: ASCII digits, at most as many as MAX_QNA_ID has
_QNA_NUMBER = re.compile(r"[0-9]{1,10}")


@dataclass
class Imported:
    """A file as the KB takes it. `suggestions` are (faq_id, question) pairs for the review queue;
    `notes` say, once each, what the file held that has no place here."""

    format: str
    records: list[KbRecord]
    synonyms: list[list[str]] = field(default_factory=list)
    suggestions: list[tuple[str, str]] = field(default_factory=list)
    default_answer: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class KbContents:
    """What an exporter writes: the KB's records (kb/files.py order: an FAQ's fields on its first row)
    and what it keeps beside them."""

    records: list[KbRecord]
    synonyms: list[list[str]] = field(default_factory=list)
    suggestions: list[tuple[str, str]] = field(default_factory=list)
    default_answer: str | None = None
    language: str | None = None


def clean_synonyms(groups: Iterable[Iterable[str]]) -> list[list[str]]:
    """Groups trimmed, empty terms and repeats (case-insensitive) dropped, groups of fewer than 2 left out."""
    out: list[list[str]] = []
    for group in groups:
        seen: dict[str, str] = {}
        for term in group:
            term = " ".join(str(term).split())
            if term and term.lower() not in seen:
                seen[term.lower()] = term
        if len(seen) >= 2:
            out.append(list(seen.values()))
    return out


#: objects and arrays one JSON document of an import may hold, counted on the text before it is parsed: Python
#: spends about 70 bytes on each even when empty, so a few MB of `{},{},...` would take hundreds of MB parsed;
#: a real export of the most pairs an import reads (50,000) holds well under half of it, links in answers included
MAX_JSON_CONTAINERS = 1_000_000


def json_container_problem(text: str) -> str | None:
    """Why `text` is refused before json.loads builds it (too many objects and arrays), or None. Brackets
    inside strings are counted too: the bound is an upper one, never too low."""
    n = text.count("{") + text.count("[")
    if n > MAX_JSON_CONTAINERS:
        return (f"holds up to {n:,} JSON objects and arrays, more than the {MAX_JSON_CONTAINERS:,} one import "
                "parses (split the file)")
    return None


def line_finder(text: str):
    """`(pattern, start) -> (line, end)`: the line of the next match of `pattern` in `text` from `start`, so
    a JSON importer can name the line of each item it reads (None when there is no match)."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def find(pattern: str, start: int = 0) -> tuple[int, int] | None:
        m = re.compile(pattern).search(text, start)
        if m is None:
            return None
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= m.start():
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, m.end()

    return find


def json_key_pattern(key: str, value: Any) -> str:
    """A regex for `"key": value` as JSON writes it, whatever the spacing."""
    return re.escape(json.dumps(key)) + r"\s*:\s*" + re.escape(json.dumps(value, ensure_ascii=False))


def slug_id(text: str, prefix: str = "") -> str:
    """A stable faq_id for a format without ids: words of `text` and a short hash, so the same question
    gets the same id on every import and two questions never share one."""
    # accents folded first, so "Où se garer ?" reads ou-se-garer, not o-se-garer
    plain = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", plain)[:8]
    digest = hashlib.sha1(text.strip().lower().encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{prefix}{'-'.join(words)[:60]}-{digest}".strip("-")


def qna_ids(faq_ids: Iterable[str]) -> dict[str, int]:
    """faq_id -> the number QnA Maker and Azure show as its id: a faq_id that is a number (as imported from
    them) keeps it; any other gets a stable one from its crc32 (the next free one on a collision, taken in
    sorted order so the same KB always numbers the same way)."""
    ids = sorted(set(faq_ids))
    out: dict[str, int] = {}
    for f in ids:
        # ASCII digits only: str.isdigit() also holds for "²" and "①", which int() refuses
        if _QNA_NUMBER.fullmatch(f) and 0 < int(f) <= MAX_QNA_ID and str(int(f)) == f:
            out[f] = int(f)
    taken = set(out.values())
    for f in ids:
        if f in out:
            continue
        n = zlib.crc32(f.encode("utf-8", "surrogatepass")) % (MAX_QNA_ID - 1_000_000) + 1_000_000
        while n in taken:
            n = n + 1 if n < MAX_QNA_ID else 1_000_000
        out[f] = n
        taken.add(n)
    return out


def faq_groups(records: Iterable[KbRecord]) -> list[dict[str, Any]]:
    """Records (an FAQ's fields on its first row) -> one dict per FAQ: faq_id, questions, answer, tags,
    metadata, source, follow_ups, context_only, answers; in file order."""
    faqs: dict[str, dict[str, Any]] = {}
    for r in records:
        f = faqs.get(r.faq_id)
        if f is None:
            f = faqs[r.faq_id] = {"faq_id": r.faq_id, "questions": [], "answer": r.answer or "",
                                  "tags": list(r.tags or []), "metadata": dict(r.metadata or {}),
                                  "source": r.source, "follow_ups": [dict(x) for x in r.follow_ups or []],
                                  "context_only": bool(r.context_only), "answers": dict(r.answers or {})}
        if r.question not in f["questions"]:
            f["questions"].append(r.question)
    return list(faqs.values())


def suggestions_by_faq(suggestions: Iterable[tuple[str, str]]) -> Mapping[str, list[str]]:
    out: dict[str, list[str]] = {}
    for faq_id, q in suggestions:
        if q not in out.setdefault(faq_id, []):
            out[faq_id].append(q)
    return out
