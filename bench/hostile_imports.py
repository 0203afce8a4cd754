"""Hostile KB files against every import path: `read_kb`, `faq kb import` and the console's upload.

    python bench/hostile_imports.py [--out bench/results/hostile_imports.json] [--random 6]

A fixed set of hostile files (CSV fields over the csv module's field limit in the header and in a row,
JSONL nested 1,200 and 100,000 deep, integers of 4,301 and 5,000 digits, open and misplaced quotes, bad
UTF-8, NUL, lone surrogate escapes, BOMs, bare CR line ends, UTF-16, formula-leading cells, a large file of
garbage, a valid control file) plus --random files of seeded random bytes, each fed to:

- read_kb in this process: `ok` with its record count, or the exception class;
- `python -m cli.main kb import FILE --kb NAME` as a subprocess on a scratch SQLite database, one new KB
  name per file: exit code, whether stderr holds a traceback, and whether the KB was created (a refused
  file must write nothing, not even an empty KB);
- the console's import (a dry run) of a real `faq serve` on loopback, signed in with the admin token:
  the HTTP status, and the tracebacks in the server's log afterwards.

Counts per path: crashes (an exception other than KbFormatError, an exit code other than 0/2, a
traceback), 5xx answers, and hostile files that were accepted. Writes --out (JSON) and the same name
with .md; the CPU is recorded by evaluation/machine.py.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compare import Server, free_port  # noqa: E402
from app.store import FaqStore  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402
from kb.records import KbFormatError  # noqa: E402
from kb.files import read_kb  # noqa: E402

TOKEN = "hostile-imports-bench-token-0123456789"
HEADER = "faq_id,question,answer,tags\n"
CSV_LIMIT = 131_072


def hostile_files(n_random: int, seed: int) -> dict[str, tuple[bytes, bool]]:
    """name -> (bytes, whether a correct reader accepts it)."""
    row = '{"faq_id": "a", "question": "q", "answer": %s}\n'
    files = {
        "csv-header-over-field-limit.csv": ((HEADER.rstrip() + "," + "h" * (CSV_LIMIT + 1) + "\n").encode(), False),
        "csv-cell-over-field-limit.csv": ((HEADER + "a,q,ok,\nb,q," + "y" * 1_000_000 + ",\n").encode(), False),
        "jsonl-nested-1200.jsonl": ((row % ("[" * 1200 + "]" * 1200)).encode(), False),
        "jsonl-nested-100000.jsonl": (b"[" * 100_000 + b"]" * 100_000 + b"\n", False),
        "jsonl-objects-nested-5000.jsonl": ((row % ('{"a":' * 5000 + "1" + "}" * 5000)).encode(), False),
        "jsonl-int-4301-digits.jsonl": ((row % ("9" * 4301)).encode(), False),
        "jsonl-int-minus-5000-digits.jsonl": ((row % ("-" + "1" * 5000)).encode(), False),
        "jsonl-float-1e999-and-nan.jsonl": ((row % "[1e999, NaN, -Infinity]").encode(), False),
        "csv-quote-never-closed.csv": ((HEADER + 'a,"q,never closed\nb,q,A.,\n').encode(), False),
        "csv-junk-after-quote.csv": ((HEADER + 'a,"q"x,A.,\n').encode(), False),
        "csv-not-utf8.csv": (HEADER.encode() + b"a,q\xff\xfe,A.,\n", False),
        "jsonl-not-utf8.jsonl": (b'{"faq_id": "a\xc3", "question": "q", "answer": "A."}\n', False),
        "csv-nul.csv": (HEADER.encode() + b"a,q\x00,A.,\n", False),
        "jsonl-lone-surrogate.jsonl": (b'{"faq_id": "a", "question": "q\\udc00", "answer": "A."}\n', False),
        "csv-utf16.csv": (HEADER.encode("utf-16") + "a,q,A.,\n".encode("utf-16-le"), False),
        "csv-bom-only.csv": (b"\xef\xbb\xbf", False),
        "csv-empty.csv": (b"", False),
        "jsonl-not-objects.jsonl": (b'[1, 2]\n"text"\nnull\n12\n', False),
        "jsonl-garbage-20000-lines.jsonl": (b"".join(b"{\"faq_id\": %d, [\n" % i for i in range(20_000)), False),
        "csv-more-cells-than-header.csv": ((HEADER + "a,q,A.,t,extra,more\n").encode(), False),
        "csv-bare-cr-line-ends.csv": (HEADER.replace("\n", "\r").encode() + b"a,q?,A.,t\rb,q2?,B.,\r", True),
        "csv-formula-cells.csv": ((HEADER + "'=cmd,'+1 or -1?,'=HYPERLINK(\"x\"),'@a;b\n").encode(), True),
        "jsonl-bom-crlf-valid.jsonl": (b"\xef\xbb\xbf" + b'{"faq_id": "a", "question": "q?", "answer": "A."}\r\n', True),
        "control-valid.csv": ((HEADER + "refund,How do I get a refund?,Within 30 days.,billing\n").encode(), True),
    }
    rng = random.Random(seed)
    for i in range(n_random):
        files[f"random-bytes-{i}.{'csv' if i % 2 else 'jsonl'}"] = (rng.randbytes(rng.randint(1, 4096)), False)
    return files


def via_reader(path: Path) -> dict:
    t0 = time.perf_counter()
    try:
        records = read_kb(path)
    except KbFormatError as exc:
        outcome = {"outcome": "KbFormatError", "first_error": exc.errors[0].replace(str(path.parent) + "/", "")}
    except Exception as exc:  # noqa: BLE001 - what this measures: anything else is a crash
        outcome = {"outcome": type(exc).__name__, "crash": True, "first_error": str(exc)[:200]}
    else:
        outcome = {"outcome": f"ok ({len(records)} records)"}
    return {**outcome, "seconds": round(time.perf_counter() - t0, 3)}


def via_cli(path: Path, kb: str, env: dict) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli.main", "kb", "import", str(path), "--kb", kb],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    crash = done.returncode not in (0, 2) or "Traceback" in done.stderr
    return {"exit": done.returncode, "crash": crash, "kb": kb, "stderr": done.stderr.strip().splitlines()[1:2],
            "seconds": round(time.perf_counter() - t0, 2)}


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    if not found:
        raise RuntimeError(f"no CSRF token in the page:\n{html[:500]}")
    return found.group(1)


def via_console(client: httpx.Client, page: str, name: str, data: bytes) -> dict:
    t0 = time.perf_counter()
    try:
        csrf = csrf_of(client.get(page).text)
        r = client.post(page, data={"csrf": csrf}, files={"file": (name, data, "application/octet-stream")})
    except httpx.HTTPError as exc:  # a dropped connection is a crash too (the next request opens a new one)
        return {"status": None, "crash": True, "error": f"{type(exc).__name__}: {exc}"}
    first = re.search(r"<li>([^<]*:\d+: [^<]+)</li>", r.text)
    return {"status": r.status_code, "crash": r.status_code >= 500,
            "first_error": first.group(1) if first else None, "seconds": round(time.perf_counter() - t0, 3)}


def signed_in(url: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=60)
    page = client.get("/console/login")
    r = client.post("/console/login", data={"csrf": csrf_of(page.text), "token": TOKEN})
    if r.status_code >= 400:
        raise RuntimeError(f"console sign-in failed: {r.status_code} {r.text[:300]}")
    return client


def render(report: dict) -> str:
    s = report["summary"]
    lines = [f"# Hostile KB files against every import path ({report['date']})", "",
             f"CPU: {report['cpu'].get('cpu_model')}, {report['cores']} cores; {len(report['files'])} files "
             f"({report['n_random']} of random bytes, seed {report['seed']}); {report['seconds']} s in all.", "",
             "| path | crashes | 5xx | hostile files accepted |", "|---|---:|---:|---:|",
             f"| read_kb | {s['reader_crashes']} | - | {s['reader_accepted_hostile']} |",
             f"| faq kb import | {s['cli_crashes']} | - | {s['cli_accepted_hostile']} |",
             f"| console import (faq serve) | {s['console_crashes']} | {s['console_5xx']} | "
             f"{s['console_accepted_hostile']} |", "",
             f"Tracebacks in the server's log: {s['server_log_tracebacks']}; files `faq kb import` refused but "
             f"still created a KB for: {s['cli_refused_but_wrote']}; valid files refused on some path: "
             f"{s['valid_files_refused']}.", "",
             "| file | bytes | read_kb | CLI exit | console | first error (line: reason) |", "|---|---:|---|---:|---:|---|"]
    for f in report["files"]:
        error = (f["reader"].get("first_error") or "").removeprefix(f["name"] + ":").replace("|", "\\|")[:140]
        lines.append(f"| {f['name']} | {f['bytes']} | {f['reader']['outcome']} | {f['cli']['exit']} | "
                     f"{f['console']['status']} | {error} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "hostile_imports.json")
    p.add_argument("--random", type=int, default=6, help="files of random bytes (default 6)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args()
    started = time.perf_counter()
    tmp = tempfile.TemporaryDirectory(prefix="hostile-imports-")
    workdir = args.workdir or Path(tmp.name)
    files_dir = workdir / "files"
    files_dir.mkdir(parents=True, exist_ok=True)
    files = hostile_files(args.random, args.seed)
    for name, (data, _) in files.items():
        (files_dir / name).write_bytes(data)

    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir / "var"), "FAQ_DATABASE_URL": f"sqlite:///{workdir / 'faq.db'}",
                "FAQ_ADMIN_TOKEN": TOKEN, "FAQ_ENCODER": "minilm", "FAQ_KB_POLL_SECONDS": "0",
                "PYTHONPATH": str(REPO)})
    control = files_dir / "control-valid.csv"
    subprocess.run([sys.executable, "-m", "cli.main", "kb", "import", str(control)], cwd=REPO, env=env,
                   check=True, capture_output=True)

    results = {name: {"name": name, "bytes": len(data), "hostile": not ok} for name, (data, ok) in files.items()}
    for name in files:
        results[name]["reader"] = via_reader(files_dir / name)
        print(f"read_kb  {name:<36} {results[name]['reader']['outcome']}", flush=True)
    for i, name in enumerate(files):
        results[name]["cli"] = out = via_cli(files_dir / name, f"file-{i}", env)
        print(f"cli      {name:<36} exit {out['exit']}", flush=True)
    with FaqStore(env["FAQ_DATABASE_URL"]) as store:
        kbs = set(store.catalog.names())
    for r in results.values():
        r["cli"]["kb_created"] = r["cli"]["kb"] in kbs

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
                     "--log-level", "warning"], env, workdir / "server.log")
    try:
        server.wait_ready(url, 90, path="/healthz")  # no index: /readyz stays 503
        client = signed_in(url)
        try:
            for name, (data, _) in files.items():
                results[name]["console"] = via_console(client, "/console/kbs/default/import", name, data)
                print(f"console  {name:<36} {results[name]['console']['status']}", flush=True)
        finally:
            client.close()
    finally:
        server.stop()
    log = (workdir / "server.log").read_text(errors="replace")

    rows = list(results.values())
    hostile = [r for r in rows if r["hostile"]]
    summary = {
        "reader_crashes": sum(bool(r["reader"].get("crash")) for r in rows),
        "reader_accepted_hostile": sum(r["reader"]["outcome"].startswith("ok") for r in hostile),
        "cli_crashes": sum(r["cli"]["crash"] for r in rows),
        "cli_accepted_hostile": sum(r["cli"]["exit"] == 0 for r in hostile),
        "cli_refused_but_wrote": sum(r["cli"]["exit"] != 0 and r["cli"]["kb_created"] for r in rows),
        "console_crashes": sum(r["console"]["crash"] for r in rows),
        "console_5xx": sum((r["console"]["status"] or 500) >= 500 for r in rows),
        "console_accepted_hostile": sum(r["console"]["status"] == 200 for r in hostile),
        "server_log_tracebacks": log.count("Traceback"),
        "valid_files_refused": sum(not r["reader"]["outcome"].startswith("ok") or r["cli"]["exit"] != 0
                                   or r["console"]["status"] != 200 for r in rows if not r["hostile"]),
    }
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
              "cores": os.cpu_count(), "n_random": args.random, "seed": args.seed,
              "seconds": round(time.perf_counter() - started, 1), "summary": summary, "files": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(report))
    print(json.dumps(summary, indent=1))
    failed = summary["reader_crashes"] + summary["cli_crashes"] + summary["console_crashes"] + \
        summary["console_5xx"] + summary["server_log_tracebacks"] + summary["valid_files_refused"] + \
        summary["cli_refused_but_wrote"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
