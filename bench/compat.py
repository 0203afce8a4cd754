"""The QnA Maker and Azure routes against `/match`, through a real `faq serve`, on KBs imported from QnA Maker TSV:

    python bench/compat.py [--sets energy,council,grocery,campus_it] [--encoder mpnet] [--out bench/results/compat]

Each realistic set (its FAQs, the follow-up prompts of follow_ups.jsonl and its context-only FAQs) is written as a
QnA Maker TSV export (kb/formats), imported with `faq kb import FILE.tsv --kb SET` and built, so its FAQs carry
QnA ids as a migrated bot's do. Then, with the query cache off, one request at a time:
- quality: every test query through `/kbs/SET/match`, `generateAnswer` (top 1) and `:query-knowledgebases`
  (top 1): the first FAQ each returns (the answer, else the first clarify option, else none) must be the same;
- multi-turn: every prompt's displayText sent as is with the previous QnA id in `context`: it must land on
  the prompt's target; and each context-only FAQ's own phrasings sent without context: never answered with it;
- latency: client p50 of each route over the same queries, interleaved;
- context-only under stress: a copy of each set, SET-ctx, where every FAQ some prompt leads to is context-only:
  its phrasings and the test queries sent without context must never be answered with one of them, and its
  prompts followed must still land.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import Server, faq, free_port, served_env  # noqa: E402
from bench.reports import write_report  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402
from evaluation.turns import merged_records  # noqa: E402
from kb.formats import KbContents, write_any  # noqa: E402
from kb.formats.base import qna_ids  # noqa: E402

ADMIN = "compat-bench-admin-token-0123456789abcdef"
DATA = REPO / "evaluation" / "data"


def records_of(name: str) -> list:
    """The set's KB with its prompts and its context-only FAQs (follow_ups.jsonl)."""
    rows = [json.loads(line) for line in (DATA / name / "follow_ups.jsonl").read_text().splitlines() if line.strip()]
    hidden = {r["faq_id"] for r in rows if r.get("context_only")}
    return [replace(r, context_only=True) if r.answer is not None and r.faq_id in hidden else r
            for r in merged_records(name)]


def all_targets_hidden(records: list) -> list:
    """The records with every prompt's target context-only (on the row that carries the FAQ's fields)."""
    targets = {f["faq_id"] for r in records for f in (r.follow_ups or [])}
    return [replace(r, context_only=True) if r.answer is not None and r.faq_id in targets else r for r in records]


def first_faq(route: str, body: dict, faqs: dict[int, str]) -> str | None:
    if route == "match":
        if body.get("answer"):
            return body["answer"]["faq_id"]
        return body["options"][0]["faq_id"] if body.get("options") else None
    top = body["answers"][0]["id"] if body.get("answers") else -1
    return faqs.get(top)


