"""Two `faq serve` replicas on one PostgreSQL database and one data directory, behind nginx, on loopback.

    python bench/replicas.py --kb runs/data/clinc150/kb.jsonl --queries runs/data/clinc150/test.jsonl \
        --encoder minilm [--pg-admin-url postgresql://postgres@127.0.0.1:5432/test]

The topology of docker-compose's `replicas` profile, with processes instead of containers: the proxy
config is docker/nginx.conf with the replicas' loopback ports put in. It creates a fresh PostgreSQL
database (dropped at the end), imports the KB, builds, starts replicas A and B and the proxy, measures
throughput (bench/load.py, 16 clients: on A alone, on A and B directly with 8 each, then on both through
the proxy), and then keeps
4 clients querying through the proxy for the whole run (query cache off, so every query is encoded)
while it:

1. writes an FAQ through A's admin API and times until B matches it (the KB poll interval is 2 s);
2. runs `faq index build` as a separate job and times until both replicas serve the new version;
3. kills A with SIGKILL and keeps querying for 10 s;
4. compares `faq kb export` with what was written, and the answered request ids with the query log.

Every request that did not get a 200 is counted as failed. Needs nginx on the PATH (Debian:
nginx-light); without it the clients talk to B directly and step 3 only shows that B keeps serving.
Writes bench/results/replicas-<encoder>.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.hostile import Clients, fresh_database  # noqa: E402
from bench.serving import Server, faq, free_port, rss_mb  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402
from kb.files import read_queries  # noqa: E402

TOKEN = "replicas-bench-admin-token-of-32-chars"
POLL_S = 2.0
PROBE = {"faq_id": "replica-probe", "answer": "Written on replica A, matched on replica B.",
         "questions": ["which replica wrote the probe question about lighthouses"]}


class Proxy:
    """nginx running docker/nginx.conf with the compose service names replaced by loopback ports; its
    https listener on `tls_port` (a free one when not given) with a self-signed pair from
    docker/tls-cert.sh, as the compose `tls` service makes it."""

    def __init__(self, workdir: Path, port: int, upstreams: list[int], tls_port: int | None = None):
        self.tls_port = tls_port or free_port()
        subprocess.run(["sh", str(REPO / "docker" / "tls-cert.sh"), str(workdir / "tls")], check=True,
                       stdout=subprocess.DEVNULL)
        conf = (REPO / "docker" / "nginx.conf").read_text()
        servers = "".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;\n" for p in upstreams)
        conf, n = re.subn(r"(?m)^\s*server app(-2)?:8000[^\n]*\n", "", conf)
        assert n == 2, "docker/nginx.conf no longer names app and app-2"
        conf = conf.replace("keepalive 32;", servers.strip() + "\n        keepalive 32;")
        conf = conf.replace("listen 8080;", f"listen 127.0.0.1:{port};")
        assert "listen 8443 ssl;" in conf and "/etc/nginx/tls/" in conf, "docker/nginx.conf's TLS listener moved"
        conf = conf.replace("listen 8443 ssl;", f"listen 127.0.0.1:{self.tls_port} ssl;")
        conf = conf.replace("/etc/nginx/tls/", f"{workdir}/tls/")
        conf = (f"daemon off;\npid {workdir}/nginx.pid;\nerror_log {workdir}/nginx-error.log;\n" + conf).replace(
            "http {", f"http {{\n    client_body_temp_path {workdir}/nginx-body;\n    proxy_temp_path {workdir}/nginx-proxy;\n"
                      f"    fastcgi_temp_path {workdir}/nginx-fcgi;\n    uwsgi_temp_path {workdir}/nginx-uwsgi;\n"
                      f"    scgi_temp_path {workdir}/nginx-scgi;", 1)
        path = workdir / "nginx.conf"
        path.write_text(conf)
        self.proc = subprocess.Popen([shutil.which("nginx"), "-c", str(path), "-p", str(workdir)],
                                     stdout=subprocess.DEVNULL, stderr=open(workdir / "nginx.out", "wb"),
                                     start_new_session=True)
        time.sleep(0.5)
        if self.proc.poll() is not None:
            raise RuntimeError(f"nginx did not start: {(workdir / 'nginx.out').read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)


def load(urls: list[str], args: argparse.Namespace, out: Path, clients: int = 16) -> dict:
    """bench/load.py for --throughput-seconds, `clients` split over `urls` (one load process per URL,
    run together); the summed throughput and each process's latency."""
    procs = []
    for i, url in enumerate(urls):
        procs.append(subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "load.py"), "--url", url, "--concurrency", str(clients // len(urls)),
             "--requests", "100000", "--max-seconds", str(args.throughput_seconds), "--queries", args.queries,
             "--out", str(out.with_suffix(f".{i}.json"))], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"bench/load.py failed with {proc.returncode}")
    results = [json.loads(out.with_suffix(f".{i}.json").read_text()) for i in range(len(urls))]
    return {"throughput_rps": round(sum(r["throughput_rps"] or 0 for r in results), 1),
            "errors": sum(r["errors"] for r in results),
            "latency_ms": [{k: r["latency_ms"][k] for k in ("p50", "p99", "max")} for r in results]}


