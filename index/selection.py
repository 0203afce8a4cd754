"""A filter resolved against one retriever: which FAQs, build items and delta rows a filtered query may
be matched with, computed once per (retriever, filter) and kept on the retriever (each KB snapshot makes
a new retriever, so a selection is never stale).

Search inside a selection is exact however small it is (index/retriever.py `search(..., selection=)`):
- a build searched by one matrix product scores only the selected items' rows;
- an Annoy build is asked for more neighbours in proportion to how little of it the filter keeps, and when
  that still leaves too few, the selected items' stored vectors are scored exactly;
- a build searched in Elasticsearch passes the FAQ ids as the kNN `filter`, so the engine searches
  inside it (docs/filters.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: selections kept per retriever (distinct filters in use at once; the oldest is dropped first)
MAX_SELECTIONS = 256


@dataclass(frozen=True)
class Selection:
    """The FAQs a filter keeps, and the rows of the retriever they own."""

    faq_ids: frozenset[str]
    items: np.ndarray  # (n,) int: live build items of those FAQs
    delta_rows: np.ndarray  # (m,) int: delta rows of those FAQs
    key: tuple = field(default=(), compare=False)

    @property
    def size(self) -> int:
        return len(self.items) + len(self.delta_rows)


def faq_fields(retriever: Any) -> dict[str, tuple[dict[str, str], list[str], str | None]]:
    """faq_id -> (metadata, tags, source) of every FAQ the retriever answers, what a filter reads."""
    out = {}
    for faq_id, (_, tags) in retriever.answers.items():
        details = retriever.details.get(faq_id)
        out[faq_id] = (getattr(details, "metadata", None) or {}, list(tags or ()), getattr(details, "source", None))
    return out


def resolve(retriever: Any, flt: Any) -> Selection:
    """`flt` (kb.filters.FaqFilter) against `retriever`, from its cache when this filter was seen."""
    cache: dict = retriever.__dict__.setdefault("_selections", {})
    key = flt.key()
    found = cache.get(key)
    if found is not None:
        return found
    fields = retriever.__dict__.get("_faq_fields")
    if fields is None:
        fields = retriever.__dict__["_faq_fields"] = faq_fields(retriever)
    faq_ids = flt.select(fields)
    names, item_faq = retriever.item_faqs  # each build item's FAQ as a row of `names`
    kept = np.fromiter((f in faq_ids for f in names), dtype=bool, count=len(names))
    items = np.flatnonzero(kept[item_faq] & ~retriever.tombstones) if len(item_faq) else np.zeros(0, np.int64)
    delta = np.asarray([row for row, (_, f, _) in enumerate(retriever.delta_rows) if f in faq_ids], dtype=np.int64)
    selection = Selection(faq_ids, items, delta, key)
    if len(cache) >= MAX_SELECTIONS:
        cache.pop(next(iter(cache)))
    cache[key] = selection
    return selection
