import threading

import pytest

from models.lru import LRU


def test_evicts_least_recently_used():
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def test_size_zero_keeps_nothing_and_negative_is_refused():
    cache: LRU[str, int] = LRU(0)
    cache.put("a", 1)
    assert cache.get("a") is None and len(cache) == 0
    with pytest.raises(ValueError, match="size"):
        LRU(-1)


def test_get_or_compute_computes_once():
    calls = []
    cache: LRU[str, int] = LRU(4)
    for _ in range(3):
        assert cache.get_or_compute("k", lambda: calls.append(1) or 7) == 7
    assert calls == [1]


def test_threads_never_grow_it_past_its_size():
    cache: LRU[int, int] = LRU(16)

    def work(offset: int) -> None:
        for i in range(2000):
            cache.put(offset + i, i)
            cache.get(offset + i // 2)

    threads = [threading.Thread(target=work, args=(k * 10_000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 16
