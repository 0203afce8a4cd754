"""The exact query cache: finished results of repeated queries, answered without encoding."""
from __future__ import annotations

import threading
from typing import Any

from models.lru import LRU


def cache_text(query: str) -> str:
    """The cache's view of a query: case and runs of whitespace dropped. Every encoder served lower-cases
    (MiniLM's and mpnet's tokenizers, the GloVe tokenizer) and splits on whitespace, so two texts equal
    here get the same vector."""
    return " ".join(query.split()).lower()


class QueryCache:
    """LRU of finished results (app/pipeline.py `MatchResult`), keyed by the normalised query text, its
    options (arm, top_k, threshold) and the pipeline's scoring options. Chatbot traffic repeats ("opening
    hours?"), and a hit skips the encoder, the search and the re-rankers.

    Invalidation: entries belong to one retriever object. The service replaces its retriever on every
    index swap and every KB change (app/api/state.py), so the first call that sees another retriever
    empties the cache: a result is never served from an older index or KB.
    """

    def __init__(self, size: int):
        self.size = max(0, int(size))
        self._entries: LRU[tuple, Any] = LRU(self.size)
        self._owner: Any = None
        self._lock = threading.Lock()  # the owner check and the lookup are one step
        self.hits = self.misses = self.invalidations = 0

    def _own(self, retriever: Any) -> None:
        if retriever is not self._owner:
            if len(self._entries):
                self.invalidations += 1
            self._entries.clear()
            self._owner = retriever

    def get(self, retriever: Any, key: tuple) -> Any:
        """The result stored under `key` for `retriever`, else None."""
        with self._lock:
            self._own(retriever)
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            return found

    def put(self, retriever: Any, key: tuple, result: Any) -> None:
        if self.size == 0:
            return
        with self._lock:
            self._own(retriever)
            self._entries.put(key, result)

    def __len__(self) -> int:
        return len(self._entries)
