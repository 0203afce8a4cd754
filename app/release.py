"""Releasing a build: build and verify a new version, let the KB's labels gate it (app/build_gate.py), make it
current and prune to the KB's keep count. `faq index build` and the console's Build now both release through
`release_build`, each with its own labels and its own words for what happened.

Pruning comes after the activation as well as inside the build: the build prunes while the previous build is
still current, and the current one is kept on top of the count, so with keep_versions 1 it would stay until
the next build. The registry deletes what its stores hold of the pruned versions (index/artifacts.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from app.build_gate import MAX_DROP, MIN_LABELS, GateResult, LabelsUnusable, judge

Labels = Sequence[tuple[str, "str | None"]]


@dataclass
class Release:
    """What `release_build` did with the build it made."""

    manifest: dict
    #: how the labels judged it (None: nothing to compare, or they could not be scored)
    verdict: GateResult | None = None
    #: why the labels could not even be read (then the build is kept but not made current)
    labels_problem: str | None = None
    current: bool = False
    pruned: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        return self.manifest["version"]


def release_build(store: Any, encoder: Any, registry: Any, settings: Any, *, labels: Callable[[], Labels],
                  report: Callable[[str], None], activate: bool = True, force: bool = False,
                  min_labels: int = MIN_LABELS, max_drop: float = MAX_DROP,
                  on_built: Callable[[dict], None] | None = None, **build: Any) -> Release:
    """Build a version with `build_index(**build)` (kept: settings.keep_versions), then, when `activate`, gate
    it on `labels()` against the current build and make it current unless they say it matches worse (or
    `force`). `on_built` hears of the verified build's manifest before the labels judge it. Raises what
    `build_index` raises; then `current` is unchanged."""
    from index.build import build_index

    manifest = build_index(store, encoder, registry, keep_versions=settings.keep_versions, activate=False,
                           report=report, languages=settings.languages, **build)
    result = Release(manifest)
    if on_built is not None:
        on_built(manifest)
    if not activate:
        return result
    if registry.current() is not None:
        try:
            result.verdict = judge(settings, encoder, registry, result.version, labels(), min_labels, max_drop)
        except LabelsUnusable as exc:
            result.labels_problem = str(exc)
            return result
        except Exception as exc:  # noqa: BLE001 - e.g. a current build of another encoder: cannot compare
            report(f"labels could not gate this build ({exc}); making it current")
        if result.verdict is not None:
            report(str(result.verdict))
            if not result.verdict.passed and not force:
                return result
    registry.activate(result.version, verify=False)  # verified by the build
    result.current = True
    result.pruned = registry.prune(settings.keep_versions)
    return result
