"""Multilingual mode through a real `faq serve`, per query language, against accurate mode for English:

    python bench/multilingual.py [--sets energy,council,grocery,campus_it] [--out bench/results/multilingual]

Two deployments on the same KBs (each realistic set's faq.jsonl imported with `faq kb import` and built with
`faq index build`): accurate (`FAQ_ENCODER=mpnet`) and multilingual (`FAQ_ENCODER=multilingual`). The test
queries go one at a time to `/kbs/SET/match`, with the query cache off:
- English (test.jsonl) to both: top-1, answer precision / recall / F1 at the served decision, ECE of the top
  match's score, the expected precision the response states against the precision measured;
- Spanish, German and French (test.<lang>.jsonl: written from the same English queries) to the
  multilingual one: the same measures per language, and how often the detected `language` is right;
- native: each set with a KB in the language (faq.<lang>.jsonl) imported as SET-<lang> with `languages` set to
  it, asked its own test.<lang>.jsonl;
- the language gate: every KB again as SET-en with `languages=en`: the share of es/de/fr queries answered
  `abstain` with reason "language", and of English ones refused by mistake;
- each kind of query (cross, native) over all its languages together;
- client p50 per language, and the server's resident memory after the run.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from statistics import median


REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import admin_client, faq, served_env  # noqa: E402
from bench.reports import write_report  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402
from evaluation.measures import QueryOutcome, answer_metrics, reliability, top1_accuracy  # noqa: E402

ADMIN = "multilingual-bench-admin-token-0123456789"
DATA = REPO / "evaluation" / "data"
LANGUAGES = ("es", "de", "fr")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def deploy(workdir: Path, encoder: str, sets: list[str], native: bool) -> tuple[dict, list[str]]:
    """The deployment's KBs imported and built -> (environment, KB names)."""
    env = served_env(workdir, encoder, ADMIN)
    faq(env, "db", "upgrade")
    kbs = []
    for name in sets:
        faq(env, "kb", "import", str(DATA / name / "faq.jsonl"), "--kb", name)
        faq(env, "index", "build", "--kb", name)
        kbs.append(name)
        if not native:
            continue
        faq(env, "kb", "import", str(DATA / name / "faq.jsonl"), "--kb", f"{name}-en")
        faq(env, "kb", "settings", "--kb", f"{name}-en", "--set", "languages=en")
        faq(env, "index", "build", "--kb", f"{name}-en")
        kbs.append(f"{name}-en")
        for lang in LANGUAGES:
            if (DATA / name / f"faq.{lang}.jsonl").exists():
                faq(env, "kb", "import", str(DATA / name / f"faq.{lang}.jsonl"), "--kb", f"{name}-{lang}")
                faq(env, "kb", "settings", "--kb", f"{name}-{lang}", "--set", f"languages={lang}")
                faq(env, "index", "build", "--kb", f"{name}-{lang}")
                kbs.append(f"{name}-{lang}")
    return env, kbs


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ask_all(workdir: Path, env: dict, plan: list[tuple[str, str, str, dict]]) -> tuple[list[dict], float]:
    """Serve `env`'s data dir and send each (kb, language, kind, labelled query) -> rows, server RSS MB."""
    rows = []
    with admin_client(env, workdir / "serve.log") as (http, server):
        for kb, _language, _kind, q in plan[:20]:  # warm every KB and both encoders up
            http.post(f"/kbs/{kb}/match", json={"query": q["query"]})
        for kb, language, kind, q in plan:
            t = time.perf_counter()
            r = http.post(f"/kbs/{kb}/match", json={"query": q["query"], "top_k": 5})
            ms = (time.perf_counter() - t) * 1000
            body = r.json()
            rows.append({"kb": kb, "language": language, "kind": kind, "gold": q["faq_id"], "status": r.status_code,
                         "words": len(q["query"].split()), "ms": ms, "detected": body.get("language"),
                         "reason": body.get("reason"), "decision": body.get("decision"),
                         "ranked": [m["faq_id"] for m in body.get("matches", [])],
                         "score": body["matches"][0]["score"] if body.get("matches") else None,
                         "answer": (body.get("answer") or {}).get("faq_id"),
                         "expected_precision": body.get("expected_precision")})
        memory = rss_mb(server.proc.pid)
    return rows, memory


