"""The exact query cache: finished results of repeated queries, answered without encoding."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.served_build import ServedBuild


def cache_text(query: str) -> str:
    """The cache's view of a query: case and runs of whitespace dropped. Every encoder served lower-cases
    (MiniLM's and mpnet's tokenizers, the GloVe tokenizer) and splits on whitespace, so two texts equal
    here get the same vector."""
    return " ".join(query.split()).lower()


class QueryCache:
    """A pipeline's exact query cache: finished results (app/pipeline.py `MatchResult`), keyed by the
    normalised query text, its options (arm, top_k, threshold) and the pipeline's scoring options. Chatbot
    traffic repeats ("opening hours?"), and a hit skips the encoder, the search and the stages.

    The entries are the served build's (app/served_build.py `ServedBuild.results`): every index swap and
    every KB change serves another retriever, hence another `ServedBuild` with no entries, so a result is
    never served from an older index or KB. This object holds the size and the counters across builds.
    """

    def __init__(self, size: int):
        self.size = max(0, int(size))
        self._last: ServedBuild | None = None  # the build the last lookup was for: `len` and the counters
        self._lock = threading.Lock()
        self.hits = self.misses = self.invalidations = 0

    def _seen(self, served: ServedBuild) -> None:
        with self._lock:
            last = self._last
            if served is not last:
                if last is not None and len(last.results):
                    self.invalidations += 1
                self._last = served

    def get(self, served: ServedBuild, key: tuple) -> Any:
        """The result stored under `key` for `served`, else None."""
        self._seen(served)
        found = served.results.get(key)
        with self._lock:
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
        return found

    def put(self, served: ServedBuild, key: tuple, result: Any) -> None:
        if self.size == 0:
            return
        self._seen(served)
        served.results.put(key, result)

    def clear(self) -> None:
        """Empty the entries and the counters (a benchmark's clean start)."""
        with self._lock:
            last, self._last = self._last, None
            self.hits = self.misses = self.invalidations = 0
        if last is not None:
            last.results.clear()

    def __len__(self) -> int:
        last = self._last
        return len(last.results) if last is not None else 0
