"""The KB's synonyms applied to queries (kb/synonyms.py), on every arm and every front end (`/match`, the
console, the QnA Maker and Azure routes): `QueryRewrites.for_retriever` gives the rewrite for the KB snapshot
being served, its canonical terms chosen once per snapshot from the snapshot's phrasings and answers."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kb.synonyms import SynonymRewriter


def _unchanged(query: str) -> str:
    return query


class QueryRewrites:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._bound: Callable[[str], str] = _unchanged

    def for_retriever(self, groups: list[list[str]] | None, retriever: Any) -> Callable[[str], str]:
        """The rewrite for `retriever`'s KB with `groups` (the identity without synonyms)."""
        if not groups:
            return _unchanged
        key = (id(retriever), getattr(retriever, "kb_revision", None), tuple(map(tuple, groups)))
        with self._lock:
            if key != self._key:
                texts = list(getattr(retriever, "build_questions", []) or [])
                texts += [q for _, _, q in getattr(retriever, "delta_rows", []) or []]
                texts += [a for a, _ in (getattr(retriever, "answers", None) or {}).values()]
                self._bound, self._key = SynonymRewriter(groups).for_texts(texts), key
            return self._bound
