"""What benchmarks share to drive a real `faq serve` and the `faq` command: a free loopback port, a server in
its own process group (`Server`), the resident memory of a process tree (`rss_mb`, `RssSampler`), the `faq`
command of this interpreter (`faq`), the environment a benchmark's commands and server run with
(`served_env`), and a started server with a client holding its admin token (`admin_client`).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import httpx

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(pid: int) -> list[int]:
    """pid and all its descendants (uvicorn with several workers forks; one worker does not)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            continue
    return pids


def rss_mb(pid: int) -> float | None:
    """Resident memory of the process tree in MB (VmRSS from /proc), None when it is gone."""
    total, found = 0, False
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        found = True
                        break
        except OSError:
            continue
    return total / 1024.0 if found else None


class RssSampler:
    """Samples a process tree's RSS in a thread; `take_peak()` returns and resets the peak."""

    def __init__(self, pid: int, interval_s: float = 0.1):
        self.pid, self.interval_s = pid, interval_s
        self._peak: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            value = rss_mb(self.pid)
            if value is not None:
                with self._lock:
                    self._peak = value if self._peak is None else max(self._peak, value)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def take_peak(self) -> float | None:
        with self._lock:
            peak, self._peak = self._peak, None
        return peak


class Server:
    """A server in its own process group, so stopping it also stops anything it started."""

    def __init__(self, argv: list[str], env: dict, log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def wait_ready(self, url: str, timeout_s: float, path: str = "/readyz") -> float:
        """Seconds until GET `path` answers 200; raises with the server's log when it never does. `/healthz`
        for a server whose default KB has no index (/readyz stays 503 there)."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} before it was ready:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{url}{path}", timeout=2) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise RuntimeError(f"server not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._log.close()


def faq(env: dict, *argv: str) -> str:
    """`faq ARGV` of this interpreter on `env`; its output, or RuntimeError with the output's end."""
    out = subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"faq {' '.join(argv)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return out.stdout + out.stderr


def served_env(workdir: Path, encoder: str, admin_token: str) -> dict[str, str]:
    """The environment of a benchmark's own `faq` commands and `faq serve`: the shell's FAQ_* dropped, a
    SQLite store in `workdir`, no KB polling and no query cache (a repeat would hide what is measured)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir), "FAQ_DATABASE_URL": f"sqlite:///{workdir / 'faq.db'}",
                "FAQ_ENCODER": encoder, "FAQ_ADMIN_TOKEN": admin_token, "FAQ_KB_POLL_SECONDS": "0",
                "FAQ_QUERY_CACHE_SIZE": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return env


@contextmanager
def admin_client(env: dict, log: Path, timeout_s: float = 900) -> Iterator[tuple["httpx.Client", Server]]:
    """A real `faq serve` on `env`'s data dir, ready, and a client holding its admin token; stopped after."""
    import httpx  # only the benchmarks that talk HTTP need it installed

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, log)
    try:
        server.wait_ready(url, timeout_s, path="/healthz")
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {env['FAQ_ADMIN_TOKEN']}"}) as http:
            yield http, server
    finally:
        server.stop()
