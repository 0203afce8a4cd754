"""A hostile probe of the console, the many-KB surface and every import path, against a real `faq serve` on loopback.

    python -m bench run security_probe [--sign-ins 10000] [--only NAME[,NAME]] [--out bench/results/security-probe]
        [--requests 15] [--random 6] [--seed 7] [--cap-flood 11000] [--postgres URL] [--nginx]

Three KBs (shop, bank, travel: a third of the demo KB each, built with MiniLM), a KB admin and read
token each, FAQ_ADMIN_TOKEN, the console, and the settings an exposed deployment runs with:
FAQ_MATCH_REQUIRES_KEY=1, FAQ_MAX_RESIDENT_KBS=2, FAQ_METRICS_TOKEN, FAQ_METRICS_KB_LABELS=false.
Clients speak HTTP from several loopback addresses (127.0.0.2 and up: the server sees each as its own
client). Every answer is kept, and each check reports what it measured (`--only` names the checks to run):

- readyz: `--requests` anonymous `/kbs/{kb}/readyz` to the resident KB (shop, after one /match with
  FAQ_ADMIN_TOKEN), to bank and travel and to unknown names, interleaved: KB loads and unloads (from
  /metrics), statuses and the distinct answers (status, headers and body, the name blanked out); then one
  readyz of bank with FAQ_ADMIN_TOKEN (a health check with a token may load a KB);
- readyz_open: the same against a second `faq serve` on the same data with FAQ_MATCH_REQUIRES_KEY=false;
- throttle: 200 wrong console sign-ins, 200 wrong KB bearer tokens (/kbs/shop/admin/faqs) and 200 wrong
  admin bearer tokens (/admin/faqs), each from its own address: statuses, guesses before the first 429,
  seconds, Retry-After, then the right token from the same address and from another one;
  `faq_auth_throttled_total` after;
- metrics: `/metrics` without and with the token, and whether a KB name appears in it;
- bodies: hostile JSON bodies to /match (nested 20,000 deep, a 5,000-digit integer, 1e999);
- files: hostile KB files and archives (CSV fields over the csv module's limit, JSONL nested up to
  100,000 deep, integers of 4,301 and 5,000 digits, broken quotes, bad UTF-8, NUL, lone surrogates, BOMs,
  UTF-16, garbage, `--random` files of seeded random bytes; ZIPs of 8 and 64 MiB of newlines or tabs,
  20,000 members, XLSX with broken XML, an entity bomb, an external entity or a million rows, TSV cells
  and Rasa YAML nested 3,000 deep) and valid controls, each through `read_any` (in a child process),
  `faq kb import` into a new KB (exit code, seconds, peak RSS, whether the KB was created) and the
  console's import dry run (status, seconds, the server's peak RSS growth);
- console_errors: 404 / 405 / 413 under /console: HTML with the security headers;
- sound: a KB token on another KB, a form without its CSRF token, an FAQ holding markup;
- export: FAQs whose fields start with = + - @ (added through the admin API), `faq kb export shop.csv`:
  formula cells, and the round trip through `faq kb import` into a new KB and `faq kb export` again;
- compat: hostile bodies (userId of 129-201 characters, JSON nested 3,000 and 20,000 deep, wrong types,
  lone surrogates, NUL, bad UTF-8, huge numbers, 60 filters, other scripts) to `generateAnswer` and
  `:query-knowledgebases` on one pooled client, each followed by a valid question that must be answered;
- odd_ids: FAQs with ids `²`, `①`, `٣`, then both compat routes and the QnA Maker / Azure exports;
  small-talk answers with a lone surrogate or NUL (refused) and a greeting to /match;
- languages: questions in Japanese, Chinese, Hebrew, Russian, Arabic, Korean and English with umlauts;
- sessions: sessions of KB bank and of the admin, then `--sign-ins` console sign-ins with KB shop's token:
  are bank's and the admin's sessions still valid;
- session_cap: no server; `Sessions.open` (what the sign-in form calls, with the real caps) on a fresh
  SQLite database (and a scratch PostgreSQL one with `--postgres`): 100 sessions of KB B and 10 of the
  admin, then each `--cap-flood` count of sign-ins with KB A's token (the default passes the cap of 10,000
  by 1,000; each sign-in past it ends the oldest, so 20,000 take minutes): sign-in p50 / p99, KB A's
  sessions left, and whether every KB B and admin session is still valid;
- proxy_cookie: with `--nginx` only (skipped otherwise, or when nginx is not on the PATH): console
  sign-ins from 127.0.0.2 through nginx running docker/nginx.conf (https and http listeners) and straight
  to a server with forged X-Forwarded-* headers that trusts another proxy: the cookie's flags and the
  client address the server saw;
- no 5xx: every answer of the whole run with a status >= 500 (a readyz's 503 for a KB not loaded aside) and
  every dropped connection (none may be); closes every run that started the server.

Writes <out>.json and <out>.md; exits 1 when a check fails (a skipped check does not).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.reports import write_report  # noqa: E402
from bench.serving import Server, faq, free_port  # noqa: E402
from app.api.console import SECURITY_HEADERS  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

ADMIN = "security-probe-admin-token-0123456789abcdef"
METRICS = "security-probe-metrics-token-0123456789ab"
KBS = ("shop", "bank", "travel")
UNKNOWN = ("unknown-kb", "nope", "kb-x")
FORMULAS = ("=", "+", "-", "@")


class Probe:
    """HTTP clients bound to distinct loopback addresses, every answer and dropped connection recorded."""

    def __init__(self, url: str):
        self.url = url
        self.answers: list[tuple[str, str, int]] = []
        self.dropped: list[str] = []
        self._next = 2

    def client(self, url: str | None = None) -> httpx.Client:
        address = f"127.0.0.{self._next}"
        self._next += 1
        client = httpx.Client(base_url=url or self.url, timeout=60,
                              transport=httpx.HTTPTransport(local_address=address),
                              event_hooks={"response": [self._record]})
        client.address = address  # type: ignore[attr-defined]
        return client

    def _record(self, response: httpx.Response) -> None:
        self.answers.append((response.request.method, response.request.url.path, response.status_code))

    def status(self, send: Callable[[], httpx.Response], what: str) -> int:
        """The answer's status, or 0 when the server dropped the connection instead of answering."""
        try:
            return send().status_code
        except httpx.TransportError:
            self.dropped.append(what)
            return 0

    def server_errors(self) -> list[tuple[str, str, int]]:
        # a readiness probe's 503 (a KB not loaded in this process) is its answer, not a failure
        return [a for a in self.answers if a[2] >= 500 and not (a[2] == 503 and a[1].endswith("/readyz"))]


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


