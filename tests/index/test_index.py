"""Unit tests of index/ann.py, index/artifacts.py (registry, atomic switch, prune, verification)
and index/calibration.py. Random unit vectors stand in for sentence vectors where only geometry matters."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from index import artifacts
from index.ann import AnnIndex, exact_search, self_recall_at_k
from index.artifacts import BuildRegistry, IndexVerificationError, UnknownVersion, new_version, sha256_file
from index.calibration import (
    DEFAULT_A, DEFAULT_B, Calibration, calibrate, fit_platt, prior_calibration, sigmoid,
)


def unit_vectors(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# --- AnnIndex -------------------------------------------------------------------------------------

def test_ann_search_matches_exact_and_roundtrips_through_disk(tmp_path):
    vecs = unit_vectors(200)
    built = AnnIndex.build(vecs, n_trees=10)
    built.save(tmp_path / "a.ann")
    index = AnnIndex.load(tmp_path / "a.ann", dim=32)
    assert index.n_items == 200 and index.n_trees == 10
    ids, cos = index.search(vecs[:5], k=3, search_k=100_000)  # inspect everything: exact
    exact_ids, exact_cos = exact_search(vecs[:5], vecs, 3)
    assert ids.dtype == np.int64 and cos.dtype == np.float32 and ids.shape == (5, 3)
    np.testing.assert_array_equal(ids[:, 0], np.arange(5))  # each vector finds itself first
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_allclose(cos, exact_cos, atol=1e-5)  # cos = 1 - d^2/2 recovers the dot product


def test_ann_pads_when_k_exceeds_items_and_rejects_bad_input(tmp_path):
    index = AnnIndex.build(unit_vectors(3), n_trees=2)
    ids, cos = index.search(unit_vectors(1), k=5)
    assert ids[0, 3:].tolist() == [-1, -1] and np.isneginf(cos[0, 3:]).all()
    with pytest.raises(ValueError, match=r"expected shape \(n, 32\)"):
        index.search(np.zeros((1, 7)), k=1)
    with pytest.raises(ValueError, match="n_trees"):
        AnnIndex.build(unit_vectors(3), n_trees=0)
    with pytest.raises(ValueError, match="NaN"):
        AnnIndex.build(np.full((2, 4), np.nan), n_trees=1)
    with pytest.raises(FileNotFoundError):
        AnnIndex.load(tmp_path / "missing.ann", dim=32)


def test_self_recall_detects_a_weak_forest():
    vecs = unit_vectors(3000, dim=64, seed=1)
    weak = AnnIndex.build(vecs, n_trees=1)
    assert self_recall_at_k(weak, vecs, k=10, search_k=10, sample=200) < 0.6
    strong = AnnIndex.build(vecs, n_trees=10)
    assert self_recall_at_k(strong, vecs, k=10, search_k=100_000, sample=200) == pytest.approx(1.0)


# --- BuildRegistry --------------------------------------------------------------------------------

def make_version(registry: BuildRegistry, n: int = 50, seed: int = 0, version: str | None = None) -> str:
    """Write a complete build folder the way build_index does (staging, then commit)."""
    version = version or new_version()
    vecs = unit_vectors(n, seed=seed)
    staging = registry.create_staging(version)
    index = AnnIndex.build(vecs, n_trees=5)
    index.save(staging / artifacts.ANNOY_FILE)
    np.save(staging / artifacts.IDS_FILE, np.arange(100, 100 + n, dtype=np.int64))
    np.save(staging / artifacts.VECTORS_FILE, vecs.astype(np.float16))
    with open(staging / artifacts.IDMAP_FILE, "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"variant_id": 100 + i, "faq_id": f"f{i // 2}", "question": f"q{i}"}) + "\n")
    manifest = {
        "version": version, "encoder_id": "test-vectors", "dim": 32, "n_faqs": n // 2, "n_variants": n,
        "kb_revision": 1, "checksum": sha256_file(staging / artifacts.ANNOY_FILE), "n_trees": 5, "search_k": -1,
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    artifacts.write_json_atomic(staging / artifacts.MANIFEST_FILE, manifest)
    registry.commit(staging, version)
    return version


def test_version_names_sort_by_time_and_are_unique():
    from datetime import datetime, timezone

    early = new_version(datetime(2026, 11, 22, 1, 2, 3, tzinfo=timezone.utc))
    late = new_version(datetime(2026, 11, 22, 1, 2, 4, tzinfo=timezone.utc))
    assert early.startswith("20261122T010203Z-") and artifacts.VERSION_RE.match(early)
    assert sorted([late, early]) == [early, late]
    assert len({new_version() for _ in range(50)}) == 50


def test_registry_versions_sort_in_creation_order_within_one_second(tmp_path):
    from datetime import datetime, timezone

    registry = BuildRegistry(tmp_path)
    now = datetime(2026, 11, 22, 1, 2, 3, tzinfo=timezone.utc)
    names = []
    for _ in range(5):
        names.append(registry.new_version(now))
        registry.create_staging(names[-1])
    assert sorted(names) == names and len(set(names)) == 5


def test_registry_activate_switches_current_atomically(tmp_path):
    registry = BuildRegistry(tmp_path / "idx")
    assert registry.current() is None and registry.versions() == []
    v1 = make_version(registry, version="20260101T000000Z-aaaaaa")
    v2 = make_version(registry, seed=1, version="20260102T000000Z-bbbbbb")
    registry.activate(v2)
    link = tmp_path / "idx" / "current"
    assert link.is_symlink() and os.readlink(link) == v2  # relative target: the folder can move
    assert registry.current() == v2
    registry.activate(v1)  # rollback
    assert registry.current() == v1
    assert [m["current"] for m in registry.list()] == [True, False]
    # no temp links are left behind
    assert sorted(p.name for p in (tmp_path / "idx").iterdir() if p.name.startswith(".current")) == []


def test_registry_ignores_staging_and_incomplete_folders(tmp_path):
    registry = BuildRegistry(tmp_path)
    v1 = make_version(registry)
    registry.create_staging(new_version())  # an interrupted build
    (tmp_path / "20260101T000000Z-cccccc").mkdir()  # a folder without manifest
    assert registry.versions() == [v1]
    with pytest.raises(IndexVerificationError, match="incomplete"):
        registry.commit(registry.create_staging("20260101T000001Z-dddddd"), "20260101T000001Z-dddddd")
    with pytest.raises(UnknownVersion):
        registry.activate("20260101T000000Z-cccccc")
    with pytest.raises(UnknownVersion, match="not a version name"):
        registry.read_manifest("../etc")


def test_prune_keeps_newest_and_always_the_current(tmp_path):
    registry = BuildRegistry(tmp_path)
    versions = [make_version(registry, seed=i, version=f"2026010{i + 1}T000000Z-00000{i}") for i in range(4)]
    registry.activate(versions[0])  # rolled back to the oldest
    deleted = registry.prune(keep=2)
    assert deleted == [versions[1]]
    assert registry.versions() == [versions[0], versions[2], versions[3]]
    assert registry.current() == versions[0]
    with pytest.raises(ValueError, match="keep_versions"):
        registry.prune(keep=0)


def test_verify_and_activate_refuse_a_corrupted_index(tmp_path):
    registry = BuildRegistry(tmp_path)
    good = make_version(registry, version="20260101T000000Z-000001")
    bad = make_version(registry, version="20260102T000000Z-000002")
    registry.activate(good)
    report = registry.verify(good)
    assert report.ok and report.checksum_ok and report.self_recall_at_10 > 0.9
    with open(tmp_path / bad / artifacts.ANNOY_FILE, "r+b") as fh:  # flip a byte
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    report = registry.verify(bad)
    assert not report.ok and "sha256" in report.errors[0]
    with pytest.raises(IndexVerificationError, match="sha256"):
        registry.activate(bad)
    assert registry.current() == good


def test_verify_reports_recall_below_floor(tmp_path):
    registry = BuildRegistry(tmp_path)
    version = new_version()
    vecs = unit_vectors(3000, dim=64, seed=2)
    staging = registry.create_staging(version)
    AnnIndex.build(vecs, n_trees=1).save(staging / artifacts.ANNOY_FILE)
    np.save(staging / artifacts.IDS_FILE, np.arange(3000, dtype=np.int64))
    np.save(staging / artifacts.VECTORS_FILE, vecs.astype(np.float16))
    (staging / artifacts.IDMAP_FILE).write_text("")
    artifacts.write_json_atomic(staging / artifacts.MANIFEST_FILE, {
        "version": version, "dim": 64, "n_variants": 3000, "n_trees": 1, "search_k": 10,
        "checksum": sha256_file(staging / artifacts.ANNOY_FILE),
    })
    report = artifacts.verify_build_dir(staging, sample=200, recall_floor=0.9)
    assert not report.ok and report.checksum_ok
    assert report.self_recall_at_10 < 0.9 and "below the floor 0.9" in report.errors[0]


# --- calibration ------------------------------------------------------------------------------------

def test_prior_from_encoder_calibration_or_default():
    msem_like = SimpleNamespace(calibration=(20.0, 0.6))
    assert prior_calibration(msem_like) == Calibration(a=20.0, b=-12.0, source="encoder")
    assert prior_calibration(SimpleNamespace()) == Calibration(a=DEFAULT_A, b=DEFAULT_B, source="default")
    with pytest.raises(ValueError, match="gamma"):
        prior_calibration(SimpleNamespace(calibration=(-1.0, 0.5)))


def test_fit_platt_recovers_a_known_curve():
    rng = np.random.default_rng(0)
    cos = rng.uniform(0.2, 1.0, 20_000)
    labels = (rng.uniform(size=cos.size) < sigmoid(15.0 * cos - 11.0)).astype(float)
    a, b = fit_platt(cos, labels, Calibration(DEFAULT_A, DEFAULT_B, "default"))
    assert a == pytest.approx(15.0, rel=0.1) and b == pytest.approx(-11.0, rel=0.1)
    # 0.5 crossing at cos = 11/15 within a hundredth
    assert -b / a == pytest.approx(11.0 / 15.0, abs=0.01)


def test_fit_platt_stays_near_the_prior_with_little_data():
    prior = Calibration(12.0, -9.0, "default")
    a, b = fit_platt(np.array([0.9, 0.95]), np.array([1.0, 1.0]), prior, l2=10.0)
    assert abs(a - 12.0) < 2 and abs(b + 9.0) < 2


def clustered(n_clusters: int, per_cluster: int, spread: float, dim: int = 32, seed: int = 0):
    """Paraphrase-like data: each 'FAQ' is a cluster of variants around a centre."""
    rng = np.random.default_rng(seed)
    centres = unit_vectors(n_clusters, dim, seed)
    vecs = np.repeat(centres, per_cluster, axis=0) + spread * rng.standard_normal((n_clusters * per_cluster, dim))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    faq_ids = [f"faq{i}" for i in range(n_clusters) for _ in range(per_cluster)]
    return vecs, faq_ids


def test_calibrate_fits_on_the_kb_and_ranks_sensibly():
    vecs, faq_ids = clustered(60, 3, spread=0.15)
    index = AnnIndex.build(vecs, n_trees=10)
    cal = calibrate(index, vecs, faq_ids, SimpleNamespace())
    assert cal["source"] == "kb_fit" and cal["n_examples"] == 180 and cal["n_positive"] >= 30
    assert cal["prior"] == {"a": DEFAULT_A, "b": DEFAULT_B, "source": "default"}
    assert cal["a"] > 0
    p = Calibration(cal["a"], cal["b"], "kb_fit").prob(np.array([0.2, 0.95]))
    assert p[0] < 0.5 < p[1]
    # curves for pooled FAQ scores (FAQ_POOL_VARIANTS 2..5); 3 phrasings per FAQ, one of them the query
    assert sorted(cal["pooled"]) == ["2", "3", "4", "5"]
    for fit in cal["pooled"].values():
        assert fit["source"] == "kb_fit" and fit["a"] > 0 and fit["n_examples"] == 180
    # a mean of the best two cosines sits at or below the best one, so its curve reaches 0.5 no later
    def midpoint(c):
        return -c["b"] / c["a"]
    assert midpoint(cal["pooled"]["2"]) <= midpoint(cal) + 1e-6


def test_calibration_for_picks_the_pooled_curve():
    from index.calibration import calibration_for

    manifest = {"calibration": {"a": 10.0, "b": -8.0, "pooled": {"2": {"a": 11.0, "b": -7.0}}}}
    assert (calibration_for(manifest).a, calibration_for(manifest).b) == (10.0, -8.0)
    assert (calibration_for(manifest, pool=2).a, calibration_for(manifest, pool=2).b) == (11.0, -7.0)
    # a build without that curve falls back to the best-phrasing one
    assert calibration_for(manifest, pool=3).a == 10.0
    assert calibration_for({"calibration": {"a": 10.0, "b": -8.0}}, pool=2).b == -8.0


def test_calibrate_falls_back_to_the_prior_without_paraphrases():
    vecs, faq_ids = clustered(50, 1, spread=0.0)  # one variant per FAQ: no positive can exist
    index = AnnIndex.build(vecs, n_trees=5)
    cal = calibrate(index, vecs, faq_ids, SimpleNamespace(calibration=(10.0, 0.5)))
    assert cal["source"] == "encoder" and (cal["a"], cal["b"]) == (10.0, -5.0)
    assert cal["n_positive"] == 0 and "too few" in cal["reason"]
