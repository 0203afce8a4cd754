"""Draft, publish, roll back through a real `faq serve` over HTTP: is the draft isolated, how long does a publish
and a rollback take, and does any request fail meanwhile.

    python -m bench run publishing [--encoder mpnet] [--edits 1000] [--out bench/results/publishing.json]

1. Isolation: the Basketful KB (evaluation/data/grocery) with publishing=reviewed takes `--edits` random edits
   through the admin API (FAQs created, answers and phrasings changed, FAQs deleted; a publish every 250).
   After each, the edited FAQ's own question is asked on both deployments: production must answer only
   what was published (every FAQ it names, with the published answer text), the `test` deployment must show the
   edit at once (asked with the FAQ's own tag as the filter: its new answer, or for a deleted FAQ nothing). The same edits on a KB with publishing=immediate time today's edit path.
2. Publish: 10,050 phrasings (CLINC150's first 67 training queries of each of its 150 intents, an answer each),
   50 FAQs changed through the admin API, then published while 8 clients ask production; against today's path,
   the same edits and `faq index build`.
3. Rollback: five rollbacks alternating between the two publications while 8 clients ask production; each one's
   time, the failed requests, and whether production answers 60 test queries as it did under that publication.

Writes JSON and Markdown (bench/results/publishing.{json,md}) with the host's CPU.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import admin_client, faq, served_env  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

TOKEN = "bench-publishing-admin-token-0123456789ab"
GROCERY = REPO / "evaluation" / "data" / "grocery"
CLINC = REPO.parent / "shared" / "data" / "clinc150" / "data_full.json"
DEFAULT_OUT = REPO / "bench" / "results" / "publishing.json"
PER_INTENT = 67
CLIENTS = 8


def p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def p99(values: list[float]) -> float | None:
    return round(sorted(values)[min(len(values) - 1, int(0.99 * len(values)))], 2) if values else None


def ask(http, kb: str, query: str, deployment: str = "production") -> dict:
    r = http.post(f"/kbs/{kb}/match", json={"query": query, "deployment": deployment})
    r.raise_for_status()
    return r.json()


# -- 1. isolation --------------------------------------------------------------------------------------------
def isolation(http, kb: str, faqs: dict, edits: int, seed: int, reviewed: bool) -> dict:
    """`edits` random edits; on a reviewed KB every production answer checked against what was published."""
    rng = random.Random(seed)
    draft = {f: dict(v) for f, v in faqs.items()}
    published = {f: v["answer"] for f, v in draft.items()}
    leaks, checked, visible, shown, write_ms, publish_ms, missed = 0, 0, 0, 0, [], [], []
    for i in range(edits):
        op = rng.choices(("create", "update", "delete"), (4, 4, 2))[0] if len(draft) > 20 else "create"
        t0 = time.perf_counter()
        if op == "create":
            faq_id = f"draft-{i}"
            entry = {"answer": f"Draft answer {i}: the {rng.choice(('north', 'south', 'east'))} kiosk, desk {i}.",
                     "questions": [f"Where is help desk number {i} for parcel {rng.randrange(10**6)}?"],
                     "tags": [faq_id]}
            r = http.post(f"/kbs/{kb}/admin/faqs", json={"faq_id": faq_id, **entry})
            draft[faq_id] = entry
        elif op == "update":
            faq_id = rng.choice(sorted(draft))
            entry = {"answer": f"Changed answer {i} of {faq_id}.",
                     "questions": draft[faq_id]["questions"][:2] + [f"{faq_id.replace('-', ' ')} question {i}"],
                     "tags": [faq_id]}
            r = http.patch(f"/kbs/{kb}/admin/faqs/{faq_id}", json=entry)
            draft[faq_id] = entry
        else:
            faq_id = rng.choice(sorted(draft))
            r = http.delete(f"/kbs/{kb}/admin/faqs/{faq_id}")
            entry = draft.pop(faq_id)
        r.raise_for_status()
        write_ms.append((time.perf_counter() - t0) * 1000)
        question = entry["questions"][-1]
        # the FAQ's own tag as the filter: whether the edit is there, not how it ranks among look-alike edits
        test = http.post(f"/kbs/{kb}/match", json={"query": question, "deployment": "test",
                                                  "filter": {"all": [{"tag": faq_id}]}}).json()
        shown += 1
        top = [m["faq_id"] for m in test["matches"]]
        # shown: the FAQ among the matches with its new answer (deleted: gone); whether it is also the answer is
        # the decision's business, as on production
        seen = any(m["faq_id"] == faq_id and m["answer"] == entry["answer"] for m in test["matches"]) \
            if op != "delete" else faq_id not in top
        visible += seen
        if not seen:
            missed.append({"edit": i, "op": op, "faq_id": faq_id, "question": question, "decision": test.get("decision"),
                           "top": [(m["faq_id"], round(m["score"], 3)) for m in test.get("matches", [])[:3]]})
        if reviewed:
            for query in (question, rng.choice(sorted(faqs.values(), key=lambda v: v["answer"]))["questions"][0]):
                production = ask(http, kb, query)
                checked += 1
                named = [production["answer"]] if production["answer"] else []
                named += production["matches"]
                leaks += any(published.get(m["faq_id"]) != m["answer"] for m in named)
            if (i + 1) % 250 == 0:
                t0 = time.perf_counter()
                done = http.post(f"/kbs/{kb}/admin/publish", json={"note": f"after {i + 1} edits"})
                done.raise_for_status()
                publish_ms.append((time.perf_counter() - t0) * 1000)
                published = {f: v["answer"] for f, v in draft.items()}
    return {"edits": edits, "production_answers_checked": checked, "draft_leaks": leaks,
            "test_shows_the_edit_at_once": f"{visible}/{shown}", "write_ms_p50": p50(write_ms),
            "write_ms_p99": p99(write_ms), "publishes": len(publish_ms), "publish_ms_p50": p50(publish_ms),
            "not_shown": missed}


# -- 2-3. publish and rollback under load ----------------------------------------------------------------------
class Load:
    """CLIENTS threads asking production until stopped; counts answers and failures."""

    def __init__(self, url: str, kb: str, queries: list[str]):
        import httpx

        self.url, self.kb, self.queries, self.stop = url, kb, queries, threading.Event()
        self.ok = self.failed = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(httpx, i), daemon=True) for i in range(CLIENTS)]

    def run(self, httpx, i: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            n = i
            while not self.stop.is_set():
                try:
                    ok = http.post(f"/kbs/{self.kb}/match", json={"query": self.queries[n % len(self.queries)]}
                                   ).status_code == 200
                except Exception:  # noqa: BLE001 - a refused connection is a failed request too
                    ok = False
                with self.lock:
                    self.ok += ok
                    self.failed += not ok
                n += CLIENTS

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def answers_of(http, kb: str, queries: list[str], scores: dict | None = None) -> list[tuple]:
    out = []
    for q in queries:
        r = ask(http, kb, q)
        out.append((r["decision"], r["answer"]["faq_id"] if r["answer"] else None,
                    r["answer"]["answer"] if r["answer"] else None))
        if scores is not None:
            scores[q] = [(m["faq_id"], round(m["score"], 4)) for m in r["matches"][:3]] + [r["index_version"]]
    return out


def clinc_kb(path: Path) -> tuple[list[dict], list[str]]:
    data = json.loads(CLINC.read_text())
    by_intent: dict[str, list[str]] = {}
    for text, intent in data["train"]:
        if len(by_intent.setdefault(intent, [])) < PER_INTENT:
            by_intent[intent].append(text)
    rows = [{"faq_id": intent, "question": q, "answer": f"About {intent.replace('_', ' ')}: see the help page.",
             "tags": ["clinc150"]} for intent, qs in sorted(by_intent.items()) for q in qs]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows, [text for text, intent in data["test"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="mpnet")
    parser.add_argument("--edits", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    report: dict = {"created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": cpu_info(),
                    "encoder": args.encoder, "command": "python -m bench run publishing " + " ".join(argv or [])}
    faqs: dict[str, dict] = {}
    for line in (GROCERY / "faq.jsonl").read_text().splitlines():
        row = json.loads(line)
        faqs.setdefault(row["faq_id"], {"answer": row["answer"], "questions": []})["questions"].append(row["question"])
    with tempfile.TemporaryDirectory(prefix="bench-publishing-") as tmp:
        work = Path(tmp)
        env = served_env(work, args.encoder, TOKEN)
        for kb in ("reviewed", "immediate"):
            faq(env, "kb", "import", str(GROCERY / "faq.jsonl"), "--kb", kb)
            faq(env, "index", "build", "--kb", kb, "--no-progress")
        faq(env, "kb", "settings", "--kb", "reviewed", "--set", "publishing=reviewed")
        rows, test_queries = clinc_kb(work / "clinc.jsonl")
        faq(env, "kb", "import", str(work / "clinc.jsonl"), "--kb", "big")
        t0 = time.perf_counter()
        faq(env, "index", "build", "--kb", "big", "--no-progress")
        build_s = time.perf_counter() - t0
        faq(env, "kb", "settings", "--kb", "big", "--set", "publishing=reviewed")
        with admin_client(env, work / "serve.log") as (http, server):
            report["isolation"] = isolation(http, "reviewed", faqs, args.edits, args.seed, reviewed=True)
            report["immediate_edit_path"] = isolation(http, "immediate", faqs, min(args.edits, 300), args.seed,
                                                      reviewed=False)
            probe = test_queries[:60]
            first_scores: dict = {}
            first = answers_of(http, "big", probe, first_scores)
            intents = sorted({r["faq_id"] for r in rows})
            changed = random.Random(args.seed).sample(intents, 50)
            t0 = time.perf_counter()
            for intent in changed:
                questions = [r["question"] for r in rows if r["faq_id"] == intent][:PER_INTENT - 7]
                questions += [f"{intent.replace('_', ' ')} {w}" for w in ("please", "help", "now")]
                http.patch(f"/kbs/big/admin/faqs/{intent}", json={
                    "answer": f"Updated: {intent.replace('_', ' ')} is explained on the new help page.",
                    "questions": questions}).raise_for_status()
            edits_s = time.perf_counter() - t0
            with Load(str(http.base_url), "big", test_queries) as load:
                t0 = time.perf_counter()
                done = http.post("/kbs/big/admin/publish", json={"note": "50 FAQs changed"})
                publish_s = time.perf_counter() - t0
            done.raise_for_status()
            second = answers_of(http, "big", probe)
            report["publish"] = {
                "phrasings": len(rows), "faqs_changed": len(changed), "edits_s": round(edits_s, 2),
                "publish_s": round(publish_s, 2), "today_edit_plus_build_s": round(edits_s + build_s, 2),
                "build_s": round(build_s, 2), "requests_during": load.ok + load.failed, "failed": load.failed,
                "summary": done.json()["publication"]["summary"], "answers_changed": sum(a != b for a, b in zip(first, second))}
            rollbacks = []
            for n in range(5):
                target, expected = (1, first) if n % 2 == 0 else (2, second)
                with Load(str(http.base_url), "big", test_queries) as load:
                    t0 = time.perf_counter()
                    r = http.post("/kbs/big/admin/rollback", json={"to": target, "note": f"rollback {n + 1}"})
                    took = time.perf_counter() - t0
                r.raise_for_status()
                now_scores: dict = {}
                got = answers_of(http, "big", probe, now_scores)
                rollbacks.append({"to": target, "s": round(took, 3), "requests_during": load.ok + load.failed,
                                  "failed": load.failed, "answers_equal": f"{sum(a == b for a, b in zip(got, expected))}"
                                                                           f"/{len(probe)}",
                                  "differ": [{"query": q, "then": a, "now": b, "scores_then": first_scores.get(q),
                                              "scores_now": now_scores.get(q)}
                                             for q, a, b in zip(probe, expected, got) if a != b]})
            report["rollback"] = {"runs": rollbacks, "worst_s": max(r["s"] for r in rollbacks),
                                  "failed": sum(r["failed"] for r in rollbacks)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


def markdown(r: dict) -> str:
    iso, imm, pub, rb = r["isolation"], r["immediate_edit_path"], r["publish"], r["rollback"]
    lines = [f"# Draft, publish, roll back ({r['created_at']})", "",
             f"`{r['command']}`; encoder {r['encoder']}; CPU: {r['machine'].get('cpu_model')} (int8 dot product: {r['machine'].get('int8_dot_product')})", "",
             "| measure | value |", "|---|---|",
             f"| draft edits visible on production ({iso['edits']} edits, {iso['production_answers_checked']} production "
             f"answers checked, {iso['publishes']} publishes) | {iso['draft_leaks']} |",
             f"| edits shown on `test` right after the write | {iso['test_shows_the_edit_at_once']} |",
             f"| admin write, p50 / p99 ms: reviewed KB | {iso['write_ms_p50']} / {iso['write_ms_p99']} |",
             f"| admin write, p50 / p99 ms: immediate KB (today's path, {imm['edits']} edits) | "
             f"{imm['write_ms_p50']} / {imm['write_ms_p99']} |",
             f"| publish of {pub['faqs_changed']} changed FAQs, {pub['phrasings']:,} phrasings | {pub['publish_s']} s "
             f"(today: edits {pub['edits_s']} s + build {pub['build_s']} s = {pub['today_edit_plus_build_s']} s) |",
             f"| failed /match during the publish ({CLIENTS} clients) | {pub['failed']} of {pub['requests_during']} |",
             f"| rollback, worst of {len(rb['runs'])} | {rb['worst_s']} s |",
             f"| failed /match during the rollbacks | {rb['failed']} of {sum(x['requests_during'] for x in rb['runs'])} |",
             "| production answers equal to the publication's after each rollback | "
             + ", ".join(x["answers_equal"] for x in rb["runs"]) + " |", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
