"""Releasing a build, the one place a version becomes current or is pruned: build and verify it (index/build.py
`build_index`, which never activates), let the KB's labels gate it (app/release/gate.py), make it current and
prune to the KB's keep count. `faq index build` and the console's Build now both release through
`release_build`, each with its own labels and its own words for what happened; `faq index activate` and the
console's rollback through `activate`; scratch KBs (evaluations, benchmarks, tests) through `build_current`.

Pruning comes after the build as well as after the activation: the first prunes while the previous build is
still current, and the current one is kept on top of the count, so with keep_versions 1 it would stay until
the next build. The registry deletes what its stores hold of the pruned versions (index/artifacts.py).

Each build made leaves one `index.build` audit row (app/store/audit.py), saying whether it became current (its own
activation is part of it, not a row of its own); each `activate_version` given the KB's store one `index.activate`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from app.release.gate import MAX_DROP, MIN_LABELS, GateResult, LabelsUnusable, judge

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

    previous = registry.current()
    manifest = build_index(store, encoder, registry, report=report, languages=settings.languages, **build)
    prune(registry, settings.keep_versions, report)
    result = Release(manifest)
    try:
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
        result.pruned = activate_version(registry, result.version, keep_versions=settings.keep_versions, verify=False)
        result.current = True
        return result
    finally:  # the build exists whatever happened after it was made
        record_build(store, manifest, previous, result.current, result)


def activate_version(registry: Any, version: str, *, keep_versions: int | None = None, verify: bool = True,
                     store: Any = None) -> list[str]:
    """Make `version` current (`verify`: its files checked first; a build just verified need not be), then prune
    to `keep_versions` (None: keep all); returns the versions pruned. Raises what `registry.activate` raises
    (an unknown or broken version), and then `current` is unchanged. With the KB's `store`, the activation is
    recorded (`index.activate`, the version current before and after)."""
    previous = registry.current() if store is not None else None
    registry.activate(version, verify=verify)
    if store is not None:
        store.audit.record("index.activate", version, {"version": previous}, {"version": version})
    return registry.prune(keep_versions) if keep_versions is not None else []


def record_build(store: Any, manifest: dict, previous: str | None, current: bool, release: Release | None = None) -> None:
    """The `index.build` audit row of a build made: the version current before and after (the build's own when it
    was made current), and what the build holds."""
    version = manifest["version"]
    after = {"current": version if current else previous, "version": version, "made_current": current,
             "encoder_id": manifest.get("encoder_id"), "n_faqs": manifest.get("n_faqs"),
             "n_variants": manifest.get("n_variants"), "kb_revision": manifest.get("kb_revision")}
    if release is not None:
        after["pruned"] = list(release.pruned)
        if release.labels_problem is not None:
            after["labels_problem"] = release.labels_problem
        if release.verdict is not None:
            after["labels"] = {"n": release.verdict.n_labels, "top1_before": release.verdict.before,
                               "top1_after": release.verdict.after}
    store.audit.record("index.build", version, {"current": previous}, after)


def prune(registry: Any, keep_versions: int | None, report: Callable[[str], None] | None = None) -> list[str]:
    """Delete all but the newest `keep_versions` versions (the current one kept on top); None: keep all."""
    pruned = registry.prune(keep_versions) if keep_versions is not None else []
    if pruned and report is not None:
        report(f"pruned old versions: {', '.join(pruned)}")
    return pruned


def build_current(store: Any, encoder: Any, registry: Any, n_trees: int, *, keep_versions: int | None = None,
                  report: Callable[[str], None] | None = None, **build: Any) -> dict:
    """A scratch KB's build made current at once, with no labels to gate it (evaluations, benchmarks, tests):
    `build_index(**build)`, then activated and pruned. Returns the manifest."""
    from index.build import build_index

    previous = registry.current()
    manifest = build_index(store, encoder, registry, n_trees, report=report, **build)
    registry.activate(manifest["version"], verify=False)  # verified by the build
    record_build(store, manifest, previous, True)
    prune(registry, keep_versions, report)
    return manifest
