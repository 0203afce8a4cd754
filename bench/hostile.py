"""Hostile clients and operator faults against a real `faq serve` on loopback.

    python bench/hostile.py --kb runs/data/clinc150/kb.jsonl --queries runs/data/clinc150/test.jsonl \
        --encoder minilm [--postgres postgresql://postgres@127.0.0.1:5432/test] [--only batches,abandon]

One server process (fresh data dir under --workdir, the KB imported and built first), then each
scenario in turn; every number is measured by the clients, over HTTP:

- batches: 8 clients send maximum /match/batch requests (64 queries) back to back while 1 client sends
  single /match queries, for --seconds: the single queries' latency, and the batch clients' answers
  by status (200, 429 when their share of the queue is full).
- abandon: 16 maximum batch requests whose clients hang up at once, then single /match queries: the
  first one's latency and the median of 20.
- import: 4 clients send single queries while `faq kb import` adds 3,000 new phrasings in another
  process; runs until the server has applied them: every query's latency, failures.
- slowbody: 20 connections send headers and half a body, then nothing: each must get a 408 and be
  closed, and /metrics must count no 500.
- slowheaders: 20 connections send half of their request headers, then nothing: each must be closed
  (the headers' deadline is FAQ_BODY_TIMEOUT_S too), and /match must still answer.
- sigterm: 4 clients query; the server gets SIGTERM mid-load: every answered request_id must be in the
  query log afterwards (this scenario ends the server, so it runs last).

The query cache is off (FAQ_QUERY_CACHE_SIZE=0): repeats would be answered without any encoding.
Writes bench/results/hostile-<encoder>.json and .md. Timings on a shared 2-core machine are noisy;
the load generator runs on the same cores as the server.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import Server, faq, free_port  # noqa: E402
from bench.reports import write_report  # noqa: E402
from bench.load import percentiles  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402
from kb.files import read_queries  # noqa: E402

TOKEN = "hostile-bench-admin-token-of-32-chars"
SCENARIOS = ("batches", "abandon", "import", "slowbody", "slowheaders", "sigterm")
MAX_BATCH = 64


class Clients:
    """Threads that each send requests back to back until `stop` is set, recording (latency ms, status)."""

    def __init__(self):
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        # (client latency ms, status, time.monotonic() at the answer, the server's own timings_ms.total)
        self.records: dict[str, list[tuple[float, int, float, float | None]]] = {}
        self.request_ids: list[str] = []
        self._lock = threading.Lock()

    def add(self, name: str, url: str, make_body, path: str = "/match") -> None:
        records = self.records.setdefault(name, [])

        def run() -> None:
            with httpx.Client(base_url=url, timeout=60) as client:
                while not self.stop.is_set():
                    body = make_body()
                    t0 = time.perf_counter()
                    try:
                        r = client.post(path, json=body)
                        status = r.status_code
                    except httpx.HTTPError:
                        status, r = 0, None
                    ms = (time.perf_counter() - t0) * 1000.0
                    server_ms = None
                    if r is not None and status == 200:
                        payload = r.json()
                        items = payload.get("results", [payload])
                        server_ms = max(item["timings_ms"]["total"] for item in items)
                    with self._lock:
                        records.append((ms, status, time.monotonic(), server_ms))
                        if server_ms is not None:
                            self.request_ids.extend(item["request_id"] for item in items)
                    if status in (429, 503) and r is not None:  # a well-behaved client honours Retry-After
                        self.stop.wait(min(float(r.headers.get("Retry-After", "1")), 2.0))

        thread = threading.Thread(target=run, daemon=True)
        self.threads.append(thread)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(90)

    def summary(self, name: str, since: float | None = None) -> dict:
        rows = [r for r in self.records.get(name, []) if since is None or r[2] >= since]
        ok = [ms for ms, status, *_ in rows if status == 200]
        return {"requests": len(rows), "status": dict(Counter(str(r[1]) for r in rows)),
                "latency_ms_200": percentiles(ok)}


def fresh_database(admin_url: str) -> tuple[str, Callable[[], None]]:
    """A new, uniquely named database on the PostgreSQL server of `admin_url`, and a function dropping it."""
    import psycopg2
    from sqlalchemy.engine import make_url

    admin_dsn = make_url(admin_url).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"faq_replicas_{uuid.uuid4().hex[:10]}"
    conn = psycopg2.connect(admin_dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()

    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), drop


def scenario_batches(url: str, pool: list[str], seconds: float) -> dict:
    rng = random.Random(0)
    clients = Clients()
    for _ in range(8):
        clients.add("batch", url, lambda: {"queries": [{"query": q} for q in rng.sample(pool, MAX_BATCH)]},
                    path="/match/batch")
    clients.add("single", url, lambda: {"query": rng.choice(pool)})
    clients.start()
    time.sleep(seconds)
    clients.finish()
    return {"seconds": seconds, "single": clients.summary("single"), "batch": clients.summary("batch")}


def _raw_request(port: int, path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def scenario_abandon(url: str, port: int, pool: list[str]) -> dict:
    rng = random.Random(1)
    for _ in range(16):
        body = json.dumps({"queries": [{"query": q} for q in rng.sample(pool, MAX_BATCH)]}).encode()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(_raw_request(port, "/match/batch", body))
        # closed at once: the client is gone before any answer
    times = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(20):
            t0 = time.perf_counter()
            r = client.post("/match", json={"query": rng.choice(pool)})
            times.append(((time.perf_counter() - t0) * 1000.0, r.status_code))
        metrics = client.get("/metrics").text
    gone = [line for line in metrics.splitlines() if line.startswith("faq_http_client_gone_total")]
    return {"abandoned_batches": 16, "next_match_ms": round(times[0][0], 1), "next_status": times[0][1],
            "next_20": percentiles([t for t, _ in times]),
            "client_gone_counted": float(gone[0].split()[-1]) if gone else None}


def scenario_import(url: str, env: dict, args: argparse.Namespace, pool: list[str], workdir: Path) -> dict:
    texts = list(dict.fromkeys(pool))
    rng = random.Random(2)
    rows = []
    for i in range(3000):  # new phrasings of 300 new FAQs, realistic texts (the query pool, numbered)
        base = texts[i % len(texts)]
        rows.append({"faq_id": f"bulk-{i // 10}", "question": f"{base} ({i})", "answer": f"Bulk answer {i // 10}."})
    kb_file = workdir / "bulk.jsonl"
    kb_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    before = httpx.get(f"{url}/admin/index", headers=headers).json()
    clients = Clients()
    for _ in range(4):
        clients.add("single", url, lambda: {"query": rng.choice(pool)})
    clients.start()
    time.sleep(2)
    t0 = time.monotonic()
    imported = subprocess.Popen([sys.executable, "-m", "cli.main", "kb", "import", str(kb_file)], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = imported.communicate(timeout=600)
    imported_s = time.monotonic() - t0
    if imported.returncode != 0:
        clients.finish()
        raise RuntimeError(f"faq kb import failed:\n{output[-3000:]}")
    applied_s = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        info = httpx.get(f"{url}/admin/index", headers=headers).json()
        if (info.get("delta_size") or 0) >= (before.get("delta_size") or 0) + 3000:
            applied_s = time.monotonic() - t0
            break
        time.sleep(0.2)
    time.sleep(2)
    clients.finish()
    during = clients.summary("single", since=t0)
    lat = [ms for ms, _, at, _ in clients.records["single"] if at >= t0]
    # (sent at, seconds after the import started; client ms; the server's own ms for it)
    slow = [(round(at - t0 - ms / 1000.0, 2), round(ms, 1), server_ms) for ms, _, at, server_ms
            in clients.records["single"] if at >= t0 and ms > 300]
    return {"variants_imported": 3000, "import_s": round(imported_s, 1),
            "applied_after_s": None if applied_s is None else round(applied_s, 1),
            "queries_during": during, "max_ms_during": round(max(lat), 1) if lat else None,
            "over_300ms": len(slow), "over_300ms_sent_at_s": slow[:20]}


def scenario_slowbody(url: str, port: int, body_timeout_s: float) -> dict:
    socks = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(_raw_request(port, "/match", b'{"query": "where is my parcel"}')[:-16])  # half a body
        sock.settimeout(body_timeout_s + 15)
        socks.append(sock)
    t0 = time.monotonic()
    statuses, closed, waited = [], 0, []
    for sock in socks:
        data = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    closed += 1
                    break
                data += chunk
        except socket.timeout:
            pass
        waited.append(time.monotonic() - t0)
        statuses.append(data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none")
        sock.close()
    metrics = httpx.get(f"{url}/metrics").text
    five_hundreds = [line for line in metrics.splitlines()
                     if line.startswith("faq_http_requests_total") and 'status="5' in line]
    return {"connections": 20, "status": dict(Counter(statuses)), "closed_by_server": closed,
            "answered_after_s": round(max(waited), 1), "metrics_5xx_lines": five_hundreds}


def scenario_slowheaders(url: str, port: int, body_timeout_s: float) -> dict:
    socks = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(f"POST /match HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())  # never the blank line
        sock.settimeout(body_timeout_s + 15)
        socks.append(sock)
    t0 = time.monotonic()
    closed, waited = 0, []
    for sock in socks:
        try:
            while sock.recv(65536):
                pass
            closed += 1
        except socket.timeout:
            pass
        waited.append(time.monotonic() - t0)
        sock.close()
    ok = httpx.post(f"{url}/match", json={"query": "where is my parcel"}).status_code
    return {"connections": 20, "closed_by_server": closed, "closed_after_s": round(max(waited), 1),
            "next_match_status": ok}


def scenario_sigterm(url: str, server: Server, pool: list[str], db_url: str, seconds: float) -> dict:
    rng = random.Random(3)
    clients = Clients()
    for _ in range(4):
        clients.add("single", url, lambda: {"query": rng.choice(pool)})
    clients.start()
    time.sleep(seconds)
    os.kill(server.proc.pid, signal.SIGTERM)
    t0 = time.monotonic()
    code = server.proc.wait(60)
    stopped_s = time.monotonic() - t0
    clients.finish()
    ids = list(clients.request_ids)
    from sqlalchemy import bindparam, text

    from app.db.session import make_engine

    engine = make_engine(db_url)
    found = 0
    count = text("SELECT count(*) FROM query_log WHERE request_id IN :ids").bindparams(bindparam("ids", expanding=True))
    with engine.connect() as conn:
        for start in range(0, len(ids), 500):
            found += conn.execute(count, {"ids": ids[start:start + 500]}).scalar()
    engine.dispose()
    return {"answered": len(ids), "in_query_log": found, "lost": len(ids) - found, "exit_code": code,
            "shutdown_s": round(stopped_s, 2), "status": clients.summary("single")["status"]}


def render(report: dict) -> str:
    lines = [f"# Hostile load ({report['date']}, {report['encoder']}, {report['database']})", "",
             f"CPU: {report['cpu']['cpu_model']} ({os.cpu_count()} cores), int8 dot product: "
             f"{', '.join(report['cpu']['int8_dot_product']) or 'none'}", "",
             f"Command: `{report['command']}`", ""]
    for name, result in report["scenarios"].items():
        lines += [f"## {name}", "", "```json", json.dumps(result, indent=1), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kb", required=True, help="KB file to import and build (JSONL/CSV, `faq kb import` formats)")
    p.add_argument("--queries", required=True, help="JSONL of {\"query\": ...} used as the clients' questions")
    p.add_argument("--encoder", default="minilm")
    p.add_argument("--runtime", default=None, help="FAQ_ENCODER_RUNTIME (default: auto)")
    p.add_argument("--postgres", default=None, metavar="ADMIN_URL",
                   help="run on a fresh database created on this PostgreSQL server (dropped at the end), "
                        "e.g. postgresql://postgres@127.0.0.1:5432/test; default: SQLite in the work dir")
    p.add_argument("--workdir", default=None)
    p.add_argument("--model-cache", default=str(REPO / "var" / "models"))
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--only", default=",".join(SCENARIOS))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        p.error(f"--only: unknown scenario(s) {', '.join(sorted(unknown))}; known: {', '.join(SCENARIOS)}")

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="faq-hostile-"))
    workdir.mkdir(parents=True, exist_ok=True)
    drop_database = None
    if args.postgres:
        db_url, drop_database = fresh_database(args.postgres)
    else:
        db_url = f"sqlite:///{workdir / 'faq.db'}"
    body_timeout_s = 5.0
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir), "FAQ_DATABASE_URL": db_url, "FAQ_ENCODER": args.encoder,
                "FAQ_MODEL_CACHE": args.model_cache, "FAQ_ADMIN_TOKEN": TOKEN, "FAQ_QUERY_CACHE_SIZE": "0",
                "FAQ_KB_POLL_SECONDS": "1", "FAQ_BODY_TIMEOUT_S": str(body_timeout_s),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if args.runtime:
        env["FAQ_ENCODER_RUNTIME"] = args.runtime
    faq(env, "db", "upgrade")
    faq(env, "kb", "import", args.kb, "--sync")
    t0 = time.perf_counter()
    faq(env, "index", "build")
    build_s = time.perf_counter() - t0
    pool = [q.query for q in read_queries(args.queries)]

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / "server.log")
    report: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "encoder": args.encoder,
                    "runtime": args.runtime or "auto", "database": "postgresql" if "postgresql" in db_url else "sqlite",
                    "cpu": cpu_info(), "cores": os.cpu_count(), "build_s": round(build_s, 1),
                    "command": " ".join(["python", "bench/hostile.py", *(argv or sys.argv[1:])]), "scenarios": {}}
    try:
        report["ready_s"] = round(server.wait_ready(url, 300), 1)
        for name in only:
            print(f"-- {name}", file=sys.stderr, flush=True)
            if name == "batches":
                result = scenario_batches(url, pool, args.seconds)
            elif name == "abandon":
                result = scenario_abandon(url, port, pool)
            elif name == "import":
                result = scenario_import(url, env, args, pool, workdir)
            elif name == "slowbody":
                result = scenario_slowbody(url, port, body_timeout_s)
            elif name == "slowheaders":
                result = scenario_slowheaders(url, port, body_timeout_s)
            else:
                result = scenario_sigterm(url, server, pool, db_url, min(args.seconds, 10.0))
            report["scenarios"][name] = result
            print(json.dumps(result, indent=1), file=sys.stderr, flush=True)
    finally:
        server.stop()
        if drop_database is not None:
            drop_database()
    write_report(Path(args.out or REPO / "bench" / "results" / f"hostile-{args.encoder}-{report['database']}.json"), report, render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
