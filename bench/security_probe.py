"""A hostile probe of the console and the many-KB surface, against a real `faq serve` on loopback.

    python bench/security_probe.py [--sign-ins 10000] [--out bench/results/security-probe]

Three KBs (shop, bank, travel: a third of the demo KB each, built with MiniLM), a KB admin and read
token each, FAQ_ADMIN_TOKEN, the console, and the settings an exposed deployment runs with:
FAQ_MATCH_REQUIRES_KEY=1, FAQ_MAX_RESIDENT_KBS=2, FAQ_METRICS_TOKEN, FAQ_METRICS_KB_LABELS=false.
Clients speak HTTP from several loopback addresses (127.0.0.2 and up: the server sees each as its own
client). Every answer is kept, and each check reports what it measured:

- throttle: 200 wrong console sign-ins and 200 wrong bearer tokens from one address; then the right
  token from another address;
- readyz: 15 anonymous `/kbs/{kb}/readyz` per KB and per unknown name: KB loads (the server's log) and
  the distinct answers;
- metrics: `/metrics` without and with the token, and whether a KB name appears in it;
- imports: hostile KB files through the console's import (oversized CSV fields, deep JSON nesting, huge
  integers, random bytes) and hostile JSON bodies to the API;
- sessions: sessions of KB bank and of the admin, then `--sign-ins` console sign-ins with KB shop's token:
  are bank's and the admin's sessions still valid;
- export: FAQs whose fields start with = + - @ (added through the admin API), `faq kb export shop.csv`:
  formula cells, and the round trip through `faq kb import` into a new KB and `faq kb export` again;
- console errors: 404 / 405 / 413 under /console: HTML with the security headers;
- sound: a KB token on another KB, a form without its CSRF token, an FAQ holding markup;
- 5xx: every answer of the whole probe with a status >= 500 (none may be).

Writes <out>.json and <out>.md; exits 1 when a check fails.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.compare import Server, free_port  # noqa: E402
from bench.reports import write_report  # noqa: E402
from bench.hostile import faq  # noqa: E402
from app.api.console import SECURITY_HEADERS  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

ADMIN = "security-probe-admin-token-0123456789abcdef"
METRICS = "security-probe-metrics-token-0123456789ab"
KBS = ("shop", "bank", "travel")
FORMULAS = ("=", "+", "-", "@")


class Probe:
    """HTTP clients bound to distinct loopback addresses, every answer recorded."""

    def __init__(self, url: str):
        self.url = url
        self.answers: list[tuple[str, str, int]] = []
        self._next = 2

    def client(self) -> httpx.Client:
        address = f"127.0.0.{self._next}"
        self._next += 1
        client = httpx.Client(base_url=self.url, timeout=60,
                              transport=httpx.HTTPTransport(local_address=address),
                              event_hooks={"response": [self._record]})
        client.address = address  # type: ignore[attr-defined]
        return client

    def _record(self, response: httpx.Response) -> None:
        self.answers.append((response.request.method, response.request.url.path, response.status_code))

    def server_errors(self) -> list[tuple[str, str, int]]:
        return [a for a in self.answers if a[2] >= 500]


def status_of(send) -> int:
    """The answer's status, or 0 when the server dropped the connection instead of answering."""
    try:
        return send().status_code
    except httpx.TransportError:
        return 0


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    return found.group(1) if found else ""


def sign_in(client: httpx.Client, token: str) -> httpx.Response:
    client.cookies.clear()
    page = client.get("/console/login")
    return client.post("/console/login", data={"csrf": csrf_of(page.text), "token": token}, follow_redirects=False)