def scraped(client: httpx.Client, names: tuple[str, ...]) -> dict[str, float]:
    """The unlabelled series `names` from /metrics (with the metrics token)."""
    values = {}
    for line in client.get("/metrics", headers={"authorization": f"Bearer {METRICS}"}).text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            values[name] = float(value)
    return values


# -- checks -------------------------------------------------------------------------------------------
CHURN = ("faq_kb_loads_total", "faq_kb_unloads_total", "faq_kbs_resident")


def churn(before: dict, after: dict) -> dict:
    loads = after.get("faq_kb_loads_total", 0.0) - before.get("faq_kb_loads_total", 0.0)
    if "faq_kb_unloads_total" in after:
        unloads = after["faq_kb_unloads_total"] - before.get("faq_kb_unloads_total", 0.0)
    else:  # a server without the counter: what was loaded and is no longer resident was unloaded
        unloads = loads - (after.get("faq_kbs_resident", 0.0) - before.get("faq_kbs_resident", 0.0))
    return {"loads": int(loads), "unloads": int(unloads)}


def answer_key(response: httpx.Response, kb: str) -> str:
    """An answer with the name it was asked about blanked out, which tells the caller nothing new; Date and
    Content-Length left out (the names differ in length, and the body is compared anyway)."""
    headers = sorted((k.lower(), v.replace(kb, "{kb}")) for k, v in response.headers.items()
                     if k.lower() not in ("date", "content-length"))
    return json.dumps([response.status_code, headers, response.text.replace(kb, "{kb}")])


def check_readyz(probe: Probe, url: str, requires_key: bool, requests: int) -> dict:
    """Anonymous readyz of one resident KB, two known ones that are not resident and unknown names: what they
    load and unload, and how many distinct answers tell them apart."""
    http, anonymous = probe.client(url), probe.client(url)
    admin = {"authorization": f"Bearer {ADMIN}"}
    made_resident = http.post("/kbs/shop/match", json={"query": "how do I reset my password"}, headers=admin)
    before = scraped(http, CHURN)
    groups = {"resident": ["shop"], "known, not resident": ["bank", "travel"], "unknown": list(UNKNOWN)}
    answers: dict[str, Counter] = {group: Counter() for group in groups}
    seen: dict[str, Counter] = {group: Counter() for group in groups}
    for _ in range(requests):
        for group, names in groups.items():
            for kb in names:
                r = anonymous.get(f"/kbs/{kb}/readyz")
                answers[group][answer_key(r, kb)] += 1
                seen[group][str(r.status_code)] += 1
    after = scraped(http, CHURN)
    with_token = http.get("/kbs/bank/readyz", headers=admin)
    after_token = scraped(http, CHURN)
    every: Counter = Counter()
    for counter in answers.values():
        every.update(counter)
    moved = churn(before, after)
    result = {"match_requires_key": requires_key, "shop_made_resident": made_resident.status_code,
              "anonymous_requests": sum(sum(c.values()) for c in seen.values()), "churn": moved,
              "statuses": {group: dict(c) for group, c in seen.items()},
              "distinct_answers": {group: len(c) for group, c in answers.items()},
              "distinct_answers_overall": len(every),
              "answers": [[json.loads(key)[0], json.loads(key)[2][:120], n] for key, n in every.items()],
              "readyz_bank_with_admin_token": {"status": with_token.status_code, **churn(after, after_token)}}
    # with the key required nothing may tell a KB from an unknown name; without it, anonymous callers still
    # load and evict nothing
    result["ok"] = moved == {"loads": 0, "unloads": 0} and (len(every) == 1 or not requires_key)
    return result


