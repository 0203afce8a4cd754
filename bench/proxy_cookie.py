"""The console's cookie and the client address behind the compose proxy, with real nginx and `faq serve`.

    python bench/proxy_cookie.py [--out bench/results/proxy-cookie]

One `faq serve` (fresh data dir, SQLite, no index: the console's sign-in needs none) behind nginx
running docker/nginx.conf with loopback ports put in (bench/replicas.py `Proxy`: its https listener
uses a self-signed pair from docker/tls-cert.sh, as the compose `tls` service makes it). It signs in
to the console with FAQ_ADMIN_TOKEN:

- through nginx's https listener (what a browser does with the compose `replicas` profile),
- through nginx's plain http listener,
- directly, with a forged `X-Forwarded-Proto: https` and `X-Forwarded-For`, to a server whose
  FAQ_TRUSTED_PROXIES names another address only,

from the source address 127.0.0.2 (nginx itself connects from 127.0.0.1, which the default
FAQ_TRUSTED_PROXIES trusts), and records each sign-in's cookie flags and the client address the
server saw (its access log).
Needs nginx on the PATH (Debian: nginx-light). Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.compare import Server, free_port  # noqa: E402
from bench.reports import write_report  # noqa: E402
from bench.replicas import Proxy  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

TOKEN = "proxy-cookie-admin-token-0123456789abcdef"
COOKIE = "faq_console"
CLIENT = "127.0.0.2"


def sign_in(base: str, headers: dict | None = None) -> dict:
    """Sign in to the console at `base` from 127.0.0.2; the session cookie's flags as the server set them."""
    transport = httpx.HTTPTransport(local_address=CLIENT, verify=False)
    with httpx.Client(base_url=base, transport=transport, headers=headers or {}, timeout=30) as client:
        page = client.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        r = client.post("/console/login", data={"csrf": csrf, "token": TOKEN}, follow_redirects=False)
        cookies = [v for k, v in r.headers.multi_items() if k.lower() == "set-cookie" and v.startswith(COOKIE + "=")]
        flags = [p.strip().lower() for p in cookies[0].split(";")[1:]] if cookies else []
        landing = client.get(r.headers.get("location", "/console"))
        return {"status": r.status_code, "cookie_set": bool(cookies), "secure": "secure" in flags,
                "httponly": "httponly" in flags, "samesite": next((f.split("=")[1] for f in flags
                                                                    if f.startswith("samesite=")), None),
                "signed_in_page": landing.status_code}


def serve(workdir: Path, name: str, trusted: str | None) -> tuple[Server, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir / name), "FAQ_ADMIN_TOKEN": TOKEN, "FAQ_ENCODER": "minilm"})
    if trusted is not None:
        env["FAQ_TRUSTED_PROXIES"] = trusted
    port = free_port()
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / f"{name}.log")
    url = f"http://127.0.0.1:{port}"
    server.wait_ready(url, 120, path="/healthz")  # no index: /readyz stays 503
    return server, url


def seen_clients(server: Server) -> list[str]:
    """The client addresses in uvicorn's access log lines for the sign-in POSTs."""
    return re.findall(r'INFO:\s+([0-9a-f.:]+):\d+ - "POST /console/login', server.log_tail(500))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "proxy-cookie"))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    if not shutil.which("nginx"):
        print("nginx is not on the PATH (Debian: apt-get install nginx-light)", file=sys.stderr)
        return 2
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="proxy-cookie-"))
    workdir.mkdir(parents=True, exist_ok=True)
    forged = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    report: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
                    "command": " ".join(["python", "bench/proxy_cookie.py", *(argv or sys.argv[1:])]), "cases": {}}
    servers: list[Server] = []
    proxy = None
    try:
        server, url = serve(workdir, "default", None)
        servers.append(server)
        http_port = free_port()
        port = int(url.rsplit(":", 1)[1])
        proxy = Proxy(workdir, http_port, [port, port])
        report["cases"]["nginx https (compose proxy, :8443)"] = sign_in(f"https://127.0.0.1:{proxy.tls_port}")
        report["cases"]["nginx http (:8080)"] = sign_in(f"http://127.0.0.1:{http_port}")
        untrusted, untrusted_url = serve(workdir, "untrusted", "10.9.8.7")
        servers.append(untrusted)
        report["cases"]["direct, forged headers, proxy list 10.9.8.7"] = sign_in(untrusted_url, forged)
        report["clients_seen"] = {"FAQ_TRUSTED_PROXIES unset (127.0.0.1,::1), through nginx": seen_clients(server),
                                  "FAQ_TRUSTED_PROXIES=10.9.8.7 (forged)": seen_clients(untrusted)}
    finally:
        if proxy is not None:
            proxy.stop()
        for s in servers:
            s.stop()
    md = [f"# Console cookie behind the proxy ({report['date']})", "", f"CPU: {report['cpu']}. "
          f"Command: `{report['command']}`", "", "| sign-in through | status | Secure | HttpOnly | SameSite |",
          "|---|---|---|---|---|"]
    for name, case in report["cases"].items():
        md.append(f"| {name} | {case['status']} | {case['secure']} | {case['httponly']} | {case['samesite']} |")
    md += ["", "Client addresses the server saw for the sign-in POSTs:", ""]
    md += [f"- {k}: {', '.join(v)}" for k, v in report["clients_seen"].items()]
    write_report(Path(args.out), report, "\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
