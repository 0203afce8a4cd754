"""What a pipeline computes from one served build, on one object: `ServedBuild`.

A `ServedBuild` belongs to one retriever (a build version with one KB revision applied) and one pipeline.
It holds the query cache's results, the decider's per-build references, tables and FAQ word sets, and
the build's files opened for the stages and the lexical arms (`BuildFiles`). Nothing in it is ever
invalidated: a swap, a KB refresh or new settings give the next request another retriever or pipeline,
hence a new `ServedBuild` (app/match/pipeline.py `Pipeline.served`), and the old one goes with its last request.

`BuildFiles` are a build version's, not a KB revision's: a KB refresh keeps serving the build's lexical
index and stored stage vectors, so the `ServedBuild` made for it shares them. `OpenBuilds` keeps the
files of the served version and of the one before it (requests pinned to the previous retriever may
still read them) and closes older ones.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from app.match.decider import BuildDecisions
from models.lru import LRU

__all__ = ["BuildFiles", "OpenBuilds", "ServedBuild"]


class BuildFiles:
    """One build version's files opened for serving: its lexical index and its stages as they read it."""

    def __init__(self, build: str):
        self.build = build
        self._lexical: Any = None
        self._stages: list[tuple[Any, Any]] = []  # (configured stage, the stage reading this build)
        self._lock = threading.Lock()  # one opening per file

    def lexical(self, retriever: Any, open_index: Callable[[Any], Any]) -> Any:
        """The build's LexicalIndex, opened by `open_index(retriever)` on first use."""
        index = self._lexical
        if index is not None:
            return index
        with self._lock:
            if self._lexical is None:
                self._lexical = open_index(retriever)
            return self._lexical

    def stage(self, stage: Any, retriever: Any) -> Any:
        """`stage` as it scores this build: a stage with `on_build` reads the build's stored vectors."""
        with self._lock:
            for configured, bound in self._stages:
                if configured is stage:
                    return bound
        on_build = getattr(stage, "on_build", None)
        bound = on_build(retriever) if on_build is not None else stage
        with self._lock:
            self._stages.append((stage, bound))
        return bound

    def close(self) -> None:
        with self._lock:
            index, self._lexical = self._lexical, None
            self._stages.clear()
        if index is not None:
            index.close()


class OpenBuilds:
    """The build versions a KB (or a pipeline of its own) has open: the served one and the one before it."""

    KEPT = 2

    def __init__(self) -> None:
        self._files: list[BuildFiles] = []  # least recently served first
        self._lock = threading.Lock()

    def files(self, retriever: Any) -> BuildFiles:
        build = str(getattr(retriever, "build_dir", "") or getattr(retriever, "version", ""))
        closing: list[BuildFiles] = []
        with self._lock:
            found = next((f for f in self._files if f.build == build), None)
            if found is None:
                found = BuildFiles(build)
            else:
                self._files.remove(found)
            self._files.append(found)
            while len(self._files) > self.KEPT:
                closing.append(self._files.pop(0))
        for files in closing:
            files.close()
        return found

    def close(self) -> None:
        with self._lock:
            closing, self._files = self._files, []
        for files in closing:
            files.close()


class ServedBuild:
    """A pipeline's results and per-build state for one retriever (see the module docstring)."""

    def __init__(self, retriever: Any, builds: OpenBuilds, cache_size: int = 0):
        self.retriever = retriever
        self._builds = builds
        self._files: BuildFiles | None = None
        self.results: LRU[tuple, Any] = LRU(max(0, int(cache_size)))  # the query cache's entries
        self.decisions = BuildDecisions(retriever)
        self.pure_stage: Any = None  # `Pipeline.stacked_rerank`'s stage at weight 1

    @property
    def files(self) -> BuildFiles:
        """The build's open files, looked up on first use: a repeat answered from `results` (on the event
        loop, app/api/workers.py) never opens or closes a file."""
        files = self._files
        if files is None:
            files = self._files = self._builds.files(self.retriever)
        return files

    def stage(self, stage: Any) -> Any:
        return self.files.stage(stage, self.retriever)