class Routes:
    """One KB's three routes, called as a client would, and the first FAQ each returns (as a native faq_id)."""

    def __init__(self, http: httpx.Client, name: str, ids: dict[str, int]):
        self.http, self.name = http, name
        self.numbers = {str(n): f for f, n in ids.items()}  # the imported KB's faq_ids are the QnA ids
        self.by_number = {n: f for f, n in ids.items()}

    def call(self, route: str, query: str, context: int | None = None) -> tuple[dict, float, int]:
        params = None
        if route == "match":
            body: dict = {"query": query}
            if context is not None:
                body["context"] = {"previous_faq_id": str(context)}
            path, headers = f"/kbs/{self.name}/match", {"Authorization": f"Bearer {ADMIN}"}
        elif route == "qnamaker":
            body = {"question": query, "top": 1}
            if context is not None:
                body["context"] = {"previousQnAId": context}
            path = f"/qnamaker/knowledgebases/{self.name}/generateAnswer"
            headers = {"Authorization": f"EndpointKey {ADMIN}"}
        else:
            body = {"question": query, "top": 1}
            if context is not None:
                body["context"] = {"previousQnaId": context}
            path, headers = "/language/:query-knowledgebases", {"Ocp-Apim-Subscription-Key": ADMIN}
            params = {"projectName": self.name, "deploymentName": "production", "api-version": "2023-04-01"}
        t = time.perf_counter()
        r = self.http.post(path, json=body, headers=headers, params=params)
        return r.json(), (time.perf_counter() - t) * 1000, r.status_code

    def faq_of(self, route: str, out: dict) -> str | None:
        got = first_faq(route, out, self.by_number)
        return self.numbers.get(got, got) if route == "match" else got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="energy,council,grocery,campus_it")
    ap.add_argument("--encoder", default="mpnet")
    ap.add_argument("--workdir")
    ap.add_argument("--out", default="bench/results/compat")
    args = ap.parse_args()
    sets = args.sets.split(",")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="compat-bench-"))
    env = served_env(workdir, args.encoder, ADMIN)
    faq(env, "db", "upgrade")
    ids: dict[str, dict[str, int]] = {}
    kbs: dict[str, list] = {}
    for name in sets:
        kbs[name] = records_of(name)
        ids[name] = qna_ids(r.faq_id for r in kbs[name])
        write_any(workdir / f"{name}.tsv", "qnamaker", KbContents(kbs[name]))
        faq(env, "kb", "import", str(workdir / f"{name}.tsv"), "--kb", name)
        faq(env, "index", "build", "--kb", name)
        kbs[f"{name}-ctx"] = all_targets_hidden(kbs[name])
        ids[f"{name}-ctx"] = ids[name]
        write_any(workdir / f"{name}-ctx.tsv", "qnamaker", KbContents(kbs[f"{name}-ctx"]))
        faq(env, "kb", "import", str(workdir / f"{name}-ctx.tsv"), "--kb", f"{name}-ctx")
        faq(env, "index", "build", "--kb", f"{name}-ctx")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, workdir / "serve.log")
    rows, turns, hidden_rows = [], [], []
    try:
        server.wait_ready(url, 900, path="/healthz")
        with httpx.Client(base_url=url, timeout=60) as http:
            for name in sets:
                routes = Routes(http, name, ids[name])
                call, faq_of = routes.call, routes.faq_of
                for line in (DATA / name / "test.jsonl").read_text().splitlines():
                    q = json.loads(line)
                    row = {"set": name, "want": q["faq_id"]}
                    for route in ("match", "qnamaker", "azure"):
                        out, ms, status = call(route, q["query"])
                        row[route] = faq_of(route, out)
                        row[route + "_ms"], row[route + "_status"] = ms, status
                    rows.append(row)
                seen = set()
                for r in kbs[name]:
                    if r.faq_id in seen or not r.follow_ups:
                        continue
                    seen.add(r.faq_id)
                    for p in r.follow_ups:
                        for route in ("qnamaker", "azure", "match"):
                            out, _, _ = call(route, p["text"], context=ids[name][r.faq_id])
                            turns.append({"set": name, "route": route, "landed": faq_of(route, out) == p["faq_id"]})
                # the stress copy: prompts still land; nothing context-only is answered without its context
                stress = Routes(http, f"{name}-ctx", ids[name])
                hidden_faqs = {r.faq_id for r in kbs[f"{name}-ctx"] if r.context_only}
                for r in kbs[name]:
                    for p in (r.follow_ups or []) if r.answer is not None else []:
                        for route in ("qnamaker", "azure"):
                            out, _, _ = stress.call(route, p["text"], context=ids[name][r.faq_id])
                            turns.append({"set": name, "route": route + "-ctx",
                                          "landed": stress.faq_of(route, out) == p["faq_id"]})
                probes = [r.question for r in kbs[name] if r.faq_id in hidden_faqs]
                probes += [json.loads(line)["query"] for line in (DATA / name / "test.jsonl").read_text().splitlines()]
                for text in probes:
                    for route in ("qnamaker", "azure"):
                        out, _, _ = stress.call(route, text)
                        hidden_rows.append({"set": name, "route": route,
                                            "answered": stress.faq_of(route, out) in hidden_faqs,
                                            "hidden": len(hidden_faqs)})
    finally:
        server.stop()
    report = summarise(rows, turns, hidden_rows, sets, args)
    write_report(Path(args.out), report, markdown(report))


