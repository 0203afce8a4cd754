"""A hostile probe of the console, the many-KB surface and every import path, against a real `faq serve` on loopback.

    python -m bench run security_probe [--sign-ins 10000] [--only NAME[,NAME]] [--out bench/results/security-probe]
        [--requests 15] [--random 6] [--seed 7] [--cap-flood 11000] [--postgres URL] [--nginx]

Three KBs (shop, bank, travel: a third of the demo KB each, built with MiniLM), a KB admin and read
token each, FAQ_ADMIN_TOKEN, the console, and the settings an exposed deployment runs with:
FAQ_MATCH_REQUIRES_KEY=1, FAQ_MAX_RESIDENT_KBS=2, FAQ_METRICS_TOKEN, FAQ_METRICS_KB_LABELS=false.
Clients speak HTTP from several loopback addresses (127.0.0.2 and up: the server sees each as its own
client). Every answer is kept, and each check reports what it measured (`--only` names the checks to run).
The checks live beside this runner: security_checks.py (over HTTP), security_files.py (hostile files),
security_sessions.py (the session cap and the proxy cookie, without this server):

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
import json
import os
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.reports import write_report  # noqa: E402
from bench.serving import Server, faq, free_port  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

from bench.security_checks import (  # noqa: E402
    ADMIN, KBS, METRICS, Probe, check_bodies, check_compat, check_console_errors, check_export, check_languages,
    check_metrics, check_odd_ids_and_small_talk, check_readyz, check_readyz_open, check_sessions, check_sound,
    check_throttle,
)
from bench.security_files import check_files  # noqa: E402
from bench.security_sessions import check_proxy_cookie, check_session_cap  # noqa: E402


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
