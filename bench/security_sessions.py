"""The security probe's checks without its server: the console's session cap under a flood of sign-ins
(`Sessions.open`, SQLite or PostgreSQL) and the console cookie behind nginx."""
from __future__ import annotations

import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.security_checks import csrf_of  # noqa: E402
from bench.serving import Server, free_port  # noqa: E402


@contextlib.contextmanager
def scratch_database(backend: str, postgres: str | None) -> Iterator[str]:
    """A fresh, migrated-later database: SQLite in a temporary folder, or a new database on `postgres`'s server,
    dropped after."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="security-probe-sessions-") as tmp:
            yield f"sqlite:///{tmp}/sessions.db"
        return
    import psycopg2
    from sqlalchemy.engine import make_url

    admin = psycopg2.connect(make_url(postgres).set(drivername="postgresql").render_as_string(hide_password=False))
    admin.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    name = f"faq_probe_sessions_{uuid.uuid4().hex[:12]}"
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield make_url(postgres).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def session_flood(backend: str, url: str, sign_ins: int, kept_b: int, kept_admin: int) -> dict:
    """KB B's and the admin's sessions, then `sign_ins` of KB A through `Sessions.open`, each timed."""
    from app.api.console import sessions as sessions_module
    from app.api.console.sessions import Sessions
    from app.store import FaqStore
    from migrations import runner

    runner.upgrade(url)
    with FaqStore(url) as store:
        for kb in ("kb-a", "kb-b"):
            store.catalog.create(kb)
        a_token = store.catalog.issue_token("kb-a", "admin")[0]
        b_token = store.catalog.issue_token("kb-b", "admin")[0]
        sessions = Sessions(store.console_sessions)
        others = [sessions.open("kb-b", b_token) for _ in range(kept_b)]
        others += [sessions.open(None, admin_token="the-admin-token") for _ in range(kept_admin)]
        times = []
        start = time.perf_counter()
        for _ in range(sign_ins):
            t0 = time.perf_counter()
            sessions.open("kb-a", a_token)
            times.append(time.perf_counter() - t0)
        total_s = time.perf_counter() - start
        valid = [sessions.get(s.id) is not None for s in others]
        with store.engine.connect() as conn:
            sizes = dict(conn.exec_driver_sql("SELECT kb, count(*) FROM console_sessions GROUP BY kb").all())
    times.sort()
    row = {"backend": backend, "sign_ins_kb_a": sign_ins, "cap_per_kb": sessions_module.MAX_SESSIONS,
           "cap_total": sessions_module.MAX_SESSIONS_TOTAL,
           "kb_b_still_valid": f"{sum(valid[:kept_b])}/{kept_b}",
           "admin_still_valid": f"{sum(valid[kept_b:])}/{kept_admin}",
           "kb_a_sessions_left": int(sizes.get("kb-a", 0)), "table_rows": int(sum(sizes.values())),
           "total_s": round(total_s, 2), "sign_in_p50_ms": round(statistics.median(times) * 1000, 3),
           "sign_in_p99_ms": round(times[int(0.99 * (len(times) - 1))] * 1000, 3)}
    row["ok"] = all(valid) and row["kb_a_sessions_left"] <= row["cap_per_kb"]
    return row


def check_session_cap(floods: list[int], postgres: str | None, kept_b: int = 100, kept_admin: int = 10) -> dict:
    """One KB's flood of sign-ins against the per-KB session cap, in this process on fresh databases."""
    table = []
    for backend in ["sqlite"] + (["postgresql"] if postgres else []):
        for n in floods:
            with scratch_database(backend, postgres) as url:
                table.append(session_flood(backend, url, n, kept_b, kept_admin))
            print(f"session_cap  {backend} {n}: {table[-1]}", flush=True)
    return {"runs": len(table), "within_cap_and_others_valid": all(r["ok"] for r in table),
            "slowest_sign_in_p99_ms": max(r["sign_in_p99_ms"] for r in table), "table": table,
            "ok": all(row["ok"] for row in table)}


