"""One bounded least-recently-used map for every cache of texts, vectors or results.

Served caches sit on the request path of one process and are read by worker threads, so every call
takes the map's lock; a size of 0 keeps nothing (the cache is off), which callers use as the switch.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most `size` entries; `get` refreshes an entry, `put` evicts the least recently used."""

    def __init__(self, size: int):
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        self.size = int(size)
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            if key not in self._entries:
                return default
            self._entries.move_to_end(key)
            return self._entries[key]

    def put(self, key: K, value: V) -> None:
        if self.size == 0:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value, else `compute()` stored under `key` (computed outside the lock)."""
        found = self.get(key, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        value = compute()
        self.put(key, value)
        return value

    def pop(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            return self._entries.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        with self._lock:
            return iter(list(self._entries))


_MISSING = object()