def check_readyz_open(probe: Probe, env: dict, workdir: Path, requests: int) -> dict:
    """check_readyz against a second `faq serve` on the same data, FAQ_MATCH_REQUIRES_KEY off."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
                    {**env, "FAQ_MATCH_REQUIRES_KEY": "false"}, workdir / "serve-open.log")
    try:
        server.wait_ready(url, 300, path="/healthz")
        return check_readyz(probe, url, False, requests)
    finally:
        server.stop()


def guesses(guesser: httpx.Client, other: httpx.Client, n: int, wrong: Callable[[httpx.Client, int], httpx.Response],
            right: Callable[[httpx.Client], httpx.Response], allowed: int) -> dict:
    """`n` wrong tokens from one address, then the right one from it and from another address."""
    t0 = time.perf_counter()
    answers = [wrong(guesser, i) for i in range(n)]
    seconds = time.perf_counter() - t0
    waits = [int(r.headers["retry-after"]) for r in answers if "retry-after" in r.headers]
    same, elsewhere = right(guesser).status_code, right(other).status_code
    first_429 = next((i for i, r in enumerate(answers) if r.status_code == 429), None)
    without_wait = sum(r.status_code == 429 and "retry-after" not in r.headers for r in answers)
    return {"guesses": n, "seconds": round(seconds, 2), "status": statuses(answers), "before_429": first_429,
            "retry_after_s": f"{min(waits)}-{max(waits)}" if waits else None, "429_without_retry_after": without_wait,
            "right_token_same_address": same, "right_token_other_address": elsewhere,
            "ok": first_429 is not None and first_429 <= 10 and not without_wait and elsewhere == allowed}


def check_throttle(probe: Probe, tokens: dict, n: int = 200) -> dict:
    """Wrong tokens from one address on the console's sign-in, a KB's admin API and the admin API; each from
    an address of its own, since the throttle also counts an address's failures across KBs."""
    def form(token: str) -> Callable[[httpx.Client], httpx.Response]:
        return lambda client: sign_in(client, token)

    def bearer(path: str, token: str) -> Callable[[httpx.Client], httpx.Response]:
        return lambda client: client.get(path, headers={"authorization": f"Bearer {token}"})

    scenarios = {
        "console sign-in": (lambda c, i: sign_in(c, f"wrong-guess-{i:04d}"), form(ADMIN), 303),
        "bearer, KB admin API (/kbs/shop/admin/faqs)": (
            lambda c, i: bearer("/kbs/shop/admin/faqs", f"nope-{i}")(c), bearer("/kbs/shop/admin/faqs",
                                                                             tokens["shop"]["admin"]), 200),
        "bearer, admin API (/admin/faqs)": (lambda c, i: bearer("/admin/faqs", f"nope-{i}")(c),
                                            bearer("/admin/faqs", ADMIN), 200),
    }
    table = [{"scenario": name, **guesses(probe.client(), probe.client(), n, wrong, right, allowed)}
             for name, (wrong, right, allowed) in scenarios.items()]
    metric = scraped(probe.client(), ("faq_auth_throttled_total",)).get("faq_auth_throttled_total")
    return {"faq_auth_throttled_total": metric, "table": table, "ok": all(row["ok"] for row in table)}


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


def check_bodies(probe: Probe, tokens: dict) -> dict:
    client = probe.client()
    bodies = {
        "nested-20000": b'{"query": ' + b"[" * 20000 + b"]" * 20000 + b"}",
        "int-5000-digits": b'{"query": "x", "top_k": ' + b"9" * 5000 + b"}",
        "float-1e999": b'{"query": "x", "threshold": 1e999}',
    }
    api = {name: probe.status(lambda body=body: client.post("/kbs/shop/match", content=body, headers={
        "content-type": "application/json", "authorization": f"Bearer {tokens['shop']['read']}"}), f"/match {name}")
        for name, body in bodies.items()}
    return {**api, "ok": all(400 <= s < 500 for s in api.values())}


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
    # the QnA Maker TSV, read back by our importer into another KB and exported again as CSV
    tsv = workdir / "shop-export.tsv"
    faq(env, "kb", "export", str(tsv), "--kb", "shop", "--format", "qnamaker")
    tsv_cells = [c for line in tsv.read_text(encoding="utf-8").splitlines()[1:] for c in line.split("\t")
                 if c[:1] in FORMULAS]
    faq(env, "kb", "import", str(tsv), "--kb", "shop-tsv-copy")
    faq(env, "kb", "export", str(workdir / "shop-tsv-copy.csv"), "--kb", "shop-tsv-copy")
    copied = {tuple(r[1:3]) for r in csv.reader(io.StringIO(
        (workdir / "shop-tsv-copy.csv").read_text(encoding="utf-8"))) if r and r[1].lstrip("'")[:1] in FORMULAS}
    original = {tuple(r[1:3]) for r in rows[1:] if r and r[1].lstrip("'")[:1] in FORMULAS}
    return {"rows": len(rows) - 1, "formula_leading_faqs": len(FORMULAS), "formula_cells": len(formula_cells),
            "round_trip_lossless": lossless, "tsv_formula_cells": len(tsv_cells),
            "tsv_round_trip_formula_rows_kept": copied == original,
            "ok": not formula_cells and lossless and not tsv_cells and copied == original}


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


# -- hostile files ------------------------------------------------------------------------------------
def zip_of(members: dict[str, bytes], level: int = 9) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def xlsx_of(sheet_xml: bytes) -> bytes:
    """A workbook of one sheet whose XML is `sheet_xml` (the parts openpyxl needs to open it)."""
    ct = (b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
          b'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
          b'<Default Extension="xml" ContentType="application/xml"/>'
          b'<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.'
          b'spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
          b'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>')
    rels = (b'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            b'officeDocument" Target="xl/workbook.xml"/></Relationships>')
    wb = (b'<?xml version="1.0"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
          b'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets>'
          b'<sheet name="QnAs" sheetId="1" r:id="rId1"/></sheets></workbook>')
    wb_rels = (b'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
               b'relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
               b'relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>')
    return zip_of({"[Content_Types].xml": ct, "_rels/.rels": rels, "xl/workbook.xml": wb,
                   "xl/_rels/workbook.xml.rels": wb_rels, "xl/worksheets/sheet1.xml": sheet_xml})


SHEET = b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
QNA_HEADER = b"Question\tAnswer\tSource\tMetadata\tSuggestedQuestions\tIsContextOnly\tPrompts\tQnaId\n"
BOMB = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lolololololololololol">'
        + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
                   for i in range(1, 10))
        + b']>' + SHEET + b'<row r="1"><c r="A1" t="inlineStr"><is><t>&lol9;</t></is></c></row></sheetData></worksheet>')