#: the sign-ins behind the proxy come from here; nginx itself connects from 127.0.0.1, which the default
#: FAQ_TRUSTED_PROXIES trusts
PROXY_CLIENT = "127.0.0.2"
PROXY_TOKEN = "security-probe-proxy-token-0123456789abcdef"


def cookie_of_sign_in(base: str, headers: dict | None = None) -> dict:
    """Sign in to the console at `base` from PROXY_CLIENT; the session cookie's flags as the server set them."""
    transport = httpx.HTTPTransport(local_address=PROXY_CLIENT, verify=False)
    with httpx.Client(base_url=base, transport=transport, headers=headers or {}, timeout=30) as client:
        page = client.get("/console/login")
        r = client.post("/console/login", data={"csrf": csrf_of(page.text), "token": PROXY_TOKEN},
                        follow_redirects=False)
        cookies = [v for k, v in r.headers.multi_items() if k.lower() == "set-cookie" and v.startswith("faq_console=")]
        flags = [p.strip().lower() for p in cookies[0].split(";")[1:]] if cookies else []
        landing = client.get(r.headers.get("location", "/console"))
        return {"status": r.status_code, "cookie_set": bool(cookies), "secure": "secure" in flags,
                "httponly": "httponly" in flags,
                "samesite": next((f.split("=")[1] for f in flags if f.startswith("samesite=")), None),
                "signed_in_page": landing.status_code}


def proxy_server(workdir: Path, name: str, trusted: str | None) -> tuple[Server, str]:
    """A `faq serve` of its own (fresh data, no index: the console's sign-in needs none)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir / name), "FAQ_ADMIN_TOKEN": PROXY_TOKEN, "FAQ_ENCODER": "minilm",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if trusted is not None:
        env["FAQ_TRUSTED_PROXIES"] = trusted
    port = free_port()
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / f"{name}.log")
    url = f"http://127.0.0.1:{port}"
    try:
        server.wait_ready(url, 120, path="/healthz")
    except RuntimeError:
        server.stop()
        raise
    return server, url


def seen_clients(server: Server) -> list[str]:
    """The client addresses in uvicorn's access log lines for the sign-in POSTs."""
    return re.findall(r'INFO:\s+([0-9a-f.:]+):\d+ - "POST /console/login', server.log_tail(500))


def check_proxy_cookie(workdir: Path) -> dict:
    """The console's cookie and the client address behind nginx running docker/nginx.conf (bench/replicas.py
    `Proxy`: its https listener uses a self-signed pair from docker/tls-cert.sh, as the compose `tls`
    service makes it), and straight to a server that trusts another proxy, with forged headers."""
    from bench.replicas import Proxy

    workdir.mkdir(parents=True, exist_ok=True)
    forged = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    cases, servers, proxy = {}, [], None
    try:
        server, url = proxy_server(workdir, "proxied", None)
        servers.append(server)
        http_port = free_port()
        port = int(url.rsplit(":", 1)[1])
        proxy = Proxy(workdir, http_port, [port, port])
        cases["nginx https (compose proxy, :8443)"] = cookie_of_sign_in(f"https://127.0.0.1:{proxy.tls_port}")
        cases["nginx http (:8080)"] = cookie_of_sign_in(f"http://127.0.0.1:{http_port}")
        untrusted, untrusted_url = proxy_server(workdir, "untrusted", "10.9.8.7")
        servers.append(untrusted)
        cases["direct, forged headers, proxy list 10.9.8.7"] = cookie_of_sign_in(untrusted_url, forged)
        clients = {"FAQ_TRUSTED_PROXIES unset (127.0.0.1,::1), through nginx": seen_clients(server),
                   "FAQ_TRUSTED_PROXIES=10.9.8.7 (forged)": seen_clients(untrusted)}
    finally:
        if proxy is not None:
            proxy.stop()
        for s in servers:
            s.stop()
    secure = [case["secure"] for case in cases.values()]
    ok = (all(case["status"] == 303 and case["httponly"] for case in cases.values()) and secure == [True, False, False]
          and all(set(seen) == {PROXY_CLIENT} for seen in clients.values()))
    return {"clients_seen": clients, "table": [{"sign-in through": name, **case} for name, case in cases.items()],
            "ok": ok}
