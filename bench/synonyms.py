"""KB synonyms through a real `faq serve`: the realistic sets' test queries with and without each set's
synonyms.json (written from the KB alone), on the `ann` and `lexical` arms.

    python bench/synonyms.py [--sets energy,council,grocery,campus_it] [--encoder mpnet] [--out bench/results/synonyms]

Each set is imported twice, as KB SET with `faq kb settings --set synonyms=...` and as SET-plain without, and
both are built. Top-1 (a query labelled out of scope is right when it gets no answer) and answered-right rates
are given for all test queries and for those the synonyms rewrite (where they can change anything).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import admin_client, faq, served_env  # noqa: E402
from bench.reports import write_report  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402
from kb.files import read_kb  # noqa: E402
from kb.synonyms import SynonymRewriter  # noqa: E402

ADMIN = "synonyms-bench-admin-token-0123456789abcdef"
DATA = REPO / "evaluation" / "data"
ARMS = ("ann", "lexical")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="energy,council,grocery,campus_it")
    ap.add_argument("--encoder", default="mpnet")
    ap.add_argument("--workdir")
    ap.add_argument("--out", default="bench/results/synonyms")
    args = ap.parse_args()
    sets = args.sets.split(",")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="synonyms-bench-"))
    env = served_env(workdir, args.encoder, ADMIN)
    faq(env, "db", "upgrade")
    rewrites = {}
    for name in sets:
        groups = json.loads((DATA / name / "synonyms.json").read_text())
        records = read_kb(DATA / name / "faq.jsonl")
        rewrites[name] = SynonymRewriter(groups).for_texts([r.question for r in records] +
                                                          [r.answer for r in records if r.answer])
        for kb in (name, f"{name}-plain"):
            faq(env, "kb", "import", str(DATA / name / "faq.jsonl"), "--kb", kb)
        faq(env, "kb", "settings", "--kb", name, "--set", f"synonyms={json.dumps(groups)}")
        for kb in (name, f"{name}-plain"):
            faq(env, "index", "build", "--kb", kb)
    rows = []
    with admin_client(env, workdir / "serve.log") as (http, _):
        for name in sets:
            for line in (DATA / name / "test.jsonl").read_text().splitlines():
                q = json.loads(line)
                rewritten = rewrites[name](q["query"]) != q["query"]
                for arm in ARMS:
                    for kb, synonyms in ((name, True), (f"{name}-plain", False)):
                        out = http.post(f"/kbs/{kb}/match", json={"query": q["query"], "arm": arm}).json()
                        top = out["matches"][0]["faq_id"] if out.get("matches") else None
                        answered = out["answer"]["faq_id"] if out.get("answer") else None
                        want = q["faq_id"]
                        rows.append({"set": name, "arm": arm, "synonyms": synonyms, "rewritten": rewritten,
                                     "top1": top == want if want else answered is None,
                                     "answered_right": answered == want})
    report = summarise(rows, sets, args)
    write_report(Path(args.out), report, markdown(report))


def summarise(rows: list[dict], sets: list[str], args) -> dict:
    cells = {}
    for arm in ARMS:
        for subset in ("all", "rewritten"):
            for synonyms in (False, True):
                sel = [r for r in rows if r["arm"] == arm and r["synonyms"] == synonyms
                       and (subset == "all" or r["rewritten"])]
                cells[f"{arm}|{subset}|{'with' if synonyms else 'without'}"] = {
                    "n": len(sel), "top1": sum(r["top1"] for r in sel) / max(len(sel), 1),
                    "answered_right": sum(r["answered_right"] for r in sel) / max(len(sel), 1)}
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(), "sets": sets,
            "encoder": args.encoder, "cells": cells}


def markdown(r: dict) -> str:
    lines = [f"# KB synonyms through faq serve ({r['date']})", "",
             f"CPU: {r['cpu']}. Sets: {', '.join(r['sets'])} (test split); encoder {r['encoder']}.", "",
             "Top-1 / answered right:", "", "| arm | queries | n | without synonyms | with synonyms |", "|---|---|---|---|---|"]
    c = r["cells"]
    for arm in ARMS:
        for subset in ("all", "rewritten"):
            a, b = c[f"{arm}|{subset}|without"], c[f"{arm}|{subset}|with"]
            lines.append(f"| {arm} | {subset} | {a['n']} | {a['top1']:.3f} / {a['answered_right']:.3f} | "
                         f"{b['top1']:.3f} / {b['answered_right']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
