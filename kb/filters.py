"""The filter grammar of `/match`: which FAQs a query may be answered with, by their metadata, tags and source.

Grammar (JSON; every part optional, docs/filters.md is the user's reference):

    filter    = {"all": [condition...], "any": [condition...], "none": [condition...]}
    condition = {"key": K, "value": V}   the FAQ's metadata has key K with value V
              | {"tag": T}               T is one of the FAQ's tags
              | {"source": S}            the FAQ's source is S

Semantics: an FAQ passes when every `all` condition holds, at least one `any` condition holds (when `any`
has any), and no `none` condition holds. An empty filter `{}` (or one with only empty lists) passes every
FAQ. Conditions are sets: order and repeats within a list do not change the result.

Case and whitespace: every string is trimmed. Metadata keys, metadata values and tags compare
case-insensitively (both sides lower-cased, as the store lower-cases metadata keys; values too, like Azure's
metadata filter); a source compares exactly, case included (a URL's path is case-sensitive).

Limits, each reported as a `FilterError(field, reason)` naming the path (`filter.all[2].key`) and the rule:
the filter and each condition are objects with only the keys above, the three parts are lists, a condition
has exactly one of key/tag/source (`value` goes with `key` and only with it), every string is non-empty
after trimming, within the field limits of kb/records.py (MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS,
MAX_TAG_CHARS, MAX_SOURCE_CHARS) and storable text (`text_problem`), and there are at most
MAX_FILTER_CONDITIONS conditions in all.

Nothing here knows of requests or indexes: `parse_filter` turns a client's JSON into a `FaqFilter`, whose
`matches` decides one FAQ and `select` a whole KB (once per filter and snapshot; `key()` is what to cache on).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kb.records import (
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_VALUE_CHARS,
    MAX_SOURCE_CHARS,
    MAX_TAG_CHARS,
    text_problem,
)

#: conditions in one filter, all, any and none together: each costs a pass over the KB's FAQs
MAX_FILTER_CONDITIONS = 50
PARTS = ("all", "any", "none")
#: a condition's kinds, each with the key that names it and its length limit
KINDS = {"key": MAX_METADATA_KEY_CHARS, "tag": MAX_TAG_CHARS, "source": MAX_SOURCE_CHARS}
CONDITION_KEYS = ("key", "value", "tag", "source")
#: how much of an unknown key a message quotes
_SHOWN_CHARS = 40


class FilterError(ValueError):
    """A filter the grammar refuses: `field` is the path of the offending part (`filter.any[0].tag`),
    `reason` the rule it breaks."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


#: one condition, normalised: ("key", key, value), ("tag", tag, "") or ("source", source, "")
Condition = tuple[str, str, str]
#: the FAQ side of matching: (metadata, tags, source)
FaqFields = tuple[Mapping[str, str], Sequence[str], str | None]


def fold(text: str) -> str:
    """The form metadata keys, values and tags are compared in."""
    return text.strip().lower()


@dataclass(frozen=True)
class FaqFilter:
    """A parsed filter; each part holds its conditions normalised, de-duplicated and sorted, so two filters
    that differ only in case, whitespace, order or repeats are equal (and have the same `key()`)."""

    all_of: tuple[Condition, ...] = ()
    any_of: tuple[Condition, ...] = ()
    none_of: tuple[Condition, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.all_of or self.any_of or self.none_of)

    def key(self) -> tuple[tuple[Condition, ...], tuple[Condition, ...], tuple[Condition, ...]]:
        """Hashable and the same in every process (plain sorted strings): what results are cached on."""
        return (self.all_of, self.any_of, self.none_of)

    def matches(self, metadata: Mapping[str, str], tags: Sequence[str], source: str | None) -> bool:
        """Whether an FAQ with these fields passes (see the module docstring)."""
        if self.is_empty:
            return True
        # pairs, not a dict: a mapping not from the store may hold two keys equal once folded, and either counts
        pairs = {(fold(k), fold(v)) for k, v in metadata.items()}
        tag_set = {fold(t) for t in tags}
        src = source.strip() if source is not None else None

        def holds(cond: Condition) -> bool:
            kind, name, value = cond
            if kind == "key":
                return (name, value) in pairs
            if kind == "tag":
                return name in tag_set
            return name == src

        return (all(holds(c) for c in self.all_of)
                and (not self.any_of or any(holds(c) for c in self.any_of))
                and not any(holds(c) for c in self.none_of))

    def select(self, faqs: Mapping[str, FaqFields]) -> frozenset[str]:
        """The ids of the FAQs that pass, from faq_id -> (metadata, tags, source)."""
        if self.is_empty:
            return frozenset(faqs)
        return frozenset(faq_id for faq_id, (metadata, tags, source) in faqs.items()
                         if self.matches(metadata, tags, source))


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {list: "a list", tuple: "a list", dict: "an object", bool: "a boolean", int: "a number",
            float: "a number", str: "a string"}.get(type(value), type(value).__name__)