def statuses(responses: list[httpx.Response]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in responses:
        counts[str(r.status_code)] = counts.get(str(r.status_code), 0) + 1
    return counts


# -- checks -------------------------------------------------------------------------------------------
def check_throttle(probe: Probe, tokens: dict) -> dict:
    guesser, other = probe.client(), probe.client()
    sign_ins = [sign_in(guesser, f"wrong-guess-{i:04d}") for i in range(200)]
    first_429 = next((i for i, r in enumerate(sign_ins) if r.status_code == 429), None)
    retry_after = sorted({r.headers.get("retry-after") for r in sign_ins if r.status_code == 429})
    right_elsewhere = sign_in(other, ADMIN).status_code
    bearer = [guesser.get("/kbs/shop/admin/faqs", headers={"authorization": f"Bearer nope-{i}"}) for i in range(200)]
    bearer_first_429 = next((i for i, r in enumerate(bearer) if r.status_code == 429), None)
    right_bearer_elsewhere = other.get("/kbs/shop/admin/faqs", headers={"authorization": f"Bearer {tokens['shop']['admin']}"})
    result = {"sign_ins": statuses(sign_ins), "sign_ins_before_429": first_429, "retry_after": retry_after,
              "right_token_from_another_address": right_elsewhere,
              "bearer": statuses(bearer), "bearer_before_429": bearer_first_429,
              "right_bearer_from_another_address": right_bearer_elsewhere.status_code}
    result["ok"] = (first_429 is not None and first_429 <= 10 and bearer_first_429 is not None
                    and bearer_first_429 <= 10 and right_elsewhere == 303 and right_bearer_elsewhere.status_code == 200
                    and all(r.headers.get("retry-after") for r in sign_ins + bearer if r.status_code == 429))
    return result


def kb_loads(server: Server) -> int:
    return len(re.findall(r"loaded KB \S+ in", server.log_path.read_text(errors="replace")))


def check_readyz(probe: Probe, server: Server) -> dict:
    anonymous = probe.client()
    before = kb_loads(server)
    answers: dict[str, set] = {}
    for kb in (*KBS, "unknown-kb", "nope"):
        for _ in range(15):
            r = anonymous.get(f"/kbs/{kb}/readyz")
            # the answer may repeat the name it was asked about, which tells the caller nothing new
            answers.setdefault(kb, set()).add((r.status_code, r.text.replace(kb, "{kb}"),
                                               r.headers.get("www-authenticate")))
    loads = kb_loads(server) - before
    distinct = {answer for seen in answers.values() for answer in seen}
    return {"requests": 15 * len(answers), "kb_loads": loads, "distinct_answers": len(distinct),
            "answers": sorted({(status, text[:60]) for status, text, _ in distinct}),
            "ok": loads == 0 and len(distinct) == 1}


def check_metrics(probe: Probe, tokens: dict) -> dict:
    client = probe.client()
    for kb in KBS[:2]:  # traffic on two KBs, which per-KB labels would name
        client.post(f"/kbs/{kb}/match", json={"query": "how do I reset my password"},
                    headers={"authorization": f"Bearer {tokens[kb]['read']}"})
    anonymous = client.get("/metrics")
    with_token = client.get("/metrics", headers={"authorization": f"Bearer {METRICS}"})
    named = [kb for kb in KBS if f'"{kb}"' in with_token.text]
    return {"anonymous": anonymous.status_code, "with_token": with_token.status_code, "kb_names_in_metrics": named,
            "ok": anonymous.status_code == 401 and with_token.status_code == 200 and not named}


HOSTILE_FILES = {
    "csv-header-field-200k.csv": lambda: b"faq_id,question,answer,tags," + b"x" * 200_000 + b"\nf1,q,a,\n",
    "csv-row-field-200k.csv": lambda: b"faq_id,question,answer,tags\nf1,\"" + b"y" * 200_000 + b"\",a,\n",
    "jsonl-nested-5000.jsonl": lambda: b'{"faq_id": "f1", "question": "q", "answer": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
    "jsonl-int-5000-digits.jsonl": lambda: b'{"faq_id": "f1", "question": "q", "answer": ' + b"9" * 5000 + b"}\n",
    "jsonl-random-bytes.jsonl": lambda: bytes(range(256)) * 40,
    "csv-unclosed-quote.csv": lambda: b'faq_id,question,answer,tags\nf1,"never closed,a,\n',
    "csv-nul.csv": lambda: b"faq_id,question,answer,tags\nf1,q\x00q,a,\n",
}


def check_imports(probe: Probe, tokens: dict) -> dict:
    client = probe.client()
    assert sign_in(client, tokens["shop"]["admin"]).status_code == 303
    page = client.get("/console/kbs/shop/import")
    csrf = csrf_of(page.text)
    files = {}
    for name, make in HOSTILE_FILES.items():
        files[name] = status_of(lambda name=name, make=make: client.post(
            "/console/kbs/shop/import", data={"csrf": csrf}, files={"file": (name, make())}))
    bodies = {
        "nested-20000": b'{"query": ' + b"[" * 20000 + b"]" * 20000 + b"}",
        "int-5000-digits": b'{"query": "x", "top_k": ' + b"9" * 5000 + b"}",
        "float-1e999": b'{"query": "x", "threshold": 1e999}',
    }
    api = {}
    for name, body in bodies.items():
        api[name] = status_of(lambda body=body: client.post("/kbs/shop/match", content=body, headers={
            "content-type": "application/json", "authorization": f"Bearer {tokens['shop']['read']}"}))
    return {"console_import": files, "api_bodies": api,
            "ok": all(400 <= s < 500 for s in [*files.values(), *api.values()])}


def check_sessions(probe: Probe, tokens: dict, n: int) -> dict:
    bank, admin = probe.client(), probe.client()
    assert sign_in(bank, tokens["bank"]["admin"]).status_code == 303
    assert sign_in(admin, ADMIN).status_code == 303
    flood = probe.client()
    t0 = time.perf_counter()
    opened = 0
    for _ in range(n):
        flood.cookies.clear()
        r = flood.post("/console/login", data={"csrf": csrf_of(flood.get("/console/login").text),
                                               "token": tokens["shop"]["admin"]}, follow_redirects=False)
        opened += r.status_code == 303
    seconds = time.perf_counter() - t0
    bank_page = bank.get("/console/kbs/bank/faqs", follow_redirects=False).status_code
    admin_page = admin.get("/console/kbs/travel/faqs", follow_redirects=False).status_code
    return {"sign_ins_with_shop_token": opened, "seconds": round(seconds, 1), "bank_session_page": bank_page,
            "admin_session_page": admin_page, "ok": opened == n and bank_page == 200 and admin_page == 200}


def check_export(probe: Probe, tokens: dict, env: dict, workdir: Path) -> dict:
    client = probe.client()
    admin = {"authorization": f"Bearer {tokens['shop']['admin']}"}
    for i, lead in enumerate(FORMULAS):
        r = client.post("/kbs/shop/admin/faqs", headers=admin, json={
            "faq_id": f"{lead}formula-{i}", "answer": f"{lead}HYPERLINK(\"http://evil.example\",\"click\")",
            "questions": [f"{lead}1+1 is what {i}", f"'{lead}quoted already {i}"], "tags": [f"{lead}tag{i}"]})
        assert r.status_code in (200, 201), r.text
    path = workdir / "shop-export.csv"
    faq(env, "kb", "export", str(path), "--kb", "shop")
    text = path.read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text)))
    formula_cells = [c for row in rows[1:] for c in row if c[:1] in (*FORMULAS, "\t", "\r")]
    faq(env, "kb", "import", str(path), "--kb", "shop-copy")
    faq(env, "kb", "export", str(workdir / "shop-copy.csv"), "--kb", "shop-copy")
    lossless = (workdir / "shop-copy.csv").read_text(encoding="utf-8") == text
    return {"rows": len(rows) - 1, "formula_leading_faqs": len(FORMULAS), "formula_cells": len(formula_cells),
            "round_trip_lossless": lossless, "ok": not formula_cells and lossless}


