"""app/release/ on its own: a release builds and verifies a version, lets the labels gate it against the
current build, makes it current and prunes; `faq index build` and the console's Build now are its callers.
Real builds (MiniLM, the API tests' 8-FAQ KB, no lexical index) on a copy of one first release."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from app.release.gate import LabelsUnusable
from app.release import release_build
from app.store import FaqStore
from index.artifacts import BuildRegistry
from index.build import BuildError
from tests.helpers.api import make_settings, make_store

#: labelled queries the API tests' KB answers right (top-1 1.0 on its build)
LABELS = [("I want my money back", "refund"), ("how do I get a refund", "refund"),
          ("what is your refund policy", "refund"), ("I forgot my password", "reset_password"),
          ("when will my package arrive", "shipping_time")]


class Caller:
    """What a caller of release_build hands it (labels, report, on_built), recording what it was told."""

    def __init__(self, registry: BuildRegistry, labels=LABELS):
        self.registry, self._labels = registry, labels
        self.said: list[str] = []
        self.built: list[tuple[str, str | None]] = []  # (the build heard of, what was current then)
        self.asked = 0

    def labels(self):
        self.asked += 1
        if isinstance(self._labels, Exception):
            raise self._labels
        return self._labels

    def release(self, store, encoder, settings, **kw):
        kw.setdefault("min_labels", 1)  # the gate judges with the few labels above
        return release_build(store, encoder, self.registry, settings, labels=self.labels, report=self.said.append,
                             on_built=lambda m: self.built.append((m["version"], self.registry.current())),
                             n_trees=5, lexical=False, **kw)


@pytest.fixture(scope="module")
def first(tmp_path_factory, encoder):  # noqa: F811
    """The KB's first release: (its data folder, the result, its caller)."""
    data = tmp_path_factory.mktemp("release")
    settings = make_settings(data)
    store = make_store(settings)
    caller = Caller(BuildRegistry(settings.index_dir))
    result = caller.release(store, encoder, settings)
    store.close()
    return data, result, caller


@pytest.fixture
def released(first, tmp_path):
    """A copy of the first release's data folder: (settings, store, registry, the current version)."""
    data = tmp_path / "data"
    shutil.copytree(first[0], data, symlinks=True)  # `current` is a link: copied as a link
    settings = make_settings(data)
    with FaqStore.from_settings(settings) as store:
        yield settings, store, BuildRegistry(settings.index_dir), first[1].version


def test_the_first_release_is_made_current_without_asking_the_labels(first):
    data, result, caller = first
    registry = BuildRegistry(make_settings(data).index_dir)
    assert result.current and registry.current() == result.version == result.manifest["version"]
    assert result.verdict is None and result.labels_problem is None and result.pruned == []
    assert caller.asked == 0, "nothing to compare with: the labels are not read"
    assert caller.built == [(result.version, None)], "on_built hears of the verified build before it is current"
    assert any(line.startswith("verified: self-recall@10") for line in caller.said)


def test_a_release_without_activation_keeps_the_build_beside_the_current_one(released, encoder):  # noqa: F811
    settings, store, registry, current = released
    caller = Caller(registry)
    result = caller.release(store, encoder, settings, activate=False)
    assert not result.current and registry.current() == current
    assert registry.versions() == sorted([current, result.version])
    assert caller.asked == 0 and result.verdict is None and caller.built == [(result.version, current)]


@pytest.mark.parametrize("force", [False, True])
def test_a_build_the_labels_find_worse_is_held_back_unless_forced(released, encoder, force):  # noqa: F811
    settings, store, registry, current = released
    # the refund FAQ now reads like another question entirely: the labels asking for refunds miss it
    store.update_faq("refund", answer="Our stores are in Lyon and Paris.", questions=["Where are your shops?"])
    caller = Caller(registry)
    result = caller.release(store, encoder, settings, force=force)
    verdict = result.verdict
    assert verdict is not None and not verdict.passed
    assert (verdict.current, verdict.version, verdict.n_labels) == (current, result.version, len(LABELS))
    assert verdict.before == 1.0 and verdict.after <= 0.4
    assert str(verdict) in caller.said and caller.asked == 1
    assert result.current is force
    assert registry.current() == (result.version if force else current)
    assert result.version in registry.versions(), "held back, the build is kept (it can be activated by hand)"


def test_a_build_the_labels_do_not_find_worse_is_made_current_and_the_old_ones_pruned(released, encoder):  # noqa: F811
    settings, store, registry, current = released
    store.create_faq("pets", "Dogs on a leash are welcome.", ["Can I bring my dog?"])
    caller = Caller(registry)
    result = caller.release(store, encoder, settings.model_copy(update={"keep_versions": 1}))
    assert result.verdict is not None and result.verdict.passed and result.verdict.after == 1.0
    assert result.current and registry.current() == result.version
    # the build itself kept the then-current version on top of the count; the release prunes it after the switch
    assert result.pruned == [current] and registry.versions() == [result.version]


def test_labels_that_cannot_be_read_keep_the_build_but_do_not_make_it_current(released, encoder):  # noqa: F811
    settings, store, registry, current = released
    caller = Caller(registry, LabelsUnusable("--dev dev.jsonl: 2 faq_id(s) not in the KB, e.g. gone"))
    result = caller.release(store, encoder, settings)
    assert result.labels_problem == "--dev dev.jsonl: 2 faq_id(s) not in the KB, e.g. gone"
    assert not result.current and result.verdict is None and result.pruned == []
    assert registry.current() == current and result.version in registry.versions()


def test_labels_that_cannot_score_the_build_do_not_stop_it(released, encoder):  # noqa: F811
    """E.g. a current build of another encoder: nothing to compare, so the new build is made current."""
    settings, store, registry, current = released
    caller = Caller(registry, RuntimeError("the current build was made by another encoder"))
    result = caller.release(store, encoder, settings)
    assert result.current and registry.current() == result.version != current
    assert result.verdict is None and result.labels_problem is None
    assert ("labels could not gate this build (the current build was made by another encoder); making it current"
            in caller.said)


class NanEncoder:
    """The real encoder's id and size, but vectors a build must refuse."""

    def __init__(self, inner):
        self.id, self.dim = inner.id, inner.dim

    def encode(self, texts, batch_size=64, show_progress_bar=False):
        return np.full((len(texts), self.dim), np.nan, dtype=np.float32)


def test_a_failed_build_leaves_the_current_one_and_tells_no_one(released, encoder):  # noqa: F811
    settings, store, registry, current = released
    caller = Caller(registry)
    with pytest.raises(BuildError, match="NaN"):
        caller.release(store, NanEncoder(encoder), settings)
    with pytest.raises(BuildError, match="n_trees"):
        release_build(store, encoder, registry, settings, labels=caller.labels, report=caller.said.append, n_trees=0)
    assert registry.current() == current and registry.versions() == [current]
    assert caller.built == [] and caller.asked == 0
