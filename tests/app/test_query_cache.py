"""app/match/cache.py's QueryCache on its own: which texts are one entry, what is counted, and that a new served build
(a swap, a KB change) never answers from an older one's entries. tests/app/test_pipeline.py covers the cache
as the pipeline uses it (no encoding on a repeat)."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from app.match.cache import QueryCache, cache_text
from app.match.served import OpenBuilds, ServedBuild

KEY = (cache_text("How long is delivery?"), "ann", 3, 0.5)


def served(version: str = "v1", size: int = 8) -> ServedBuild:
    """A build as one pipeline serves it; the cache only ever touches its `results`."""
    return ServedBuild(SimpleNamespace(build_dir=f"/indexes/{version}", version=version), OpenBuilds(), size)


def test_texts_differing_only_in_case_and_spacing_are_one_entry():
    assert cache_text("  How LONG is\tdelivery?\n") == cache_text("how long is delivery?") == "how long is delivery?"
    # punctuation and inner words are the encoder's business: other texts, other entries
    assert cache_text("how long is delivery") != cache_text("how long is delivery?")
    assert cache_text("Straße") != cache_text("strasse")


def test_a_miss_then_a_hit_are_counted():
    cache, build = QueryCache(8), served()
    assert cache.get(build, KEY) is None
    cache.put(build, KEY, "result")
    assert cache.get(build, KEY) == "result" and cache.get(build, KEY[:-1] + (0.9,)) is None  # other options
    assert (cache.hits, cache.misses, cache.invalidations, len(cache)) == (1, 2, 0, 1)


def test_a_new_served_build_answers_nothing_from_the_old_one():
    cache, old, new = QueryCache(8), served("v1"), served("v2")
    cache.put(old, KEY, "old result")
    assert cache.get(new, KEY) is None
    assert cache.invalidations == 1 and len(cache) == 0  # the length is the served build's
    cache.put(new, KEY, "new result")
    assert cache.get(new, KEY) == "new result"
    # a request still pinned to the old build finds its entry; going back and forth counts each change
    assert cache.get(old, KEY) == "old result" and cache.invalidations == 2


def test_leaving_a_build_with_no_entries_is_no_invalidation():
    cache = QueryCache(8)
    assert cache.get(served("v1"), KEY) is None  # nothing stored in v1
    assert cache.get(served("v2"), KEY) is None
    assert cache.invalidations == 0 and cache.misses == 2


def test_a_cache_of_size_zero_stores_nothing():
    build = served(size=8)  # even where the build could hold entries
    for size in (0, -5):
        cache = QueryCache(size)
        assert cache.size == 0
        cache.put(build, KEY, "result")
        assert cache.get(build, KEY) is None and len(build.results) == 0 and cache.misses == 1


def test_the_entries_are_bounded_by_the_served_builds_size():
    cache, build = QueryCache(2), served(size=2)
    for i in range(3):
        cache.put(build, (f"q{i}",), i)
    assert len(cache) == 2 and cache.get(build, ("q0",)) is None and cache.get(build, ("q2",)) == 2


def test_clear_empties_the_entries_and_the_counters():
    cache, build = QueryCache(8), served()
    cache.put(build, KEY, "result")
    cache.get(served("v2"), KEY)
    assert cache.get(build, KEY) == "result"
    assert (cache.hits, cache.misses, cache.invalidations) == (1, 1, 1)
    cache.clear()
    assert (cache.hits, cache.misses, cache.invalidations, len(cache)) == (0, 0, 0, 0)
    assert cache.get(build, KEY) is None and len(build.results) == 0  # a benchmark starts from nothing
    QueryCache(8).clear()  # nothing looked up yet: nothing to clear


def test_counters_stay_exact_under_concurrent_lookups():
    """Worker threads look up at once (app/api/workers.py): no hit or miss may be lost."""
    cache, build = QueryCache(8), served()
    cache.put(build, KEY, "result")
    start = threading.Barrier(8)

    def lookups():
        start.wait(5)
        for i in range(250):
            cache.get(build, KEY if i % 2 else ("other",))

    threads = [threading.Thread(target=lookups) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert (cache.hits, cache.misses) == (1000, 1000)