def check_console_errors(probe: Probe, tokens: dict) -> dict:
    client = probe.client()
    answers = {"404 GET /console/nope": client.get("/console/nope"),
               "405 DELETE /console/kbs": client.delete("/console/kbs"),
               "413 POST /console/login": client.post("/console/login", content=b"x" * 200_000,
                                                      headers={"content-type": "application/x-www-form-urlencoded"})}
    result = {}
    for name, r in answers.items():
        html = r.headers.get("content-type", "").startswith("text/html")
        headers = all(h in r.headers for h in SECURITY_HEADERS)
        result[name] = {"status": r.status_code, "html": html, "security_headers": headers}
    result["ok"] = all(v["html"] and v["security_headers"] and str(v["status"]) == k[:3] for k, v in result.items())
    return result


def check_sound(probe: Probe, tokens: dict) -> dict:
    client = probe.client()
    other_kb = client.get("/kbs/bank/admin/faqs", headers={"authorization": f"Bearer {tokens['shop']['admin']}"})
    read_on_admin = client.get("/kbs/shop/admin/faqs", headers={"authorization": f"Bearer {tokens['shop']['read']}"})
    assert sign_in(client, tokens["shop"]["admin"]).status_code == 303
    no_csrf = client.post("/console/kbs/shop/faqs/delete", data={"faq_id": "anything"}, follow_redirects=False)
    console_other_kb = client.get("/console/kbs/bank/faqs", follow_redirects=False)
    markup = "<script>window.__pwned=1</script>"
    client.post("/kbs/shop/admin/faqs", headers={"authorization": f"Bearer {tokens['shop']['admin']}"},
                json={"faq_id": "markup", "answer": markup, "questions": [markup + " question"]})
    listing = client.get("/console/kbs/shop/faqs", params={"q": "markup"})
    escaped = markup not in listing.text and "&lt;script&gt;" in listing.text
    result = {"kb_token_on_another_kb": other_kb.status_code, "read_token_on_admin": read_on_admin.status_code,
              "form_without_csrf": no_csrf.status_code, "console_other_kb": console_other_kb.status_code,
              "markup_escaped": escaped}
    result["ok"] = (other_kb.status_code == 403 and read_on_admin.status_code in (401, 403)
                    and no_csrf.status_code == 403 and console_other_kb.status_code in (403, 404) and escaped)
    return result


