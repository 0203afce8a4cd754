"""The security probe's hostile files: CSV, JSONL, ZIP, XLSX, TSV and YAML built to break an importer, each sent
through `read_any` (in a child process with a memory cap), `faq kb import` and the console's upload."""
from __future__ import annotations

import io
import json
import random
import re
import resource
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Callable

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.security_checks import Probe, csrf_of, sign_in  # noqa: E402
from bench.serving import Server, faq  # noqa: E402

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
