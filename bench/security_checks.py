"""The security probe's checks over HTTP (bench/security_probe.py runs them): the clients it speaks through,
anonymous readyz, throttling, metrics, hostile bodies, CSV export, console errors, isolation, the compat routes,
odd FAQ ids and small talk, languages, sign-in floods."""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.serving import Server, faq, free_port  # noqa: E402
from app.api.console import SECURITY_HEADERS  # noqa: E402


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