# -- setup and report ---------------------------------------------------------------------------------
def prepare(env: dict, workdir: Path) -> dict:
    lines = (REPO / "app" / "demo" / "faq.jsonl").read_text(encoding="utf-8").splitlines()
    by_faq: dict[str, list[str]] = {}
    for line in lines:
        if line.strip():
            by_faq.setdefault(json.loads(line)["faq_id"], []).append(line)
    tokens: dict = {}
    for i, kb in enumerate(KBS):
        path = workdir / f"{kb}.jsonl"
        path.write_text("\n".join(line for j, group in enumerate(by_faq.values()) if j % len(KBS) == i
                                  for line in group) + "\n", encoding="utf-8")
        faq(env, "kb", "import", str(path), "--kb", kb)
        faq(env, "index", "build", "--kb", kb)
        tokens[kb] = {kind: faq(env, "kb", "token", "--kb", kb, "--kind", kind).split()[0]
                      for kind in ("admin", "read")}
    return tokens


def render(report: dict) -> str:
    md = [f"# Security probe ({report['date']})", "", f"CPU: {report['cpu']}. Command: `{report['command']}`.",
          f"Settings: {report['settings']}.", "", "| check | ok | measured |", "|---|---|---|"]
    for name, result in report["checks"].items():
        shown = {k: v for k, v in result.items() if k != "ok"}
        md.append(f"| {name} | {'yes' if result['ok'] else '**no**'} | `{json.dumps(shown)}` |")
    md += ["", f"Answers in all: {report['answers']}; with a status >= 500: {len(report['server_errors'])}."]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sign-ins", type=int, default=10_000, help="console sign-ins with one KB's token")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "security-probe"))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="security-probe-"))
    workdir.mkdir(parents=True, exist_ok=True)
    settings = {"FAQ_ADMIN_TOKEN": ADMIN, "FAQ_MATCH_REQUIRES_KEY": "1", "FAQ_MAX_RESIDENT_KBS": "2",
                "FAQ_METRICS_TOKEN": METRICS, "FAQ_METRICS_KB_LABELS": "false"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir / "data"), "FAQ_ENCODER": "minilm", "FAQ_TORCH_THREADS": "1",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **settings})
    report: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
                    "command": " ".join(["python", "bench/security_probe.py", *(argv or sys.argv[1:])]),
                    "settings": ", ".join(f"{k}={'...' if 'TOKEN' in k else v}" for k, v in settings.items()),
                    "checks": {}}
    faq(env, "db", "upgrade")
    tokens = prepare(env, workdir)
    port = free_port()
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / "serve.log")
    url = f"http://127.0.0.1:{port}"
    try:
        server.wait_ready(url, 300, path="/healthz")  # the default KB has no index: /readyz stays 503
        probe = Probe(url)
        checks = report["checks"]
        checks["readyz (anonymous)"] = check_readyz(probe, server)
        checks["throttle"] = check_throttle(probe, tokens)
        checks["metrics"] = check_metrics(probe, tokens)
        checks["hostile imports and bodies"] = check_imports(probe, tokens)
        checks["console errors"] = check_console_errors(probe, tokens)
        checks["sound (isolation, CSRF, escaping)"] = check_sound(probe, tokens)
        checks["CSV export"] = check_export(probe, tokens, env, workdir)
        checks[f"sessions ({args.sign_ins} sign-ins)"] = check_sessions(probe, tokens, args.sign_ins)
        report["answers"] = len(probe.answers)
        dropped = [name for name, status in checks["hostile imports and bodies"]["console_import"].items() if not status]
        report["server_errors"] = probe.server_errors() + [("POST", f"import {name}", 0) for name in dropped]
        checks["no 5xx"] = {"answers": len(probe.answers), "5xx": len(probe.server_errors()),
                            "tracebacks_in_log": server.log_path.read_text(errors="replace").count("Traceback"),
                            "dropped_connections": len(dropped), "ok": not report["server_errors"]}
    finally:
        server.stop()
    write_report(Path(args.out), report, render(report))
    return 0 if all(c["ok"] for c in report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