def served_version(url: str) -> str | None:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).json().get("index_version")
    except (httpx.HTTPError, ValueError):
        return None


def failures(clients: Clients, since: float, until: float | None = None) -> dict:
    rows = [r for r in clients.records["single"] if r[2] >= since and (until is None or r[2] < until)]
    bad = [r for r in rows if r[1] != 200]
    return {"requests": len(rows), "failed": len(bad), "failed_status": sorted({r[1] for r in bad})}


def export_kb(env: dict, path: Path) -> dict[str, tuple]:
    faq(env, "kb", "export", str(path))
    out: dict[str, tuple] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        answer, questions = out.get(row["faq_id"], (row.get("answer"), []))
        out[row["faq_id"]] = (answer or row.get("answer"), [*questions, row["question"]])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kb", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--encoder", default="minilm")
    p.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/test",
                   help="a PostgreSQL server to create the run's own database on")
    p.add_argument("--model-cache", default=str(REPO / "var" / "models"))
    p.add_argument("--workdir", default=None)
    p.add_argument("--throughput-seconds", type=float, default=20.0,
                   help="closed-loop load on one replica, then on both through the proxy (0: skip)")
    p.add_argument("--encoder-threads", type=int, default=None,
                   help="FAQ_ENCODER_THREADS of each replica (default: one per core each)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="faq-replicas-"))
    workdir.mkdir(parents=True, exist_ok=True)
    db_url, drop_database = fresh_database(args.pg_admin_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir / "data"), "FAQ_DATABASE_URL": db_url, "FAQ_ENCODER": args.encoder,
                "FAQ_MODEL_CACHE": args.model_cache, "FAQ_ADMIN_TOKEN": TOKEN, "FAQ_KB_POLL_SECONDS": str(POLL_S),
                "FAQ_QUERY_CACHE_SIZE": "0",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if args.encoder_threads:
        env["FAQ_ENCODER_THREADS"] = str(args.encoder_threads)
    report: dict = {"encoder_threads": args.encoder_threads or "one per core", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "encoder": args.encoder,
                    "cpu": cpu_info(), "cores": os.cpu_count(), "kb_poll_seconds": POLL_S,
                    "command": " ".join(["python", "bench/replicas.py", *(argv or sys.argv[1:])])}
    servers: list[Server] = []
    proxy: Proxy | None = None
    clients = Clients()
    try:
        faq(env, "db", "upgrade")
        faq(env, "kb", "import", args.kb)
        faq(env, "index", "build")
        ports = [free_port(), free_port()]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for name, port in zip("AB", ports):
            servers.append(Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env,
                                  workdir / f"replica-{name}.log"))
        for server, url in zip(servers, urls):
            server.wait_ready(url, 300)
        first_version = served_version(urls[0])
        if shutil.which("nginx"):
            proxy_port = free_port()
            proxy = Proxy(workdir, proxy_port, ports)
            front = f"http://127.0.0.1:{proxy_port}"
        else:
            front = urls[1]
        report["front"] = "nginx (docker/nginx.conf)" if proxy else "replica B directly (no nginx on PATH)"
        if args.throughput_seconds and proxy:
            # replicas per core: the same closed-loop load on one replica, then on both through the proxy
            report["throughput"] = {
                "one_replica": load(urls[:1], args, workdir / "load-one.json"),
                "two_replicas_8_clients_each": load(urls, args, workdir / "load-two.json"),
                "two_replicas_via_proxy": load([front], args, workdir / "load-proxy.json"),
            }
        report["rss_mb_after_throughput"] = [round(rss_mb(server.proc.pid) or 0) for server in servers]
        pool = [q.query for q in read_queries(args.queries)]
        rng = random.Random(0)
        for _ in range(4):
            clients.add("single", front, lambda: {"query": rng.choice(pool)})
        clients.start()
        time.sleep(3)

        # 1. a write on A, matchable on B
        t0 = time.monotonic()
        r = httpx.post(f"{urls[0]}/admin/faqs", json=PROBE, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 201, r.text
        seen = None
        while time.monotonic() - t0 < 30:
            m = httpx.post(f"{urls[1]}/match", json={"query": PROBE["questions"][0]}).json()
            if m["matches"] and m["matches"][0]["faq_id"] == PROBE["faq_id"]:
                seen = time.monotonic() - t0
                break
            time.sleep(0.05)
        report["write_on_A_matched_on_B_s"] = None if seen is None else round(seen, 2)

        # 2. a build as a separate job, picked up by both
        t1 = time.monotonic()
        faq(env, "index", "build")
        built = time.monotonic()
        switched: dict[str, float] = {}
        while time.monotonic() - built < 60 and len(switched) < 2:
            for name, url in zip("AB", urls):
                version = served_version(url)
                if name not in switched and version and version != first_version:
                    switched[name] = round(time.monotonic() - built, 2)
            time.sleep(0.1)
        time.sleep(1)
        report["build"] = {"build_s": round(built - t1, 1), "switched_after_build_s": switched,
                           "through_build_and_swap": failures(clients, t1)}

        # 3. kill A
        t2 = time.monotonic()
        os.killpg(servers[0].proc.pid, signal.SIGKILL)
        servers[0].proc.wait(10)
        time.sleep(10)
        report["kill_A"] = {"through_proxy_10s": failures(clients, t2),
                            "B_ready": served_version(urls[1]) is not None}
        clients.finish()
        report["whole_run"] = failures(clients, 0)

        # 4. nothing lost
        exported = export_kb(env, workdir / "export.jsonl")
        from kb.files import read_kb

        expected: dict[str, set[str]] = {}
        for record in read_kb(args.kb):
            expected.setdefault(record.faq_id, set()).add(record.question)
        expected[PROBE["faq_id"]] = set(PROBE["questions"])
        got = {faq_id: set(questions) for faq_id, (_, questions) in exported.items()}
        report["kb_export_matches_writes"] = got == expected
        report["kb_faqs"] = len(got)
        from sqlalchemy import bindparam, text

        from app.db.session import make_engine

        engine = make_engine(db_url)
        ids = list(clients.request_ids)
        count = text("SELECT count(*) FROM query_log WHERE request_id IN :ids").bindparams(bindparam("ids", expanding=True))
        with engine.connect() as conn:
            logged = sum(conn.execute(count, {"ids": ids[i:i + 500]}).scalar() for i in range(0, len(ids), 500))
        engine.dispose()
        report["query_log"] = {"answered": len(ids), "logged": logged, "lost": len(ids) - logged,
                               "note": "replica A was killed with SIGKILL: rows it had not flushed (<= 0.5 s) are lost"}
    finally:
        clients.finish()
        if proxy:
            proxy.stop()
        for server in servers:
            server.stop()
        drop_database()
    out = Path(args.out or REPO / "bench" / "results" / f"replicas-{args.encoder}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    md = [f"# Two replicas behind nginx ({report['date']}, {args.encoder}, PostgreSQL)", "",
          f"CPU: {report['cpu']['cpu_model']} ({report['cores']} cores)", "", f"Command: `{report['command']}`", "",
          "```json", json.dumps({k: v for k, v in report.items() if k not in ('cpu', 'command')}, indent=1), "```", ""]
    out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
