"""Small talk through a real `faq serve`: is held-out small talk answered as small talk of the right kind, and
are requests (in-scope questions, requests that look like small talk, questions wrapped in a greeting)
matched as FAQs?

    python bench/small_talk.py [--encoder mpnet] [--out bench/results/smalltalk]

The four realistic sets are KBs of one data dir, built with the default settings. Sent: the small-talk
test set (evaluation/data/smalltalk/test.jsonl) and not_smalltalk.jsonl to one KB, each set's in-scope
test queries and its greeting-wrapped questions (greeting_prefixed.jsonl) to their own KB. Kind F1 counts
a request taken for small talk as a false positive of that kind, and small talk matched as a request as a
false negative.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.conversation.small_talk.answers import KINDS  # noqa: E402
from bench.serving import Server, faq, free_port, served_env  # noqa: E402
from bench.reports import write_report  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

ADMIN = "smalltalk-bench-admin-token-0123456789abcdef"
DATA = REPO / "evaluation" / "data"
SETS = ("campus_it", "council", "energy", "grocery")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def kind_scores(pairs: list[tuple[str | None, str | None]]) -> dict:
    """(true kind or None, served kind or None) -> per-kind P/R/F1, their macro mean, and small talk at large."""
    out = {}
    for kind in KINDS:
        tp = sum(t == kind and p == kind for t, p in pairs)
        fp = sum(t != kind and p == kind for t, p in pairs)
        fn = sum(t == kind and p != kind for t, p in pairs)
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        out[kind] = {"precision": prec, "recall": rec, "f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0}
    tp = sum(t is not None and p is not None for t, p in pairs)
    fp = sum(t is None and p is not None for t, p in pairs)
    fn = sum(t is not None and p is None for t, p in pairs)
    binary = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return {"kinds": out, "macro_f1": sum(v["f1"] for v in out.values()) / len(out), "small_talk_f1": binary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encoder", default="mpnet")
    ap.add_argument("--workdir")
    ap.add_argument("--out", default="bench/results/smalltalk")
    args = ap.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="smalltalk-bench-"))
    env = served_env(workdir, args.encoder, ADMIN)
    faq(env, "db", "upgrade")
    for name in SETS:
        faq(env, "kb", "import", str(DATA / name / "faq.jsonl"), "--kb", name)
        faq(env, "index", "build", "--kb", name)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / "serve.log")
    rows: list[dict] = []
    try:
        server.wait_ready(url, 900, path="/healthz")
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {ADMIN}"}) as http:
            def ask(group: str, kb: str, text: str, kind: str | None, faq_id: str | None) -> None:
                t = time.perf_counter()
                r = http.post(f"/kbs/{kb}/match", json={"query": text})
                ms = (time.perf_counter() - t) * 1000
                body = r.json()
                served = (body.get("chitchat") or {}).get("kind") if body.get("decision") == "chitchat" else None
                top = body["matches"][0]["faq_id"] if body.get("matches") else None
                rows.append({"group": group, "kb": kb, "text": text, "kind": kind, "served": served, "status": r.status_code,
                             "faq_id": faq_id, "top1": top == faq_id if faq_id else None,
                             "answered": (body.get("answer") or {}).get("faq_id"), "ms": ms})

            for row in jsonl(DATA / "smalltalk" / "test.jsonl"):
                ask("small_talk", "grocery", row["text"], row["kind"], None)
            for row in jsonl(DATA / "smalltalk" / "not_smalltalk.jsonl"):
                ask("looks_like_small_talk", "grocery", row["text"], None, None)
            for name in SETS:
                for row in jsonl(DATA / name / "test.jsonl"):
                    if row.get("faq_id"):
                        ask("in_scope", name, row["query"], None, row["faq_id"])
            for row in jsonl(DATA / "smalltalk" / "greeting_prefixed.jsonl"):
                ask("greeting_wrapped", row["kb"], row["text"], None, row["faq_id"])
    finally:
        server.stop()
    report = summarise(rows, args)
    write_report(Path(args.out), report, markdown(report))


def summarise(rows: list[dict], args: argparse.Namespace) -> dict:
    groups: dict = {}
    for group in ("small_talk", "looks_like_small_talk", "in_scope", "greeting_wrapped"):
        mine = [r for r in rows if r["group"] == group]
        cell = {"n": len(mine), "as_small_talk": sum(r["served"] is not None for r in mine)}
        if group == "small_talk":
            cell["right_kind"] = sum(r["served"] == r["kind"] for r in mine)
        if mine and mine[0]["faq_id"]:
            cell["top1"] = sum(bool(r["top1"]) for r in mine)
            cell["answered_right"] = sum(r["answered"] == r["faq_id"] and r["served"] is None for r in mine)
        groups[group] = cell
    pairs = [(r["kind"], r["served"]) for r in rows if r["group"] in ("small_talk", "looks_like_small_talk", "in_scope")]
    confusion = Counter(f"{r['kind']}->{r['served']}" for r in rows if r["group"] == "small_talk" and r["served"] != r["kind"])
    ms = sorted(r["ms"] for r in rows)
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
            "encoder": args.encoder, "non_200": sum(r["status"] != 200 for r in rows), "groups": groups,
            "scores": kind_scores(pairs), "confusions": dict(confusion.most_common(15)),
            "mistaken_requests": [r["text"] for r in rows if r["group"] != "small_talk" and r["served"]][:40],
            "missed_small_talk": [r["text"] for r in rows if r["group"] == "small_talk" and not r["served"]][:40],
            "median_ms": ms[len(ms) // 2] if ms else None}


def markdown(report: dict) -> str:
    g, s = report["groups"], report["scores"]
    lines = [f"# Small talk through faq serve ({report['date']})", "",
             f"CPU: {report['cpu']}. Encoder {report['encoder']}; non-200 answers: {report['non_200']}.", "",
             f"Kind macro F1 {s['macro_f1']:.3f}; small talk at large F1 {s['small_talk_f1']:.3f} (negatives: the "
             f"requests that look like small talk and the in-scope queries).", "",
             "| sent | n | answered as small talk | right kind | top-1 | answered right |", "|---|---|---|---|---|---|"]
    for name, c in g.items():
        lines.append(f"| {name} | {c['n']} | {c['as_small_talk']} ({c['as_small_talk'] / max(1, c['n']):.1%}) | "
                     f"{c.get('right_kind', '-')} | {c.get('top1', '-')} | {c.get('answered_right', '-')} |")
    lines += ["", "| kind | precision | recall | F1 |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['precision']:.3f} | {v['recall']:.3f} | {v['f1']:.3f} |" for k, v in s["kinds"].items()]
    lines += ["", "Most frequent kind confusions: " + ", ".join(f"{k} ({v})" for k, v in report["confusions"].items()),
              "", "Requests taken for small talk: " + "; ".join(report["mistaken_requests"]) or "none"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