#: name -> the file: every one must be refused (4xx in the console, exit 2 in the CLI), none imported
HOSTILE_ARCHIVES = {
    "newlines-8mib.zip": lambda: zip_of({"QnAs.tsv": QNA_HEADER + b"\n" * (8 << 20)}),
    "newlines-64mib.zip": lambda: zip_of({"QnAs.tsv": QNA_HEADER + b"\n" * (64 << 20)}),
    "members-20000.zip": lambda: zip_of({f"part{i}.tsv": QNA_HEADER for i in range(20_000)}),
    "tabs-8mib.zip": lambda: zip_of({"QnAs.tsv": QNA_HEADER + b"q\ta" + b"\t" * (8 << 20) + b"\n"}),
    "xlsx-broken-xml.xlsx": lambda: xlsx_of(SHEET + b'<row r="1"><c r="A1" t="inlineStr"><is><t>Question'),
    "xlsx-entity-bomb.xlsx": lambda: xlsx_of(BOMB),
    "xlsx-external-entity.xlsx": lambda: xlsx_of(
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY ext SYSTEM "file:///etc/passwd">]>' + SHEET
        + b'<row r="1"><c r="A1" t="inlineStr"><is><t>&ext;</t></is></c></row></sheetData></worksheet>'),
    "xlsx-rows-1m.xlsx": lambda: xlsx_of(SHEET + b"".join(b'<row r="%d"/>' % i for i in range(1, 1_000_001))
                                          + b"</sheetData></worksheet>"),
    "prompts-nested-3000.tsv": lambda: QNA_HEADER + b"q\ta\t\t\t\tfalse\t" + b"[" * 3000 + b"]" * 3000 + b"\t1\n",
    "suggested-nested-3000.tsv": lambda: QNA_HEADER + b"q\ta\t\t\t" + b"[" * 3000 + b"]" * 3000 + b"\tfalse\t\t1\n",
    "rasa-nested-3000.yml": lambda: b'version: "3.1"\nresponses:\n  utter_faq/a:\n  - text: ' + b"[" * 3000
                                     + b"]" * 3000 + b"\nnlu:\n- intent: faq/a\n  examples: |\n    - q\n",
}


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


CSV_LIMIT = 131_072
HEADER = "faq_id,question,answer,tags\n"
JSONL_ROW = '{"faq_id": "a", "question": "q", "answer": %s}\n'

#: name -> (the file, whether a correct reader takes it): every other must be refused on every path (4xx in
#: the console, exit 2 in the CLI, KbFormatError from the reader), none imported
HOSTILE_FILES: dict[str, tuple[Callable[[], bytes], bool]] = {
    "csv-header-over-field-limit.csv": (lambda: (HEADER.rstrip() + "," + "h" * (CSV_LIMIT + 1) + "\n").encode(), False),
    "csv-cell-over-field-limit.csv": (lambda: (HEADER + "a,q,ok,\nb,q," + "y" * 1_000_000 + ",\n").encode(), False),
    "csv-quoted-cell-200k.csv": (lambda: HEADER.encode() + b'f1,"' + b"y" * 200_000 + b'",a,\n', False),
    "jsonl-nested-1200.jsonl": (lambda: (JSONL_ROW % ("[" * 1200 + "]" * 1200)).encode(), False),
    "jsonl-nested-5000.jsonl": (lambda: (JSONL_ROW % ("[" * 5000 + "]" * 5000)).encode(), False),
    "jsonl-nested-100000.jsonl": (lambda: b"[" * 100_000 + b"]" * 100_000 + b"\n", False),
    "jsonl-objects-nested-5000.jsonl": (lambda: (JSONL_ROW % ('{"a":' * 5000 + "1" + "}" * 5000)).encode(), False),
    "jsonl-int-4301-digits.jsonl": (lambda: (JSONL_ROW % ("9" * 4301)).encode(), False),
    "jsonl-int-5000-digits.jsonl": (lambda: (JSONL_ROW % ("9" * 5000)).encode(), False),
    "jsonl-int-minus-5000-digits.jsonl": (lambda: (JSONL_ROW % ("-" + "1" * 5000)).encode(), False),
    "jsonl-float-1e999-and-nan.jsonl": (lambda: (JSONL_ROW % "[1e999, NaN, -Infinity]").encode(), False),
    "csv-quote-never-closed.csv": (lambda: (HEADER + 'a,"q,never closed\nb,q,A.,\n').encode(), False),
    "csv-junk-after-quote.csv": (lambda: (HEADER + 'a,"q"x,A.,\n').encode(), False),
    "csv-not-utf8.csv": (lambda: HEADER.encode() + b"a,q\xff\xfe,A.,\n", False),
    "jsonl-not-utf8.jsonl": (lambda: b'{"faq_id": "a\xc3", "question": "q", "answer": "A."}\n', False),
    "csv-nul.csv": (lambda: HEADER.encode() + b"a,q\x00,A.,\n", False),
    "jsonl-lone-surrogate.jsonl": (lambda: b'{"faq_id": "a", "question": "q\\udc00", "answer": "A."}\n', False),
    "csv-utf16.csv": (lambda: HEADER.encode("utf-16") + "a,q,A.,\n".encode("utf-16-le"), False),
    "csv-bom-only.csv": (lambda: b"\xef\xbb\xbf", False),
    "csv-empty.csv": (lambda: b"", False),
    "jsonl-not-objects.jsonl": (lambda: b'[1, 2]\n"text"\nnull\n12\n', False),
    "jsonl-garbage-20000-lines.jsonl": (lambda: b"".join(b"{\"faq_id\": %d, [\n" % i for i in range(20_000)), False),
    "jsonl-random-bytes.jsonl": (lambda: bytes(range(256)) * 40, False),
    "csv-more-cells-than-header.csv": (lambda: (HEADER + "a,q,A.,t,extra,more\n").encode(), False),
    **{name: (make, False) for name, make in HOSTILE_ARCHIVES.items()},
    "csv-bare-cr-line-ends.csv": (lambda: HEADER.replace("\n", "\r").encode() + b"a,q?,A.,t\rb,q2?,B.,\r", True),
    "csv-formula-cells.csv": (lambda: (HEADER + "'=cmd,'+1 or -1?,'=HYPERLINK(\"x\"),'@a;b\n").encode(), True),
    "jsonl-bom-crlf-valid.jsonl": (lambda: b"\xef\xbb\xbf" + b'{"faq_id": "a", "question": "q?", "answer": "A."}\r\n',
                                   True),
    "control-valid.csv": (lambda: (HEADER + "refund,How do I get a refund?,Within 30 days.,billing\n").encode(), True),
}