def _shown(key: Any) -> str:
    """An unknown key as a message quotes it: cut short, and never text the message could not carry."""
    if not isinstance(key, str) or text_problem(key) is not None:
        return "?"
    return repr(key if len(key) <= _SHOWN_CHARS else key[:_SHOWN_CHARS] + "...")


def _text(field: str, value: Any, max_chars: int) -> str:
    """A condition's string, trimmed; FilterError when it is not one the grammar accepts."""
    if not isinstance(value, str):
        raise FilterError(field, f"must be a string, got {_type_name(value)}")
    problem = text_problem(value)
    if problem is not None:
        raise FilterError(field, problem)
    value = value.strip()
    if not value:
        raise FilterError(field, "must not be empty")
    if len(value) > max_chars:
        raise FilterError(field, f"must be at most {max_chars} characters, got {len(value)}")
    return value


def _condition(field: str, raw: Any) -> Condition:
    if not isinstance(raw, dict):
        raise FilterError(field, 'a condition must be an object: {"key": K, "value": V}, {"tag": T} or '
                                 f'{{"source": S}}, got {_type_name(raw)}')
    unknown = [k for k in raw if k not in CONDITION_KEYS]
    if unknown:
        raise FilterError(field, f"unknown key(s) {', '.join(_shown(k) for k in unknown)} (a condition has "
                                 "key and value, tag, or source)")
    kinds = [k for k in KINDS if k in raw]
    if not kinds and "value" in raw:
        raise FilterError(f"{field}.key", "is required with value")
    if len(kinds) != 1:
        given = " and ".join(kinds) if kinds else "none of them"
        raise FilterError(field, f"a condition has exactly one of key, tag and source, got {given}")
    kind = kinds[0]
    if kind == "key" and "value" not in raw:
        raise FilterError(f"{field}.value", "is required with key")
    if kind != "key" and "value" in raw:
        raise FilterError(f"{field}.value", f"goes only with key, not with {kind}")
    name = _text(f"{field}.{kind}", raw[kind], KINDS[kind])
    if kind == "key":
        return ("key", fold(name), fold(_text(f"{field}.value", raw["value"], MAX_METADATA_VALUE_CHARS)))
    if kind == "tag":
        return ("tag", fold(name), "")
    return ("source", name, "")


def parse_filter(raw: Any, field: str = "filter") -> FaqFilter:
    """The `FaqFilter` of a client's JSON filter; FilterError (the first problem) when it breaks the grammar.

    `field` is the name paths start with (the request's field)."""
    if not isinstance(raw, dict):
        raise FilterError(field, f'must be an object {{"all": [...], "any": [...], "none": [...]}}, '
                                 f"got {_type_name(raw)}")
    unknown = [k for k in raw if k not in PARTS]
    if unknown:
        raise FilterError(field, f"unknown key(s) {', '.join(_shown(k) for k in unknown)} (a filter has all, any "
                                 "and none)")
    lists: dict[str, list[Any]] = {}
    for part in PARTS:
        if part not in raw:
            continue
        value = raw[part]
        if not isinstance(value, (list, tuple)):
            raise FilterError(f"{field}.{part}", f"must be a list of conditions, got {_type_name(value)}")
        lists[part] = list(value)
    # counted before any condition is read, so a huge list costs nothing
    total = sum(len(v) for v in lists.values())
    if total > MAX_FILTER_CONDITIONS:
        raise FilterError(field, f"at most {MAX_FILTER_CONDITIONS} conditions in all (all, any and none "
                                 f"together), got {total}")
    parsed = {part: tuple(sorted({_condition(f"{field}.{part}[{i}]", c) for i, c in enumerate(conds)}))
              for part, conds in lists.items()}
    return FaqFilter(all_of=parsed.get("all", ()), any_of=parsed.get("any", ()), none_of=parsed.get("none", ()))


@dataclass(frozen=True)
class CombinedFilter:
    """Filters joined by `mode` "and" (every part passes) or "or" (any part does): what a grammar of
    all/any/none cannot say, as Azure's (metadata OR) AND (source OR). Used as a FaqFilter is."""

    parts: tuple[FaqFilter, ...]
    mode: str = "and"

    @property
    def is_empty(self) -> bool:
        return all(p.is_empty for p in self.parts)

    def key(self) -> tuple:
        return ("combined", self.mode, tuple(p.key() for p in self.parts))

    def matches(self, metadata: Mapping[str, str], tags: Sequence[str], source: str | None) -> bool:
        parts = [p for p in self.parts if not p.is_empty]
        if not parts:
            return True
        passed = (p.matches(metadata, tags, source) for p in parts)
        return all(passed) if self.mode == "and" else any(passed)

    def select(self, faqs: Mapping[str, FaqFields]) -> frozenset[str]:
        if self.is_empty:
            return frozenset(faqs)
        return frozenset(faq_id for faq_id, (metadata, tags, source) in faqs.items()
                         if self.matches(metadata, tags, source))
