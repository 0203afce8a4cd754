"""What `/match` answers, for comparing two versions of the code byte for byte (a refactor must not change it).

    python bench/responses.py --workdir DIR --out before.jsonl            # import + build, serve, ask
    (other checkout) python bench/responses.py --workdir DIR --reuse --out after.jsonl
    cmp before.jsonl after.jsonl

The realistic sets (evaluation/data: their FAQs with follow-up prompts and context-only FAQs) and the demo KB
are imported and built once into DIR; `--reuse` serves that same build, so only the serving code differs.
Through a real `faq serve`, one request at a time, each set is asked: its test queries in English, Spanish,
German and French, on the `ann` arm and on the `lexical` arm; both turns of its conversations (the second
with the first's answer as `context`, and each follow-up prompt sent back); and the small-talk set. Each
response is written as one JSON line, keys sorted, without `request_id` and `timings_ms`. A summary
(counts, decisions) goes to OUT.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import admin_client, faq, served_env  # noqa: E402
from evaluation.turns import merged_records  # noqa: E402
from kb.files import write_kb  # noqa: E402

ADMIN = "responses-bench-admin-token-0123456789abcd"
DATA = REPO / "evaluation" / "data"
SETS = ("energy", "council", "grocery", "campus_it")
LANGUAGES = ("", ".es", ".de", ".fr")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if path.exists() else []


def prepare(env: dict, workdir: Path) -> None:
    faq(env, "db", "upgrade")
    faq(env, "kb", "import", str(REPO / "app" / "demo" / "faq.jsonl"), "--sync")
    faq(env, "index", "build")
    for name in SETS:
        path = workdir / f"{name}.jsonl"
        write_kb(path, merged_records(name))
        faq(env, "kb", "import", str(path), "--kb", name)
        faq(env, "index", "build", "--kb", name)


def requests_of(name: str) -> list[tuple[str, dict]]:
    """(route, body) of every request asked of set `name` (the demo KB: `default`)."""
    route = "/match" if name == "default" else f"/kbs/{name}/match"
    if name == "default":
        queries = [q["text"] for q in rows(DATA / "smalltalk" / "test.jsonl")]
        return [(route, {"query": q}) for q in queries[:50]] + [(route, {"query": "how do I reset my password"})]
    out = []
    for suffix in LANGUAGES:
        for q in rows(DATA / name / f"test{suffix}.jsonl"):
            out.append((route, {"query": q["query"]}))
            if not suffix:
                out.append((route, {"query": q["query"], "arm": "lexical"}))
    for turn in rows(DATA / name / "turns.jsonl"):
        out.append((route, {"query": turn["first"]["query"]}))
        if turn["first"].get("faq_id"):
            out.append((route, {"query": turn["second"]["query"],
                                "context": {"previous_faq_id": turn["first"]["faq_id"],
                                            "previous_query": turn["first"]["query"]}}))
    for prompts in rows(DATA / name / "follow_ups.jsonl"):
        for f in prompts.get("follow_ups", []):
            out.append((route, {"query": f["text"], "context": {"previous_faq_id": prompts["faq_id"]}}))
    out += [(route, {"query": t["text"]}) for t in rows(DATA / "smalltalk" / "test.jsonl")[:100]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True, help="the data dir (built unless --reuse)")
    ap.add_argument("--reuse", action="store_true", help="serve the build already in --workdir")
    ap.add_argument("--encoder", default="mpnet", help="FAQ_ENCODER of the build (the default mode's: mpnet)")
    ap.add_argument("--out", required=True, help="the responses, one JSON line each")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    # no query log: logged traffic replaces the build's expected-precision table once there is enough of it,
    # so each run would change what the next one answers
    env = {**served_env(workdir, args.encoder, ADMIN), "FAQ_QUERY_LOG": "false"}
    if not args.reuse:
        prepare(env, workdir)
    decisions: Counter = Counter()
    n = 0
    with admin_client(env, workdir / "serve.log") as (http, _), open(args.out, "w", encoding="utf-8") as out:
        for name in ("default", *SETS):
            for route, body in requests_of(name):
                r = http.post(route, json=body)
                answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
                if isinstance(answer, dict):
                    answer.pop("request_id", None)
                    answer.pop("timings_ms", None)
                    decisions[answer.get("decision")] += 1
                out.write(json.dumps({"route": route, "body": body, "status": r.status_code, "response": answer},
                                     sort_keys=True, ensure_ascii=False) + "\n")
                n += 1
    Path(args.out).with_suffix(".md").write_text(
        f"# /match responses\n\n{n} requests; decisions: {dict(sorted(decisions.items(), key=str))}.\n",
        encoding="utf-8")
    print(f"{n} responses -> {args.out}; decisions {dict(decisions)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