def hostile_files(n_random: int, seed: int) -> dict[str, tuple[Callable[[], bytes], bool]]:
    """HOSTILE_FILES and `n_random` files of seeded random bytes."""
    rng = random.Random(seed)
    files = dict(HOSTILE_FILES)
    for i in range(n_random):
        data = rng.randbytes(rng.randint(1, 4096))
        files[f"random-bytes-{i}.{'csv' if i % 2 else 'jsonl'}"] = (lambda data=data: data, False)
    return files


#: run in a child: a reader that blows up on a bomb takes down the child, not the probe
READ = """
import json, sys, time
from kb.formats import read_any
from kb.records import KbFormatError
t0 = time.perf_counter()
try:
    imported = read_any(sys.argv[1])
except KbFormatError as exc:
    out = {"outcome": "KbFormatError", "first_error": exc.errors[0]}
except Exception as exc:
    out = {"outcome": type(exc).__name__, "crash": True, "first_error": str(exc)[:200]}
else:
    out = {"outcome": f"ok ({len(imported.records)} records)"}
print(json.dumps({**out, "seconds": round(time.perf_counter() - t0, 3)}))
"""
READER_MEMORY = 4 << 30


def via_reader(path: Path) -> dict:
    """`read_any` in a child process held to READER_MEMORY of address space: its outcome and seconds."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (READER_MEMORY, READER_MEMORY))

    try:
        done = subprocess.run([sys.executable, "-c", READ, str(path)], cwd=REPO, capture_output=True, text=True,
                              timeout=300, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout (300 s)", "crash": True}
    if done.returncode != 0 or not done.stdout.strip():
        return {"outcome": f"exit {done.returncode}", "crash": True, "first_error": done.stderr.strip()[-200:]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if out.get("first_error"):
        out["first_error"] = out["first_error"].replace(str(path.parent) + "/", "")
    return out


def via_cli(path: Path, kb: str, env: dict) -> dict:
    """`faq kb import FILE --kb NEW`: exit code, seconds, peak RSS, a traceback, the first line it says."""
    timed = ["/usr/bin/time", "-f", "maxrss_kb=%M"] if Path("/usr/bin/time").exists() else []
    t0 = time.perf_counter()
    out = subprocess.run([*timed, sys.executable, "-m", "cli.main", "kb", "import", str(path), "--kb", kb],
                         cwd=REPO, env=env, capture_output=True, text=True)
    rss = re.search(r"maxrss_kb=(\d+)", out.stderr)
    said = out.stderr.replace(rss.group(0), "") if rss else out.stderr
    return {"exit": out.returncode, "seconds": round(time.perf_counter() - t0, 2),
            "peak_rss_mb": round(int(rss.group(1)) / 1024, 1) if rss else None, "traceback": "Traceback" in said,
            "message": (said.strip().splitlines() or [""])[0].replace(str(path.parent) + "/", "")[:160]}


def via_console(client: httpx.Client, csrf: str, server: Server, name: str, data: bytes) -> dict:
    """The console's import (a dry run: nothing is written until it is confirmed) of KB shop."""
    before = peak_rss_kb(server.proc.pid)
    t0 = time.perf_counter()
    try:
        r = client.post("/console/kbs/shop/import", data={"csrf": csrf}, files={"file": (name, data)})
    except httpx.TransportError as exc:
        return {"status": 0, "error": type(exc).__name__, "seconds": round(time.perf_counter() - t0, 2)}
    first = re.search(r"<li>([^<]*:\d+: [^<]+)</li>", r.text)
    return {"status": r.status_code, "seconds": round(time.perf_counter() - t0, 2),
            "peak_rss_growth_mb": round((peak_rss_kb(server.proc.pid) - before) / 1024, 1),
            "first_error": first.group(1)[:160] if first else None}


#: files up to this size must be refused quickly and cheaply in the console; larger ones only without a 5xx
BOUNDED_BYTES = 8 << 20


def check_files(probe: Probe, tokens: dict, env: dict, server: Server, workdir: Path, n_random: int,
                seed: int) -> dict:
    """Every hostile file and the valid controls through the reader, `faq kb import` and the console."""
    client = probe.client()
    assert sign_in(client, tokens["shop"]["admin"]).status_code == 303
    csrf = csrf_of(client.get("/console/kbs/shop/import").text)
    folder = workdir / "files"
    folder.mkdir(exist_ok=True)
    table = []
    for i, (name, (make, valid)) in enumerate(hostile_files(n_random, seed).items()):
        data = make()
        path = folder / name
        path.write_bytes(data)
        row = {"file": name, "bytes": len(data), "valid": valid, "reader": via_reader(path),
               "cli": {"kb": f"file-{i}", **via_cli(path, f"file-{i}", env)},
               "console": via_console(client, csrf, server, name, data)}
        if len(data) > BOUNDED_BYTES:
            path.unlink()  # the big archives are not needed again, and /tmp may be small
        if row["console"]["status"] == 0 and len(data) <= BOUNDED_BYTES:
            probe.dropped.append(f"console import {name}")
        table.append(row)
        print(f"files  {name:<36} read {row['reader']['outcome']:<20} cli {row['cli']['exit']}  "
              f"console {row['console']['status']}", flush=True)
    created = set(re.findall(r"^[* ] (\S+)", faq(env, "kb", "list"), re.M))
    for row in table:
        row["cli"]["kb_created"] = row["cli"]["kb"] in created
        row["ok"] = file_ok(row)
    hostile = [r for r in table if not r["valid"]]
    summary = {
        "files": len(table), "valid_controls": len(table) - len(hostile),
        "reader_crashes": sum(bool(r["reader"].get("crash")) for r in table),
        "reader_accepted_hostile": sum(r["reader"]["outcome"].startswith("ok") for r in hostile),
        "cli_crashes": sum(r["cli"]["exit"] not in (0, 2) or r["cli"]["traceback"] for r in table),
        "cli_accepted_hostile": sum(r["cli"]["exit"] == 0 for r in hostile),
        "cli_refused_but_created_kb": sum(r["cli"]["exit"] != 0 and r["cli"]["kb_created"] for r in table),
        "console_5xx_or_dropped": sum(not 0 < r["console"]["status"] < 500 for r in table),
        "console_accepted_hostile": sum(r["console"]["status"] == 200 for r in hostile),
        "valid_refused": sum(not r["ok"] for r in table if r["valid"]),
        "slowest_console_s": max(r["console"]["seconds"] for r in table),
        "peak_cli_rss_mb": max((r["cli"]["peak_rss_mb"] or 0) for r in table),
    }
    return {**summary, "table": table, "ok": all(r["ok"] for r in table)}


