"""Builds that end by a signal, and the sweep that cleans up after builds whose process is gone
(index/build.py `sweep_builds`, index/artifacts.py build locks): in-process signals with the real
MiniLM encoder, real `faq index build` processes stopped by SIGTERM / SIGKILL (with an encoder that
blocks, so the signal lands mid-build), and live builds simulated by holding their lock."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from index.artifacts import BuildRegistry
from app.release import build_current
from index.build import ORPHAN_ERROR, BuildInterrupted, build_index, sweep_builds

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def kb_store(store, index_kb_records):
    store.import_records(index_kb_records)
    return store


@pytest.fixture
def python_signal_handlers():
    """SIGINT and SIGTERM as a Python process starts with them (KeyboardInterrupt, default), whatever this run
    inherited: a run started in the background or under `nohup` has SIGINT ignored, and a build leaves an
    ignored signal alone. The inherited handlers are put back afterwards."""
    inherited = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for signum, handler in inherited.items():
        if handler is not None:  # None: not set from Python, nothing to put back
            signal.signal(signum, handler)


class SignallingEncoder:
    """The real encoder; its first call sends `signum` to this very process, as `kill` would."""

    def __init__(self, encoder, signum: int, before=None):
        self.encoder, self.signum, self.before = encoder, signum, before
        self.id, self.dim = encoder.id, encoder.dim

    def encode(self, texts, batch_size=64, show_progress_bar=False):
        if self.before is not None:
            self.before()
        os.kill(os.getpid(), self.signum)
        return self.encoder.encode(texts, batch_size=batch_size)


def debris(index_dir: Path) -> list[str]:
    return sorted(p.name for p in index_dir.glob(".staging-*"))


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_build_marks_it_failed_and_removes_its_staging(kb_store, minilm_encoder, tmp_path, signum, code,
                                                                   python_signal_handlers):
    registry = BuildRegistry(tmp_path / "idx")
    previous = signal.getsignal(signum)
    seen = {}

    def look():  # what is on disk while the build runs
        seen["debris"] = debris(registry.index_dir)

    with pytest.raises(BuildInterrupted) as caught:
        build_index(kb_store, SignallingEncoder(minilm_encoder, signum, look), registry, n_trees=5)
    assert caught.value.signum == signum and caught.value.exit_code == code
    (row,) = kb_store.list_builds()
    version = row["version"]
    assert seen["debris"] == [f".staging-{version}", f".staging-{version}.lock"]
    assert row["status"] == "failed" and signal.Signals(signum).name in row["error"]
    assert row["finished_at"] is not None
    assert debris(registry.index_dir) == [] and registry.versions() == [] and registry.current() is None
    assert signal.getsignal(signum) is previous  # the process's own handler is back


def test_the_build_handlers_are_only_installed_for_its_duration(kb_store, minilm_encoder, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    manifest = build_index(kb_store, minilm_encoder, BuildRegistry(tmp_path / "idx"), n_trees=5)
    assert manifest["version"] and signal.getsignal(signal.SIGTERM) is before
    assert debris(tmp_path / "idx") == []  # the lock file goes with the build


def test_a_sweep_during_a_build_leaves_it_alone(kb_store, minilm_encoder, tmp_path):
    """Another process's sweep (a replica starting up) while this build encodes: the lock says it lives."""
    registry = BuildRegistry(tmp_path / "idx")
    reports = []

    class SweepingEncoder:
        id, dim = minilm_encoder.id, minilm_encoder.dim

        def encode(self, texts, batch_size=64, show_progress_bar=False):
            reports.append(sweep_builds(kb_store, BuildRegistry(registry.index_dir), grace_s=0))
            return minilm_encoder.encode(texts, batch_size=batch_size)

    version = build_current(kb_store, SweepingEncoder(), registry, n_trees=5)["version"]
    assert reports and all(r.live == [version] and not r.failed and not r.removed for r in reports)
    assert kb_store.list_builds()[0]["status"] == "ready" and registry.current() == version


# --- the sweep on hand-made debris ---------------------------------------------------------------

