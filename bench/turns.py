"""Second turns of conversations through a real `faq serve`: how often the right FAQ comes first with and
without the previous turn as `context`, per kind of second turn, on the realistic sets' turns.jsonl.

    python bench/turns.py [--sets energy,council,grocery,campus_it] [--split test] [--encoder mpnet]
        [--out bench/results/turns]

Each set is its own KB in one data dir, imported with its follow_ups.jsonl merged in (the prompts an editor
would attach: evaluation/turns.py `merged_records`), built with the default settings. Every exchange's second turn is sent three ways: alone;
with `context.previous_faq_id` = the first turn's labelled FAQ and `previous_query` = its text; and, when
the second turn's FAQ is one of the first FAQ's prompts, as the click on that prompt would send it.
A second turn labelled out of scope is right when it gets no answer; otherwise when its FAQ is first (top-1)
and when it is the answer (answered right).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import Server, faq, free_port, served_env  # noqa: E402
from bench.reports import write_report  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402
from evaluation.measures import reliability  # noqa: E402
from evaluation.turns import follow_ups, merged_records  # noqa: E402
from kb.files import write_kb  # noqa: E402

ADMIN = "turns-bench-admin-token-0123456789abcdef"
DATA = REPO / "evaluation" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="energy,council,grocery,campus_it")
    ap.add_argument("--split", default="test")
    ap.add_argument("--encoder", default="mpnet")
    ap.add_argument("--workdir")
    ap.add_argument("--out", default="bench/results/turns")
    args = ap.parse_args()
    sets = args.sets.split(",")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="turns-bench-"))
    env = served_env(workdir, args.encoder, ADMIN)
    faq(env, "db", "upgrade")
    prompts = {}
    for name in sets:
        faq(env, "kb", "create", name)
        prompts[name] = follow_ups(name)
        write_kb(workdir / f"{name}.jsonl", merged_records(name))
        faq(env, "kb", "import", str(workdir / f"{name}.jsonl"), "--kb", name)
        faq(env, "index", "build", "--kb", name)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / "serve.log")
    rows = []
    try:
        server.wait_ready(url, 600, path="/healthz")
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {ADMIN}"}) as http:
            for name in sets:
                for line in (DATA / name / "turns.jsonl").read_text().splitlines():
                    ex = json.loads(line)
                    if ex["split"] != args.split:
                        continue
                    first, second = ex["first"], ex["second"]
                    ways = {"alone": {"query": second["query"]},
                            "context": {"query": second["query"], "context": {
                                "previous_faq_id": first["faq_id"], "previous_query": first["query"]}}}
                    prompt = next((p["text"] for p in prompts[name].get(first["faq_id"], [])
                                   if p["faq_id"] == second["faq_id"]), None)
                    if prompt is not None:
                        ways["click"] = {"query": prompt, "context": {"previous_faq_id": first["faq_id"]}}
                    for way, body in ways.items():
                        t = time.perf_counter()
                        r = http.post(f"/kbs/{name}/match", json=body)
                        ms = (time.perf_counter() - t) * 1000
                        out = r.json()
                        top = out["matches"][0]["faq_id"] if out.get("matches") else None
                        answered = out["answer"]["faq_id"] if out.get("answer") else None
                        want = second["faq_id"]
                        score = out["matches"][0]["score"] if out.get("matches") else 0.0
                        rows.append({"set": name, "kind": ex["kind"], "way": way, "status": r.status_code, "ms": ms,
                                     "score": score, "top_right": bool(want) and top == want,
                                     "top1": top == want if want else answered is None,
                                     "answered_right": answered == want})
    finally:
        server.stop()
    report = summarise(rows, sets, args)
    write_report(Path(args.out), report, markdown(report))


def summarise(rows: list[dict], sets: list[str], args: argparse.Namespace) -> dict:
    table: dict = defaultdict(lambda: {"n": 0, "top1": 0, "answered_right": 0})
    for r in rows:
        for key in ((r["kind"], r["way"]), ("all", r["way"])):
            cell = table[key]
            cell["n"] += 1
            cell["top1"] += r["top1"]
            cell["answered_right"] += r["answered_right"]
    eces = {way: reliability([r["score"] for r in rows if r["way"] == way],
                             [r["top_right"] for r in rows if r["way"] == way])[0] for way in ("alone", "context")}
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(), "sets": sets,
            "ece_top_score": eces,
            "client_ms_p50": {way: median([r["ms"] for r in rows if r["way"] == way]) for way in ("alone", "context")},
            "split": args.split, "encoder": args.encoder, "non_200": sum(r["status"] != 200 for r in rows),
            "cells": {f"{k}|{w}": {**v, "top1_rate": v["top1"] / v["n"], "answered_right_rate": v["answered_right"] / v["n"]}
                      for (k, w), v in sorted(table.items())}}


def markdown(report: dict) -> str:
    lines = [f"# Second turns through faq serve ({report['date']})", "",
             f"CPU: {report['cpu']}. Sets: {', '.join(report['sets'])} ({report['split']} split), encoder "
             f"{report['encoder']}; non-200 answers: {report['non_200']}.", "",
             "Top-1 (out of scope: no answer) / answered right, per kind of second turn:", "",
             "| kind | n | alone | with context | click on the prompt (when the FAQ is one) |", "|---|---|---|---|---|"]
    cells = report["cells"]

    def show(c: dict | None, n: bool = False) -> str:
        return "-" if not c else f"{c['top1_rate']:.3f} / {c['answered_right_rate']:.3f}" + (f" (n={c['n']})" if n else "")

    for kind in ("same_topic", "clarify", "switch", "all"):
        get = {w: cells.get(f"{kind}|{w}") for w in ("alone", "context", "click")}
        if not get["alone"]:
            continue
        lines.append(f"| {kind} | {get['alone']['n']} | {show(get['alone'])} | {show(get['context'])} | "
                     f"{show(get['click'], n=True)} |")
    e = report["ece_top_score"]
    ms = report["client_ms_p50"]
    lines += ["", f"ECE of the top match's score (10 bins): alone {e['alone']:.3f}, with context {e['context']:.3f}. "
              f"Client latency p50 (one request at a time): alone {ms['alone']:.1f} ms, with context {ms['context']:.1f} ms."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