def file_ok(row: dict) -> bool:
    reader, cli, console = row["reader"], row["cli"], row["console"]
    if row["valid"]:
        return reader["outcome"].startswith("ok") and cli["exit"] == 0 and console["status"] == 200
    read = reader["outcome"] == "KbFormatError"
    imported = cli["exit"] == 2 and not cli["kb_created"] and not cli["traceback"]
    if row["bytes"] > BOUNDED_BYTES:
        return read and imported and 0 <= console["status"] < 500 and console["status"] != 200
    return read and imported and 400 <= console["status"] < 500 and console["seconds"] <= 2 \
        and console["peak_rss_growth_mb"] <= 200


def compat_request(client: httpx.Client, route: str, body: bytes | dict, key: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    if route == "qnamaker":
        return client.post("/qnamaker/knowledgebases/shop/generateAnswer", content=content,
                           headers={"authorization": f"EndpointKey {key}", "content-type": "application/json"})
    return client.post("/language/:query-knowledgebases", content=content,
                       params={"projectName": "shop", "deploymentName": "production", "api-version": "2023-04-01"},
                       headers={"ocp-apim-subscription-key": key, "content-type": "application/json"})


COMPAT_BODIES = {
    "userId-129": {"question": "how do I reset my password", "userId": "u" * 129},
    "userId-200": {"question": "how do I reset my password", "userId": "u" * 200},
    "userId-201": {"question": "how do I reset my password", "userId": "u" * 201},
    "nested-3000": b'{"question": "x", "context": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    "nested-20000": b'{"question": ' + b"[" * 20000 + b"]" * 20000 + b"}",
    "not-an-object": b"[1, 2, 3]",
    "string-body": b'"how do I reset my password"',
    "int-5000-digits": b'{"question": "x", "top": ' + b"9" * 5000 + b"}",
    "float-1e999": b'{"question": "x", "scoreThreshold": 1e999, "confidenceScoreThreshold": 1e999}',
    "lone-surrogate": b'{"question": "reset \\ud800 password"}',
    "nul": b'{"question": "reset \\u0000 password"}',
    "bad-utf8": b'{"question": "reset \xff password"}',
    "question-list": {"question": ["a", "b"]},
    "qnaId-huge": {"qnaId": 2**63},
    "qnaId-string": {"qnaId": "abc"},
    "context-previous-huge": {"question": "and then?", "context": {"previousQnAId": 2**70, "previousQnaId": 2**70}},
    "filters-60": {"question": "x", "strictFilters": [{"name": f"k{i}", "value": "v"} for i in range(60)],
                   "filters": {"metadataFilter": {"metadata": [{"key": f"k{i}", "value": "v"} for i in range(60)]}}},
    "japanese": {"question": "パスワードをリセットするにはどうすればよいですか"},
    "mixed-script": {"question": "how do I reset my パスワード on the Müller account"},
}


def check_compat(probe: Probe, tokens: dict) -> dict:
    """Hostile bodies to both compat routes on one pooled client; after each, a valid question on the same
    client must still be answered (a 500 used to drop the keep-alive connection under it)."""
    client = probe.client()
    key = tokens["shop"]["read"]
    valid = {"question": "how do I reset my password"}
    result: dict = {}
    for route in ("qnamaker", "azure"):
        seen = {}
        for name, body in COMPAT_BODIES.items():
            hostile = probe.status(lambda body=body, route=route: compat_request(client, route, body, key),
                                   f"{route} {name}")
            after = probe.status(lambda route=route: compat_request(client, route, valid, key),
                                 f"{route} valid after {name}")
            seen[name] = [hostile, after]
        result[route] = seen
    statuses_ = [s for seen in result.values() for pair in seen.values() for s in pair]
    result["ok"] = all(0 < s < 500 for s in statuses_) and all(
        pair[1] == 200 for seen in result.values() if isinstance(seen, dict) for pair in seen.values())
    return result


def check_odd_ids_and_small_talk(probe: Probe, tokens: dict, env: dict, workdir: Path) -> dict:
    """An FAQ whose id is a non-ASCII digit, then compat requests and both exports; small-talk answers holding
    a lone surrogate or NUL refused by `faq kb settings`; /match small talk still answered."""
    client = probe.client()
    admin = {"authorization": f"Bearer {tokens['travel']['admin']}"}
    created = {fid: client.post("/kbs/travel/admin/faqs", headers=admin, json={
        "faq_id": fid, "answer": f"An answer for {fid}.", "questions": [f"what is the odd id {fid}"]}).status_code
        for fid in ("²", "①", "٣")}
    key = tokens["travel"]["read"]
    asked = {}
    for route, path, headers, params in (
            ("qnamaker", "/qnamaker/knowledgebases/travel/generateAnswer", {"authorization": f"EndpointKey {key}"}, {}),
            ("azure", "/language/:query-knowledgebases", {"ocp-apim-subscription-key": key},
             {"projectName": "travel", "deploymentName": "production", "api-version": "2023-04-01"})):
        asked[route] = probe.status(lambda path=path, headers=headers, params=params: client.post(
            path, json={"question": "what is the odd id ²"}, headers=headers, params=params), f"{route} odd id")
    exports = {}
    for fmt, suffix in (("qnamaker", ".tsv"), ("azure", ".json"), ("qnamaker", ".zip")):
        out = subprocess.run([sys.executable, "-m", "cli.main", "kb", "export", str(workdir / f"odd-{fmt}{suffix}"),
                              "--kb", "travel", "--format", fmt], cwd=REPO, env=env, capture_output=True, text=True)
        exports[f"{fmt}{suffix}"] = out.returncode
    settings = {}
    for name, value in (("lone-surrogate", '{"greeting": ["hi \\ud800 there"]}'),
                        ("nul", '{"greeting": ["hi \\u0000 there"]}')):
        out = subprocess.run([sys.executable, "-m", "cli.main", "kb", "settings", "--kb", "travel", "--set",
                              f"small_talk_answers={value}"], cwd=REPO, env=env, capture_output=True, text=True)
        settings[name] = out.returncode
    hello = probe.status(lambda: client.post("/kbs/travel/match", json={"query": "hello there"},
                                             headers={"authorization": f"Bearer {key}"}), "small talk /match")
    ok = (all(s in (200, 201) for s in created.values()) and all(s == 200 for s in asked.values())
          and all(rc == 0 for rc in exports.values()) and all(rc == 2 for rc in settings.values()) and hello == 200)
    return {"created": created, "compat_status": asked, "export_exit": exports, "small_talk_setting_exit": settings,
            "small_talk_match": hello, "ok": ok}


LANGUAGE_QUERIES = {
    "ja": "パスワードを忘れました。どうすればいいですか", "zh": "我忘记了密码，怎么重置", "he": "שכחתי את הסיסמה שלי",
    "ru": "Я забыл пароль, как его сбросить", "ar": "نسيت كلمة المرور الخاصة بي", "ko": "비밀번호를 잊어버렸어요",
    "en-umlauts": "Does the Müller account get the Zürich discount on shipping",
}


def check_languages(probe: Probe, tokens: dict) -> dict:
    """Queries in scripts no supported language uses, and English with a few umlauts: no 5xx, and the
    languages each is labelled with."""
    client = probe.client()
    key = tokens["shop"]["read"]
    seen = {}
    for name, query in LANGUAGE_QUERIES.items():
        r = client.post("/kbs/shop/match", json={"query": query}, headers={"authorization": f"Bearer {key}"})
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        seen[name] = {"status": r.status_code, "language": body.get("language"), "decision": body.get("decision"),
                      "reason": body.get("reason")}
    ok = all(v["status"] < 500 for v in seen.values()) and seen["en-umlauts"]["language"] == "en" and not any(
        v["language"] in ("de", "nl", "en", "es", "fr", "it", "pt") for k, v in seen.items() if k != "en-umlauts")
    return {**seen, "ok": ok}


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


#: `--only` name -> the check's title in the report, in the order they run
CHECKS = {
    "readyz": "readyz (anonymous, FAQ_MATCH_REQUIRES_KEY on)",
    "readyz_open": "readyz (anonymous, FAQ_MATCH_REQUIRES_KEY off)",
    "throttle": "throttle",
    "metrics": "metrics",
    "bodies": "hostile bodies",
    "files": "hostile files and archives",
    "console_errors": "console errors",
    "sound": "sound (isolation, CSRF, escaping)",
    "export": "CSV export",
    "compat": "compat routes",
    "odd_ids": "odd FAQ ids and small talk",
    "languages": "languages",
    "sessions": "sessions",
    "session_cap": "session cap (Sessions.open flood)",
    "proxy_cookie": "console cookie behind nginx",
}
#: checks that start what they need themselves: run alone, they spare the three KBs' build and the server
SERVERLESS = {"session_cap", "proxy_cookie"}
NO_5XX = "no 5xx"
STATE = {True: "ok", False: "FAIL", None: "skip"}


def run_check(name: str, check: Callable[[], dict]) -> dict:
    """The check's result; one that raises is reported as failed with its error, and the rest still run."""
    print(f"-- {name}", flush=True)
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - a product bug under probe must not hide the other checks
        import traceback

        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "ok": False}


def cell(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return str(text).replace("|", "\\|").replace("\n", " ")


FILE_COLUMNS = (("file", ("file",)), ("bytes", ("bytes",)), ("valid", ("valid",)),
                ("read_any", ("reader", "outcome")), ("CLI exit", ("cli", "exit")), ("CLI s", ("cli", "seconds")),
                ("CLI peak RSS MB", ("cli", "peak_rss_mb")), ("KB created", ("cli", "kb_created")),
                ("console", ("console", "status")), ("console s", ("console", "seconds")),
                ("server RSS growth MB", ("console", "peak_rss_growth_mb")), ("ok", ("ok",)),
                ("first error", ("reader", "first_error")))


def table_md(name: str, rows: list[dict]) -> list[str]:
    if name == "files":
        columns = FILE_COLUMNS
    else:
        columns = tuple((key, (key,)) for key in dict.fromkeys(k for row in rows for k in row))

    def value(row: dict, path: tuple[str, ...]):
        for key in path:
            row = row.get(key) if isinstance(row, dict) else None
        return "" if row is None else row

    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(value(row, path)) for _, path in columns) + " |" for row in rows]
    return lines