def fake_build(store, registry: BuildRegistry, version: str, *, started_ago_s: float = 0, staging: bool = True,
               lock: bool = True) -> None:
    """What a build killed by SIGKILL leaves: its row at "building", its staging folder, its lock file
    (nobody holds the lock: the kernel released it with the process)."""
    store.record_build(version=version, encoder_id="e", status="building",
                       started_at=datetime.now(timezone.utc) - timedelta(seconds=started_ago_s))
    registry.index_dir.mkdir(parents=True, exist_ok=True)
    if staging:
        registry.create_staging(version)
        (registry.staging_path(version) / "vectors.npy").write_bytes(b"\0" * 64)
    if lock:
        registry.build_lock_path(version).write_text("pid 1 on gone\n")


def status(store, version: str) -> str:
    return next(b for b in store.list_builds() if b["version"] == version)["status"]


def test_sweep_fails_orphans_and_leaves_a_locked_build_alone(store, tmp_path):
    registry = BuildRegistry(tmp_path / "idx")
    orphan, live, old_live = "20260101T000000Z-000001", "20260101T000000Z-000002", "20260101T000000Z-000003"
    fake_build(store, registry, orphan)
    fake_build(store, registry, live, lock=False)
    fake_build(store, registry, old_live, lock=False, started_ago_s=7 * 86400)
    old = time.time() - 7 * 86400
    os.utime(registry.staging_path(old_live), (old, old))
    # the live builds' processes: their locks are held for the whole sweep
    with registry.build_lock(live), registry.build_lock(old_live):
        report = sweep_builds(store, registry, grace_s=0, stale_staging_s=0)
        assert report.failed == [orphan] and report.removed == [orphan]
        assert report.live == [live, old_live] and report.waiting == []
        assert status(store, live) == status(store, old_live) == "building"
        assert registry.staging_path(live).is_dir() and registry.staging_path(old_live).is_dir()
        assert registry.build_lock_path(live).is_file()
        # and the build registry's own housekeeping agrees
        registry.prune(keep=1)
        assert registry.staging_path(live).is_dir() and registry.staging_path(old_live).is_dir()

    row = next(b for b in store.list_builds() if b["version"] == orphan)
    assert row["status"] == "failed" and row["error"].startswith(ORPHAN_ERROR) and row["finished_at"] is not None
    assert debris(registry.index_dir) == sorted(f".staging-{v}" for v in (live, old_live))  # lock files gone
    # their simulated processes let go without finishing (and, as a test, without removing anything): now
    # they have no lock file, so age decides: 24 h for a staging folder
    report = sweep_builds(store, registry)
    assert report.failed == [old_live] and report.waiting == [live]
    assert sweep_builds(store, registry).failed == []  # idempotent


def test_sweep_rules_for_builds_without_a_lock_file(store, tmp_path):
    """Rows and staging folders left by builds that ran without locks: judged by age only."""
    registry = BuildRegistry(tmp_path / "idx")
    young_row, old_row = "20260101T000000Z-00000a", "20260101T000000Z-00000b"
    young_dir, old_dir = "20260101T000000Z-00000c", "20260101T000000Z-00000d"
    fake_build(store, registry, young_row, staging=False, lock=False, started_ago_s=60)
    fake_build(store, registry, old_row, staging=False, lock=False, started_ago_s=3600)
    fake_build(store, registry, young_dir, lock=False, started_ago_s=3600)
    fake_build(store, registry, old_dir, lock=False, started_ago_s=3 * 86400)
    old = time.time() - 2 * 86400
    os.utime(registry.staging_path(old_dir), (old, old))

    dry = sweep_builds(store, registry, dry_run=True)
    assert dry.failed == [old_row, old_dir] and dry.removed == [old_dir]
    assert all(status(store, v) == "building" for v in (young_row, old_row, young_dir, old_dir))
    assert registry.staging_path(old_dir).is_dir()

    report = sweep_builds(store, registry)  # defaults: 15 min for rows, 24 h for staging folders
    assert report.failed == [old_row, old_dir] and report.removed == [old_dir]
    assert report.waiting == [young_row, young_dir]
    assert [status(store, v) for v in (young_row, old_row, young_dir, old_dir)] == ["building", "failed", "building", "failed"]
    assert debris(registry.index_dir) == [f".staging-{young_dir}"]