def summarise(rows: list[dict], turns: list[dict], hidden: list[dict], sets: list[str], args) -> dict:
    def rate(xs: list[bool]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    routes = ("match", "qnamaker", "azure")
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(), "sets": sets,
        "encoder": args.encoder, "queries": len(rows),
        "non_200": {r: sum(row[r + "_status"] != 200 for row in rows) for r in routes},
        "same_first_faq_as_match": {r: rate([row[r] == row["match"] for row in rows]) for r in routes[1:]},
        "top1_vs_labels": {r: rate([row[r] == row["want"] for row in rows]) for r in routes},
        "prompts_landed": {r: rate([t["landed"] for t in turns if t["route"] == r])
                           for r in (*routes, "qnamaker-ctx", "azure-ctx")},
        "prompts": len([t for t in turns if t["route"] == "qnamaker"]),
        "context_only_answered_without_context": {r: sum(h["answered"] for h in hidden if h["route"] == r)
                                                  for r in routes[1:]},
        "context_only_queries": len([h for h in hidden if h["route"] == "qnamaker"]),
        "context_only_faqs": sum({h["set"]: h["hidden"] for h in hidden}.values()),
        "client_ms_p50": {r: median(row[r + "_ms"] for row in rows) for r in routes},
        "p50_over_match_ms": {r: median(row[r + "_ms"] - row["match_ms"] for row in rows) for r in routes[1:]},
    }


def markdown(r: dict) -> str:
    lines = [f"# QnA Maker and Azure routes vs /match through faq serve ({r['date']})", "",
             f"CPU: {r['cpu']}. Sets: {', '.join(r['sets'])}, each imported from a QnA Maker TSV; encoder "
             f"{r['encoder']}; {r['queries']} test queries; non-200: {r['non_200']}.", "",
             "| measure | generateAnswer | query-knowledgebases | /match |", "|---|---|---|---|",
             f"| first FAQ the same as /match's | {r['same_first_faq_as_match']['qnamaker']:.3f} | "
             f"{r['same_first_faq_as_match']['azure']:.3f} | |",
             f"| top-1 against the labels | {r['top1_vs_labels']['qnamaker']:.3f} | {r['top1_vs_labels']['azure']:.3f} | "
             f"{r['top1_vs_labels']['match']:.3f} |",
             f"| prompts followed land on their target ({r['prompts']}) | {r['prompts_landed']['qnamaker']:.3f} | "
             f"{r['prompts_landed']['azure']:.3f} | {r['prompts_landed']['match']:.3f} |",
             f"| prompts followed when every target is context-only (SET-ctx) | {r['prompts_landed']['qnamaker-ctx']:.3f} | "
             f"{r['prompts_landed']['azure-ctx']:.3f} | |",
             f"| SET-ctx: a context-only FAQ ({r['context_only_faqs']}) answered without context, of "
             f"{r['context_only_queries']} queries (their phrasings + the test queries) | "
             f"{r['context_only_answered_without_context']['qnamaker']} | "
             f"{r['context_only_answered_without_context']['azure']} | |",
             f"| client p50, ms | {r['client_ms_p50']['qnamaker']:.2f} | {r['client_ms_p50']['azure']:.2f} | "
             f"{r['client_ms_p50']['match']:.2f} |",
             f"| median extra over /match per query, ms | {r['p50_over_match_ms']['qnamaker']:+.2f} | "
             f"{r['p50_over_match_ms']['azure']:+.2f} | |"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
