"""Two real `faq serve` processes on one PostgreSQL database and one data directory, on loopback.

What users who outgrow one process do (docker-compose's `replicas` profile, docs/operations.md): a write
through one replica is matchable on the other within the KB poll interval, an index build run as a
separate job is picked up by both with no failed request, and killing one leaves the other serving.
bench/replicas.py runs the same with nginx in front and a bigger KB, for the figures.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from index.artifacts import BuildRegistry
from app.release import build_current
from tests.helpers.api import kb_records, make_settings, make_store
from tests.helpers.waiting import until

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[3]
TOKEN = "replica-admin-token-of-32-characters"
POLL_S = 0.5
PROBE = {"faq_id": "replica-probe", "answer": "Written on one replica, matched on the other.",
         "questions": ["which replica wrote the question about lighthouses"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_replica(env: dict, port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], cwd=REPO, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(proc: subprocess.Popen, url: str, log: Path, timeout_s: float = 120) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"replica not ready:\n{log.read_text()[-3000:]}")


def version(url: str) -> str | None:
    return httpx.get(f"{url}/readyz", timeout=5).json().get("index_version")


def test_two_replicas_share_writes_and_builds_and_survive_a_kill(tmp_path, pg_url, encoder):  # noqa: F811
    settings = make_settings(tmp_path / "data", database_url=pg_url)
    store = make_store(settings, kb_records())
    registry = BuildRegistry(settings.index_dir)
    first = build_current(store, encoder, registry, n_trees=5)["version"]

    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(settings.data_dir), "FAQ_DATABASE_URL": pg_url, "FAQ_ENCODER": "minilm",
                "FAQ_ENCODER_RUNTIME": "torch", "FAQ_TORCH_THREADS": "1", "FAQ_ADMIN_TOKEN": TOKEN,
                "FAQ_KB_POLL_SECONDS": str(POLL_S), "FAQ_QUERY_CACHE_SIZE": "0", "HF_HUB_OFFLINE": "1"})
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_replica(env, port, log) for port, log in zip(ports, logs)]
    failed: list[tuple[str, int | str]] = []
    answered = {0: 0, 1: 0}
    stop, a_killed = threading.Event(), threading.Event()

    def query_both() -> None:
        with httpx.Client(timeout=30) as client:
            i = 0
            while not stop.is_set():
                i += 1
                which = 1 if a_killed.is_set() else i % 2  # a real proxy stops sending to a dead replica
                try:
                    r = client.post(f"{urls[which]}/match", json={"query": f"how do I reset my password {i % 7}"})
                    status: int | str = r.status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                if status == 200:
                    answered[which] += 1
                elif not (which == 0 and a_killed.is_set()):
                    failed.append((f"replica {'AB'[which]}", status))

    try:
        for proc, url, log in zip(procs, urls, logs):
            wait_ready(proc, url, log)
        assert version(urls[0]) == version(urls[1]) == first
        load = threading.Thread(target=query_both)
        load.start()

        # a write through A is matchable on B within the poll interval (plus its refresh)
        t0 = time.monotonic()
        r = httpx.post(f"{urls[0]}/admin/faqs", json=PROBE, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 201, r.text
        while True:
            top = httpx.post(f"{urls[1]}/match", json={"query": PROBE["questions"][0]}).json()["matches"][0]
            if top["faq_id"] == PROBE["faq_id"]:
                break
            assert time.monotonic() - t0 < POLL_S + 10, "B never saw A's write"
            time.sleep(0.05)

        # a build run as a separate job: both replicas load it, no request fails
        second = build_current(store, encoder, registry, n_trees=5)["version"]
        t1 = time.monotonic()
        while not (version(urls[0]) == version(urls[1]) == second):
            assert time.monotonic() - t1 < POLL_S + 30, (version(urls[0]), version(urls[1]))
            time.sleep(0.1)

        # kill A: B keeps serving
        a_killed.set()  # from here on, what A no longer answers is expected, not a failure
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait(10)
        served_before = answered[1]
        # B goes on answering (the load thread sends everything to it)
        until(lambda: failed or answered[1] >= served_before + 5, 30, "replica B answering after A was killed")
        stop.set()
        load.join(30)
        assert failed == [], failed[:10]
        assert answered[0] > 0 and answered[1] > 0
        top = httpx.post(f"{urls[1]}/match", json={"query": PROBE["questions"][0]}).json()
        assert top["index_version"] == second and top["matches"][0]["faq_id"] == PROBE["faq_id"]

        # nothing lost: the store holds the KB plus the write
        exported: dict[str, set[str]] = {}
        for record in store.export_records():
            exported.setdefault(record.faq_id, set()).add(record.question)
        expected: dict[str, set[str]] = {}
        for record in kb_records():
            expected.setdefault(record.faq_id, set()).add(record.question)
        expected[PROBE["faq_id"]] = set(PROBE["questions"])
        assert exported == expected
    finally:
        stop.set()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        store.close()