def test_sweep_never_overwrites_a_build_that_finished(store, tmp_path):
    registry = BuildRegistry(tmp_path / "idx")
    version = "20260101T000000Z-0000aa"
    fake_build(store, registry, version, staging=False)
    store.update_build(version, status="ready")  # finished between its lock dropping and the sweep
    assert store.fail_build_if_building(version, ORPHAN_ERROR) is False
    report = sweep_builds(store, registry)
    assert report.failed == [] and status(store, version) == "ready"
    assert debris(registry.index_dir) == []  # its stray lock file is cleaned up all the same


def test_cli_sweep(faq_env, capsys):
    from cli.main import main
    from migrations.runner import migrated_store

    store = migrated_store(faq_env)
    registry = BuildRegistry(faq_env.index_dir)
    version = "20260101T000000Z-0000bb"
    fake_build(store, registry, version)
    assert main(["index", "sweep", "--dry-run"]) == 0
    assert "would have 1 orphaned build(s) marked failed; 1 staging folder(s) removed" in capsys.readouterr().out
    assert status(store, version) == "building" and registry.staging_path(version).is_dir()
    assert main(["index", "sweep"]) == 0
    out = capsys.readouterr().out
    assert f"{version}: row marked failed, staging folder removed" in out
    assert status(store, version) == "failed" and debris(registry.index_dir) == []
    store.close()


# --- real `faq index build` processes ------------------------------------------------------------

BUILD_SCRIPT = textwrap.dedent("""
    import signal, sys, time
    import app.match.assembly

    # the handlers a Python process starts with, whatever the test run passed down (SIG_IGN under nohup or &)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    class BlockingEncoder:
        # stands in for a long encode: says it started, then blocks until a signal ends the process
        id, dim, runtime = "blocking-test", 16, "torch"

        def encode(self, texts, batch_size=64, show_progress_bar=False):
            open(sys.argv[1], "w").close()
            time.sleep(120)
            raise SystemExit("no signal came")

    app.match.assembly.load_configured_encoder = lambda settings, manifest=None, spec=None: BlockingEncoder()
    from cli.main import main
    sys.exit(main(["index", "build", "--encoder", "minilm", "--n-trees", "2", "--no-progress"]))
""")


def start_build(faq_env, tmp_path, index_kb_records) -> tuple[subprocess.Popen, Path]:
    from migrations.runner import migrated_store

    store = migrated_store(faq_env)
    store.import_records(index_kb_records)
    store.close()
    script, started = tmp_path / "build.py", tmp_path / "encoding"
    script.write_text(BUILD_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(script), str(started)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not started.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the build did not start encoding: {proc.communicate()[0][-3000:]}")
        time.sleep(0.05)
    return proc, started


def test_sigterm_ends_a_real_build_failed_and_clean(faq_env, tmp_path, index_kb_records):
    from app.store import FaqStore

    proc, _ = start_build(faq_env, tmp_path, index_kb_records)
    index_dir = Path(faq_env.index_dir)
    (version,) = [p.name.removeprefix(".staging-") for p in index_dir.glob(".staging-*") if p.is_dir()]
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert "interrupted by SIGTERM" in out
    with FaqStore(faq_env.db_url) as store:
        (row,) = store.list_builds()
    assert row["version"] == version and row["status"] == "failed" and "SIGTERM" in row["error"]
    assert debris(index_dir) == []


def test_sigkill_leaves_debris_that_the_next_sweep_clears(faq_env, tmp_path, index_kb_records):
    from app.store import FaqStore

    proc, _ = start_build(faq_env, tmp_path, index_kb_records)
    proc.kill()
    proc.communicate(timeout=60)
    index_dir = Path(faq_env.index_dir)
    registry = BuildRegistry(index_dir)
    with FaqStore(faq_env.db_url) as store:
        (row,) = store.list_builds()
        version = row["version"]
        assert row["status"] == "building"  # nothing ran after SIGKILL
        assert debris(index_dir) == [f".staging-{version}", f".staging-{version}.lock"]
        report = sweep_builds(store, registry)
        assert report.failed == [version] and report.removed == [version] and report.live == []
        (row,) = store.list_builds()
    assert row["status"] == "failed" and row["error"].startswith(ORPHAN_ERROR)
    assert debris(index_dir) == []