def measures(rows: list[dict]) -> dict:
    outcomes = [QueryOutcome(r["gold"], tuple(r["ranked"]), r["score"], r["answer"]) for r in rows]
    scored = [(r["score"], bool(r["ranked"]) and r["ranked"][0] == r["gold"]) for r in rows if r["score"] is not None]
    ece = reliability([s for s, _ in scored], [ok for _, ok in scored])[0] if scored else None
    answers = answer_metrics(outcomes)
    stated = [r["expected_precision"] for r in rows if r["answer"] is not None and r["expected_precision"] is not None]
    return {"queries": len(rows), "top1": top1_accuracy(outcomes), **{k: answers[k] for k in
            ("answer_precision", "answer_recall", "answer_f1", "oos_recall")},
            "ece": ece, "expected_precision_stated": sum(stated) / len(stated) if stated else None,
            "language_right": sum(r["detected"] == r["language"] for r in rows) / len(rows) if rows else None,
            "p50_ms": median(r["ms"] for r in rows) if rows else None,
            "non_200": sum(r["status"] != 200 for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="energy,council,grocery,campus_it")
    ap.add_argument("--workdir")
    ap.add_argument("--out", default="bench/results/multilingual")
    args = ap.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="multilingual-bench-"))
    english = {name: read_jsonl(DATA / name / "test.jsonl") for name in sets}
    translated = {(name, lang): read_jsonl(DATA / name / f"test.{lang}.jsonl") for name in sets for lang in LANGUAGES
                  if (DATA / name / f"test.{lang}.jsonl").exists()}

    env, _ = deploy(workdir / "accurate", "mpnet", sets, native=False)
    accurate, accurate_mb = ask_all(workdir / "accurate", env,
                                    [(name, "en", "english", q) for name in sets for q in english[name]])
    env, kbs = deploy(workdir / "multilingual", "multilingual", sets, native=True)
    plan = [(name, "en", "english", q) for name in sets for q in english[name]]
    plan += [(name, lang, "cross", q) for (name, lang), qs in translated.items() for q in qs]
    plan += [(f"{name}-{lang}", lang, "native", q) for (name, lang), qs in translated.items() if f"{name}-{lang}" in kbs
             for q in qs]
    plan += [(f"{name}-en", lang, "gate", q) for (name, lang), qs in translated.items() for q in qs]
    plan += [(f"{name}-en", "en", "gate", q) for name in sets for q in english[name]]
    multi, multi_mb = ask_all(workdir / "multilingual", env, plan)

    report: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(), "sets": sets,
                    "rss_mb": {"accurate": accurate_mb, "multilingual": multi_mb}, "rows": {}}
    report["rows"]["english accurate"] = measures(accurate)
    for kind, language in [("english", "en"), *[("cross", lang) for lang in LANGUAGES],
                           *[("native", lang) for lang in LANGUAGES]]:
        picked = [r for r in multi if r["kind"] == kind and r["language"] == language]
        if picked:
            report["rows"][f"{kind} {language} multilingual"] = measures(picked)
    for kind in ("cross", "native"):  # the languages together, as the English row holds the four KBs together
        picked = [r for r in multi if r["kind"] == kind]
        if picked:
            report["rows"][f"{kind} all multilingual"] = measures(picked)
    per_set = {}
    for name in sets:
        for kind, language in [("english", "en"), *[("cross", lang) for lang in LANGUAGES]]:
            picked = [r for r in multi if r["kind"] == kind and r["language"] == language and r["kb"] == name]
            if picked:
                per_set[f"{name} {language}"] = measures(picked)["top1"]
        per_set[f"{name} en accurate"] = measures([r for r in accurate if r["kb"] == name])["top1"]
    report["top1_per_set"] = per_set
    gate = [r for r in multi if r["kind"] == "gate"]
    foreign = [r for r in gate if r["language"] != "en"]
    report["gate"] = {"foreign_refused": sum(r["reason"] == "language" for r in foreign) / max(len(foreign), 1),
                      "foreign": len(foreign),
                      "foreign_3_words_refused": sum(r["reason"] == "language" for r in foreign if r["words"] >= 3)
                      / max(sum(r["words"] >= 3 for r in foreign), 1),
                      "english_refused": sum(r["reason"] == "language" for r in gate if r["language"] == "en")
                      / max(sum(r["language"] == "en" for r in gate), 1)}
    write_report(Path(args.out), report, markdown(report))


def markdown(r: dict) -> str:
    def cell(x: float | None, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    lines = [f"# Multilingual mode through faq serve ({r['date']})", "", f"CPU: {r['cpu']}. Sets: {', '.join(r['sets'])}. "
             f"Server RSS after the run: accurate {r['rss_mb']['accurate']:.0f} MB, multilingual "
             f"{r['rss_mb']['multilingual']:.0f} MB.", "",
             "| queries | n | top-1 | answer P | answer R | answer F1 | OOS recall | ECE | stated expected precision | "
             "language right | p50 ms |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in r["rows"].items():
        lines.append(f"| {name} | {m['queries']} | {cell(m['top1'])} | {cell(m['answer_precision'])} | "
                     f"{cell(m['answer_recall'])} | {cell(m['answer_f1'])} | {cell(m['oos_recall'])} | {cell(m['ece'])} | "
                     f"{cell(m['expected_precision_stated'])} | {cell(m['language_right'])} | {cell(m['p50_ms'], '.1f')} |")
    lines += ["", "Top-1 per set: " + ", ".join(f"{k} {v:.3f}" for k, v in r["top1_per_set"].items()), "",
              f"Language gate (KBs with `languages=en`): {r['gate']['foreign_refused']:.3f} of {r['gate']['foreign']} "
              f"es/de/fr queries refused with reason language ({r['gate']['foreign_3_words_refused']:.3f} of those of 3+ words); "
              f"English refused by mistake: {r['gate']['english_refused']:.3f}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
