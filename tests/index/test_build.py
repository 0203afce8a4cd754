"""The build job (index/build.py) end to end on a real store (tmp SQLite) with the real MiniLM encoder:
manifest, atomic switch, pruning, rollback, failed verification and interrupted builds, and the
`faq index ...` commands."""
from __future__ import annotations

import json

import numpy as np
import pytest

from index import artifacts
from index.artifacts import BuildRegistry, IndexVerificationError
from app.release import build_current, prune
from index.build import BuildError, build_index


@pytest.fixture
def kb_store(store, index_kb_records):
    store.import_records(index_kb_records)
    return store


def build(store, encoder, registry, activate=True, keep_versions=None, **kw):
    """A build made current as a scratch KB's is (app/release/), or only built and pruned (`--no-activate`)."""
    kw.setdefault("n_trees", 10)
    kw.setdefault("batch_size", 32)
    if activate:
        return build_current(store, encoder, registry, keep_versions=keep_versions, **kw)
    manifest = build_index(store, encoder, registry, **kw)
    prune(registry, keep_versions)
    return manifest


def test_build_writes_a_verified_versioned_artifact(kb_store, minilm_encoder, tmp_path):
    registry = BuildRegistry(tmp_path / "indexes")
    manifest = build(kb_store, minilm_encoder, registry, search_k=-1)
    version = manifest["version"]
    assert artifacts.VERSION_RE.match(version)
    assert registry.current() == version and registry.versions() == [version]
    folder = tmp_path / "indexes" / version
    for name in ("annoy.ann", "ids.npy", "vectors.npy", "idmap.jsonl", "manifest.json"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "manifest.json").read_text()) == manifest

    snap = kb_store.snapshot()
    assert manifest["encoder_id"] == "all-MiniLM-L6-v2" and manifest["dim"] == 384
    assert manifest["n_faqs"] == 30 and manifest["n_variants"] == len(snap.variants) == 68
    assert manifest["kb_revision"] == snap.revision
    assert manifest["n_trees"] == 10 and manifest["search_k"] == -1
    assert manifest["checksum"] == artifacts.sha256_file(folder / "annoy.ann")
    assert manifest["verify"]["self_recall_at_10"] == pytest.approx(1.0)
    assert set(manifest["timings"]) >= {"snapshot_s", "encode_s", "encode_sentences_per_s", "annoy_build_s",
                                        "save_s", "verify_s", "calibrate_s", "total_s"}
    cal = manifest["calibration"]
    assert cal["source"] == "kb_fit" and cal["n_positive"] >= 30 and cal["a"] > 0
    # paraphrase-level cosines (~0.8) should be likely matches, unrelated ones (~0.1) not
    assert 1 / (1 + np.exp(-(cal["a"] * 0.1 + cal["b"]))) < 0.2

    ids = np.load(folder / "ids.npy")
    assert ids.tolist() == [v.variant_id for v in snap.variants]
    idmap = [json.loads(line) for line in (folder / "idmap.jsonl").read_text().splitlines()]
    assert idmap[0] == {"variant_id": snap.variants[0].variant_id, "faq_id": snap.variants[0].faq_id,
                        "question": snap.variants[0].question}
    vectors = np.load(folder / "vectors.npy")
    assert vectors.dtype == np.float16 and vectors.shape == (68, 384)

    (row,) = kb_store.list_builds()
    assert row["version"] == version and row["status"] == "ready" and row["finished_at"] is not None
    assert row["n_variants"] == 68 and row["encoder_id"] == "all-MiniLM-L6-v2"


def test_rebuild_switches_current_prunes_and_rolls_back(kb_store, minilm_encoder, tmp_path):
    registry = BuildRegistry(tmp_path)
    v1 = build(kb_store, minilm_encoder, registry)["version"]
    v2 = build(kb_store, minilm_encoder, registry)["version"]
    assert v1 < v2 and registry.current() == v2
    registry.activate(v1)  # rollback
    assert registry.current() == v1
    v3 = build(kb_store, minilm_encoder, registry, activate=False, keep_versions=1)["version"]
    # keep=1 keeps the newest (v3) and, always, the current one (v1); v2 goes
    assert registry.versions() == [v1, v3] and registry.current() == v1
    assert [m["current"] for m in registry.list()] == [True, False]
    assert [b["status"] for b in kb_store.list_builds()] == ["ready"] * 3


