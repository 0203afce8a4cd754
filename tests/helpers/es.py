"""The noida-db Elasticsearch-API emulator (an emulator, not Elasticsearch) on a free loopback port, for the
tests (tests/conftest.py) and the benchmarks that need a server (bench/es_vectors.py).

    proc, url = start_emulator(data_dir)   # RuntimeError with the emulator's log when it does not answer
    stop_emulator(proc)                    # by its PID; nothing else is touched
    start_es_emulator / stop_es_emulator   # the same inside a test: a start failure fails the test
"""
from __future__ import annotations

import socket
import subprocess
import urllib.request
from pathlib import Path

from tests.helpers.waiting import poll


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_emulator(data_dir: str | Path) -> tuple[subprocess.Popen, str]:
    import noida_db

    binary = Path(noida_db.__file__).parent / "noida-db"
    log_path = Path(data_dir) / "noida.log"
    for _attempt in range(3):  # the free port can be taken between probing and binding
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [str(binary), "start", "--data-dir", str(data_dir), "--host", "127.0.0.1",
                 "--only", "elasticsearch", "--elasticsearch-port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if poll(lambda proc=proc, url=url: proc.poll() is not None or _answers(url), 20, every_s=0.1) \
                and proc.poll() is None:
            return proc, url
        stop_emulator(proc)  # alive but not answering, or exited: try another port
    raise RuntimeError(f"the noida-db Elasticsearch emulator did not start: {log_path.read_text()[-2000:]}")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def stop_emulator(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def start_es_emulator(data_dir):
    """`start_emulator` inside a test: a start failure fails the test with the emulator's log."""
    import pytest

    try:
        return start_emulator(data_dir)
    except RuntimeError as exc:
        pytest.fail(str(exc))


def stop_es_emulator(proc) -> None:
    stop_emulator(proc)