def render(report: dict) -> str:
    md = [f"# Security probe ({report['date']})", "", f"CPU: {report['cpu']}. Command: `{report['command']}`.",
          f"Settings: {report['settings']}.", "", "| check | `--only` | ok | measured |", "|---|---|---|---|"]
    names = {title: name for name, title in report["names"].items()}
    for title, result in report["checks"].items():
        shown = {k: v for k, v in result.items() if k not in ("ok", "table")}
        ok = {True: "yes", False: "**no**", None: "skipped"}[result["ok"]]
        # the 5xx check has no name of its own: it closes every run that started the server
        md.append(f"| {title} | {names.get(title, '(always)')} | {ok} | `{cell(shown)}` |")
    if "answers" in report:
        md += ["", f"Answers in all: {report['answers']}; with a status >= 500: {len(report['server_errors'])}."]
    for title, result in report["checks"].items():
        if result.get("table"):
            md += ["", f"## {title}", "", *table_md(names.get(title, ""), result["table"])]
    return "\n".join(md) + "\n"


def selected(text: str | None) -> list[str]:
    if not text:
        return list(CHECKS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"no check {', '.join(unknown)}; the checks: {', '.join(CHECKS)}")
    return [n for n in CHECKS if n in names]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", type=selected, default=list(CHECKS), metavar="NAME[,NAME]",
                    help=f"run these checks only: {', '.join(CHECKS)}")
    ap.add_argument("--sign-ins", type=int, default=10_000, help="console sign-ins with one KB's token (sessions)")
    ap.add_argument("--requests", type=int, default=15, help="anonymous readyz per KB name (readyz, readyz_open)")
    ap.add_argument("--random", type=int, default=6, help="files of seeded random bytes (files)")
    ap.add_argument("--seed", type=int, default=7, help="their seed (files)")
    ap.add_argument("--cap-flood", default="11000",
                    help="KB A sign-ins per run through Sessions.open, comma-separated (session_cap)")
    ap.add_argument("--postgres", metavar="URL", help="a PostgreSQL server: session_cap also runs on a scratch "
                                                      "database there")
    ap.add_argument("--nginx", action="store_true", help="run proxy_cookie (needs nginx on the PATH)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "security-probe"))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    only: list[str] = args.only
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="security-probe-"))
    workdir.mkdir(parents=True, exist_ok=True)
    settings = {"FAQ_ADMIN_TOKEN": ADMIN, "FAQ_MATCH_REQUIRES_KEY": "1", "FAQ_MAX_RESIDENT_KBS": "2",
                "FAQ_METRICS_TOKEN": METRICS, "FAQ_METRICS_KB_LABELS": "false"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir / "data"), "FAQ_ENCODER": "minilm", "FAQ_TORCH_THREADS": "1",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **settings})
    shown_args = argv if argv is not None else sys.argv[1:]
    report: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
                    "command": " ".join(["python -m bench run security_probe", *shown_args]),
                    "settings": ", ".join(f"{k}={'...' if 'TOKEN' in k else v}" for k, v in settings.items()),
                    "names": {name: CHECKS[name] for name in only}, "checks": {}}
    checks = report["checks"]
    served = [name for name in only if name not in SERVERLESS]
    if served:
        faq(env, "db", "upgrade")
        tokens = prepare(env, workdir)
        port = free_port()
        server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / "serve.log")
        url = f"http://127.0.0.1:{port}"
        try:
            server.wait_ready(url, 300, path="/healthz")  # the default KB has no index: /readyz stays 503
            probe = Probe(url)
            run = {
                "readyz": lambda: check_readyz(probe, url, True, args.requests),
                "readyz_open": lambda: check_readyz_open(probe, env, workdir, args.requests),
                "throttle": lambda: check_throttle(probe, tokens),
                "metrics": lambda: check_metrics(probe, tokens),
                "bodies": lambda: check_bodies(probe, tokens),
                "files": lambda: check_files(probe, tokens, env, server, workdir, args.random, args.seed),
                "console_errors": lambda: check_console_errors(probe, tokens),
                "sound": lambda: check_sound(probe, tokens),
                "export": lambda: check_export(probe, tokens, env, workdir),
                "compat": lambda: check_compat(probe, tokens),
                "odd_ids": lambda: check_odd_ids_and_small_talk(probe, tokens, env, workdir),
                "languages": lambda: check_languages(probe, tokens),
                "sessions": lambda: check_sessions(probe, tokens, args.sign_ins),
            }
            for name in served:
                checks[CHECKS[name]] = run_check(name, run[name])
            report["answers"] = len(probe.answers)
            report["server_errors"] = probe.server_errors() + [("?", what, 0) for what in probe.dropped]
            logs = [p for p in (workdir / "serve.log", workdir / "serve-open.log") if p.exists()]
            checks[NO_5XX] = {"answers": len(probe.answers), "5xx": len(probe.server_errors()),
                              "dropped_connections": probe.dropped,
                              "tracebacks_in_log": sum(p.read_text(errors="replace").count("Traceback") for p in logs),
                              "ok": not report["server_errors"]}
        finally:
            server.stop()
    if "session_cap" in only:
        floods = [int(n) for n in args.cap_flood.split(",") if n.strip()]
        checks[CHECKS["session_cap"]] = run_check("session_cap", lambda: check_session_cap(floods, args.postgres))
    if "proxy_cookie" in only:
        if not args.nginx:
            checks[CHECKS["proxy_cookie"]] = {"skipped": "run with --nginx", "ok": None}
        elif not shutil.which("nginx"):
            checks[CHECKS["proxy_cookie"]] = {"skipped": "nginx is not on the PATH (Debian: nginx-light)", "ok": None}
        else:
            checks[CHECKS["proxy_cookie"]] = run_check("proxy_cookie", lambda: check_proxy_cookie(workdir / "proxy"))
    write_report(Path(args.out), report, render(report))
    for title, result in checks.items():
        print(f"{STATE[result['ok']]:<4}  {title}")
    return 0 if all(c["ok"] is not False for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