def test_failed_verification_leaves_current_unchanged(kb_store, minilm_encoder, tmp_path):
    from app.store import KbRecord

    registry = BuildRegistry(tmp_path / "idx")
    good = build(kb_store, minilm_encoder, registry)["version"]

    # Annoy is exact while all items fit in one leaf (~387 vectors at dim 384), so make the KB bigger
    # and the forest a single tree: self-recall@10 then drops below 0.95.
    verbs = ["reset", "change", "update", "cancel", "renew", "transfer", "close", "open", "verify", "recover",
             "delete", "download", "upload", "share", "lock"]
    nouns = ["password", "account", "card", "order", "subscription", "address", "email", "phone number",
             "invoice", "profile", "payment method", "wallet", "device", "report", "backup"]
    kb_store.import_records([
        KbRecord(faq_id=f"{v}-{n}", question=tmpl.format(v=v, n=n), answer=f"To {v} your {n} ...", tags=None)
        for v in verbs for n in nouns for tmpl in ("How do I {v} my {n}?", "Can I {v} the {n} online?")
    ])
    with pytest.raises(IndexVerificationError, match="below the floor 0.95"):
        build(kb_store, minilm_encoder, registry, n_trees=1, search_k=-1, recall_floor=0.95)
    assert registry.current() == good and registry.versions() == [good]
    assert not list((tmp_path / "idx").glob(".staging-*"))
    failed, ready = kb_store.list_builds()  # newest first
    assert failed["status"] == "failed" and "self-recall@10" in failed["error"]
    assert ready["status"] == "ready"


class InterruptedEncoder:
    """The real encoder, interrupted (Ctrl-C) after `batches` batches: fault injection for the test."""

    def __init__(self, encoder, batches: int):
        self.encoder, self.batches = encoder, batches
        self.id, self.dim = encoder.id, encoder.dim

    def encode(self, texts, batch_size=64, show_progress_bar=False):
        if self.batches == 0:
            raise KeyboardInterrupt
        self.batches -= 1
        return self.encoder.encode(texts, batch_size=batch_size)


def test_interrupted_build_leaves_no_version_behind(kb_store, minilm_encoder, tmp_path):
    registry = BuildRegistry(tmp_path / "idx")
    good = build(kb_store, minilm_encoder, registry)["version"]
    with pytest.raises(KeyboardInterrupt):
        build(kb_store, InterruptedEncoder(minilm_encoder, batches=1), registry, batch_size=16)
    assert registry.versions() == [good] and registry.current() == good
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == sorted([".lock", "current", good])
    assert kb_store.list_builds()[0]["status"] == "failed"
    # re-running is safe
    again = build(kb_store, minilm_encoder, registry)["version"]
    assert registry.current() == again and registry.versions() == [good, again]


def test_build_rejects_bad_parameters_and_an_empty_kb(store, minilm_encoder, tmp_path):
    registry = BuildRegistry(tmp_path)
    with pytest.raises(BuildError, match="no question variants"):
        build(store, minilm_encoder, registry)
    with pytest.raises(BuildError, match="n_trees"):
        build(store, minilm_encoder, registry, n_trees=0)
    with pytest.raises(BuildError, match="search_k"):
        build(store, minilm_encoder, registry, search_k=0)
    assert store.list_builds() == [] and registry.versions() == []


def test_cli_build_list_verify_activate(faq_env, index_kb_records, capsys, monkeypatch):
    from cli.main import main

    monkeypatch.setenv("FAQ_ENCODER", "minilm")
    monkeypatch.setenv("FAQ_TORCH_THREADS", "1")
    from app.settings import get_settings

    get_settings.cache_clear()
    settings = get_settings()
    from migrations.runner import migrated_store

    store = migrated_store(settings)
    store.import_records(index_kb_records)
    store.close()

    assert main(["index", "build", "--n-trees", "10", "--no-progress"]) == 0
    assert main(["index", "build", "--n-trees", "5", "--search-k", "200", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "sentences/s" in out and "self-recall@10" in out and "now current" in out
    registry = BuildRegistry(settings.index_dir)
    v1, v2 = registry.versions()
    assert registry.read_manifest(v2)["search_k"] == 200
    # the build's expected-precision table, printed and drawn
    assert "expected precision and answer rate by threshold" in out
    assert (registry.path(v2) / "expected_precision.png").stat().st_size > 1000

    assert main(["index", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith("  " + v1) and lines[2].startswith("* " + v2)
    table = out.split("* = the threshold served)")[1].splitlines()
    assert table[1].split() == ["THRESHOLD", "PRECISION", "ANSWERED"]
    assert any(row.startswith("*") and row.split()[1] == "0.50" for row in table[2:])  # FAQ_DEFAULT_THRESHOLD
    assert main(["index", "activate", v1]) == 0 and registry.current() == v1
    assert main(["index", "verify"]) == 0
    assert f"{v1}: OK" in capsys.readouterr().out
    assert main(["index", "activate", "20990101T000000Z-ffffff"]) == 1
    assert "no finished build" in capsys.readouterr().err
