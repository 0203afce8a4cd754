"""app/match/served.py on its own: a build's files are opened once and shared by every retriever of that
build, only the served build and the one before it stay open, and a `ServedBuild` opens nothing until a
request needs a file."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from app.match.served import BuildFiles, OpenBuilds, ServedBuild


class Index:
    """A lexical index as BuildFiles holds it: only `close` is called on it."""

    def __init__(self, build: str):
        self.build, self.closed = build, 0

    def close(self) -> None:
        self.closed += 1


class Opener:
    """`open_index` for BuildFiles.lexical, remembering what it opened."""

    def __init__(self):
        self.opened: list[Index] = []

    def __call__(self, retriever) -> Index:
        index = Index(str(retriever.build_dir))
        self.opened.append(index)
        return index


class StoredVectorsStage:
    """A stage that reads the build's stored vectors: `on_build` gives the stage bound to one build."""

    def __init__(self):
        self.bound: list[SimpleNamespace] = []

    def on_build(self, retriever):
        bound = SimpleNamespace(stage=self, retriever=retriever)
        self.bound.append(bound)
        return bound


def retriever(build: str, revision: int = 1) -> SimpleNamespace:
    """A served retriever: a build folder with one KB revision applied (a KB refresh keeps the folder)."""
    return SimpleNamespace(build_dir=f"/indexes/{build}", version=build, kb_revision=revision)


def test_the_lexical_index_is_opened_once_however_many_requests_race_for_it():
    files, opener = BuildFiles("/indexes/v1"), Opener()
    start = threading.Barrier(8)
    got: list[Index] = []

    def request():
        start.wait(5)
        got.append(files.lexical(retriever("v1"), opener))

    threads = [threading.Thread(target=request) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(opener.opened) == 1 and got == opener.opened * 8


def test_a_stage_is_bound_to_the_build_once_and_a_plain_stage_is_used_as_it_is():
    files, stored, plain = BuildFiles("/indexes/v1"), StoredVectorsStage(), object()
    r = retriever("v1")
    bound = files.stage(stored, r)
    assert bound.stage is stored and bound.retriever is r
    assert files.stage(stored, r) is bound and len(stored.bound) == 1
    assert files.stage(plain, r) is plain
    other = StoredVectorsStage()  # another configured stage (new settings): bound on its own
    assert files.stage(other, r) is not bound and len(other.bound) == 1


def test_closing_build_files_closes_the_index_once_and_forgets_the_bound_stages():
    files, opener, stage = BuildFiles("/indexes/v1"), Opener(), StoredVectorsStage()
    r = retriever("v1")
    index = files.lexical(r, opener)
    files.stage(stage, r)
    files.close()
    files.close()
    assert index.closed == 1
    # used again after closing (a request pinned to it): opened and bound anew, not the closed objects
    assert files.lexical(r, opener) is not index and len(opener.opened) == 2
    files.stage(stage, r)
    assert len(stage.bound) == 2
    BuildFiles("/indexes/never-opened").close()  # nothing opened: nothing to close


def test_a_kb_refresh_of_the_same_build_shares_its_open_files():
    builds, opener = OpenBuilds(), Opener()
    before, after = retriever("v1", revision=1), retriever("v1", revision=2)
    first, second = ServedBuild(before, builds), ServedBuild(after, builds)
    assert first.files is second.files
    assert first.files.lexical(before, opener) is second.files.lexical(after, opener) and len(opener.opened) == 1
    # what the decider and the cache keep is per retriever, though: a refresh starts them empty
    assert first.decisions is not second.decisions and first.results is not second.results


def test_a_build_is_known_by_its_folder_else_its_version():
    builds = OpenBuilds()
    by_folder = builds.files(retriever("v1"))
    assert by_folder.build == "/indexes/v1"
    assert builds.files(SimpleNamespace(build_dir=None, version="v9")).build == "v9"
    assert builds.files(SimpleNamespace(build_dir="/indexes/v1", version="other")) is by_folder


def test_only_the_served_build_and_the_one_before_it_stay_open():
    builds, opener = OpenBuilds(), Opener()
    v1, v2, v3 = retriever("v1"), retriever("v2"), retriever("v3")
    i1, i2 = builds.files(v1).lexical(v1, opener), builds.files(v2).lexical(v2, opener)
    assert builds.files(v1).lexical(v1, opener) is i1  # v1 served again: now the most recent
    i3 = builds.files(v3).lexical(v3, opener)
    assert (i1.closed, i2.closed, i3.closed) == (0, 1, 0), "v2 was the least recently served"
    builds.close()
    assert (i1.closed, i2.closed, i3.closed) == (1, 1, 1)


def test_a_served_build_opens_nothing_until_a_request_needs_a_file():
    """A repeat answered from the cache uses `results` only: swaps meanwhile must not close what a
    request still reads, and answering from the cache must not open or close anything."""
    builds, opener = OpenBuilds(), Opener()
    v1 = retriever("v1")
    served_v1 = ServedBuild(v1, builds, cache_size=4)
    index = served_v1.files.lexical(v1, opener)
    for build in ("v2", "v3", "v4"):  # swaps whose requests were all answered from the cache
        served = ServedBuild(retriever(build), builds, cache_size=4)
        served.results.put(("q",), "result")
        assert served.results.get(("q",)) == "result"
    assert index.closed == 0 and len(opener.opened) == 1
    # the first file access of two other builds: v1 is now older than the served one and the one before it
    assert [ServedBuild(retriever(b), builds).files.build for b in ("v5", "v6")] == ["/indexes/v5", "/indexes/v6"]
    assert index.closed == 1


def test_a_served_build_binds_stages_to_its_own_retriever_and_bounds_its_results():
    builds, stage = OpenBuilds(), StoredVectorsStage()
    r = retriever("v1")
    served = ServedBuild(r, builds, cache_size=2)
    assert served.stage(stage).retriever is r and served.stage(stage) is served.stage(stage)
    for i in range(3):
        served.results.put((f"q{i}",), i)
    assert len(served.results) == 2 and served.results.get(("q0",)) is None  # the least recently used went
    uncached = ServedBuild(r, builds, cache_size=-3)  # a negative size is no cache
    uncached.results.put(("q0",), 0)
    assert uncached.results.get(("q0",)) is None and len(uncached.results) == 0
