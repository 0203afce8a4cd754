"""Callers without a token against a real `faq serve` on loopback: what their `GET /kbs/{kb}/readyz`
makes the service load and unload, and what the answers tell about which KBs exist.

    python bench/anon_probe.py [--requests 15] [--workdir DIR] [--out bench/results/anon_probe.json]

One fresh data dir (SQLite): the default KB and KBs kb-a, kb-b, kb-c (a few FAQs each, built with
MiniLM on PyTorch: no ONNX export), served with FAQ_MAX_RESIDENT_KBS=2 and FAQ_METRICS_TOKEN, once with
FAQ_MATCH_REQUIRES_KEY=true and once without. In each run kb-a is made resident by one /match with
FAQ_ADMIN_TOKEN; then --requests anonymous readyz per KB and per unknown name (kb-x, kb-y, kb-z),
interleaved. Loads and unloads are read from /metrics before and after (faq_kb_loads_total,
faq_kb_unloads_total; where the server has no unloads counter, loads minus the change in
faq_kbs_resident). Answers are told apart by status, headers (Date left out) and body, each with the
KB's name blanked out (all names have 4 characters, so lengths compare too). Last, one readyz of kb-b
with FAQ_ADMIN_TOKEN (a health check with a token still loads a KB) and /metrics without a token.

Writes bench/results/anon_probe.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compare import Server, free_port  # noqa: E402
from bench.reports import write_report  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

ADMIN = "anon-probe-admin-token-0123456789abcdef"
METRICS = "anon-probe-metrics"
KBS = ("kb-a", "kb-b", "kb-c")
UNKNOWN = ("kb-x", "kb-y", "kb-z")
FAQS = {
    "pets": ("Dogs on a leash are welcome in every store.", ["Can I bring my dog?", "Are pets allowed inside?"]),
    "parking": ("Free parking is behind the store.", ["Where can I park?", "Is there a car park?"]),
    "wifi": ("The guest wifi is called Shop-Guest, no password.", ["Is there free wifi?", "wifi password"]),
}


def faq(env: dict, *argv: str) -> str:
    out = subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"faq {' '.join(argv)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return out.stdout + out.stderr


@contextmanager
def admin_client(env: dict, log: Path) -> Iterator[tuple[httpx.Client, Server]]:
    """A real `faq serve` on `env`'s data dir, ready, and a client holding its admin token; stopped after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, log)
    try:
        server.wait_ready(url, 900, path="/healthz")
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {env['FAQ_ADMIN_TOKEN']}"}) as http:
            yield http, server
    finally:
        server.stop()


def served_env(workdir: Path, encoder: str, admin_token: str) -> dict[str, str]:
    """The environment of a benchmark's own `faq` commands and `faq serve`: the shell's FAQ_* dropped, a
    SQLite store in `workdir`, no KB polling and no query cache (a repeat would hide what is measured)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir), "FAQ_DATABASE_URL": f"sqlite:///{workdir / 'faq.db'}",
                "FAQ_ENCODER": encoder, "FAQ_ADMIN_TOKEN": admin_token, "FAQ_KB_POLL_SECONDS": "0",
                "FAQ_QUERY_CACHE_SIZE": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return env


def prepare(workdir: Path) -> dict:
    """The data dir with every KB built; returns the environment the server and the CLI share."""
    kb_file = workdir / "kb.jsonl"
    kb_file.write_text("".join(json.dumps({"faq_id": faq_id, "question": q, "answer": answer}) + "\n"
                               for faq_id, (answer, questions) in FAQS.items() for q in questions))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir), "FAQ_DATABASE_URL": f"sqlite:///{workdir / 'faq.db'}",
                "FAQ_ENCODER": "minilm", "FAQ_ENCODER_RUNTIME": "torch", "FAQ_ADMIN_TOKEN": ADMIN,
                "FAQ_METRICS_TOKEN": METRICS, "FAQ_MAX_RESIDENT_KBS": "2", "FAQ_KB_POLL_SECONDS": "0",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    faq(env, "db", "upgrade")
    faq(env, "kb", "import", str(kb_file), "--sync")
    faq(env, "index", "build")
    for kb in KBS:
        faq(env, "kb", "create", kb)
        faq(env, "kb", "import", str(kb_file), "--kb", kb)
        faq(env, "index", "build", "--kb", kb)
    return env


def churn(http: httpx.Client) -> dict:
    values = {}
    for line in http.get("/metrics", headers={"Authorization": f"Bearer {METRICS}"}).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("faq_kb_loads_total", "faq_kb_unloads_total", "faq_kbs_resident"):
            values[name] = float(value)
    return values


def answer_key(response: httpx.Response, kb: str) -> str:
    headers = sorted((k.lower(), v.replace(kb, "{kb}")) for k, v in response.headers.items() if k.lower() != "date")
    return json.dumps([response.status_code, headers, response.text.replace(kb, "{kb}")])


def probe(env: dict, requires_key: bool, requests: int, workdir: Path) -> dict:
    env = {**env, "FAQ_MATCH_REQUIRES_KEY": "true" if requires_key else "false"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / f"server-{'key' if requires_key else 'open'}.log"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], env, log)
    try:
        server.wait_ready(url, 300)
        with httpx.Client(base_url=url, timeout=30) as http:
            made_resident = http.post("/kbs/kb-a/match", json={"query": "parking"},
                                      headers={"Authorization": f"Bearer {ADMIN}"}).status_code
            before = churn(http)
            groups = {"resident": ["kb-a"], "known, not resident": ["kb-b", "kb-c"], "unknown": list(UNKNOWN)}
            answers: dict[str, Counter] = {group: Counter() for group in groups}
            statuses: dict[str, Counter] = {group: Counter() for group in groups}
            for _ in range(requests):
                for group, names in groups.items():
                    for kb in names:
                        r = http.get(f"/kbs/{kb}/readyz")
                        answers[group][answer_key(r, kb)] += 1
                        statuses[group][r.status_code] += 1
            after = churn(http)
            with_token = http.get("/kbs/kb-b/readyz", headers={"Authorization": f"Bearer {ADMIN}"})
            after_token = churn(http)
            metrics_anonymous = http.get("/metrics")
    finally:
        server.stop()

    def delta(a: dict, b: dict) -> dict:
        loads = b.get("faq_kb_loads_total", 0.0) - a.get("faq_kb_loads_total", 0.0)
        if "faq_kb_unloads_total" in b:
            unloads = b["faq_kb_unloads_total"] - a.get("faq_kb_unloads_total", 0.0)
        else:  # a server without the counter: what was loaded and is no longer resident was unloaded
            unloads = loads - (b.get("faq_kbs_resident", 0.0) - a.get("faq_kbs_resident", 0.0))
        return {"loads": int(loads), "unloads": int(unloads)}

    every = Counter()
    for counter in answers.values():
        every.update(counter)
    return {
        "match_requires_key": requires_key,
        "kb_a_made_resident_status": made_resident,
        "anonymous_readyz": sum(sum(c.values()) for c in statuses.values()),
        "churn_from_anonymous": delta(before, after),
        "statuses": {group: dict(c) for group, c in statuses.items()},
        "distinct_answers": {group: len(c) for group, c in answers.items()},
        "distinct_answers_overall": len(every),
        "answers": [json.loads(key) + [n] for key, n in every.items()],
        "readyz_with_admin_token": {"status": with_token.status_code, **delta(after, after_token)},
        "metrics_without_token_status": metrics_anonymous.status_code,
    }


def render(report: dict) -> str:
    lines = [f"# Anonymous readyz probes ({report['date']})", "",
             f"CPU: {report['cpu']['cpu_model']} ({report['cores']} cores)", "",
             f"Command: `{report['command']}`", "",
             f"3 KBs besides `default`, FAQ_MAX_RESIDENT_KBS=2, {report['requests']} anonymous "
             "`GET /kbs/{kb}/readyz` per name (kb-a resident; kb-b, kb-c known, not resident; "
             "kb-x, kb-y, kb-z unknown).", "",
             "| FAQ_MATCH_REQUIRES_KEY | anonymous requests | loads | unloads | statuses (resident / not resident / "
             "unknown) | distinct answers (overall) | readyz kb-b with admin token | /metrics without token |",
             "|---|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        st = run["statuses"]
        statuses = " / ".join(",".join(map(str, sorted(st[g]))) for g in ("resident", "known, not resident", "unknown"))
        token = run["readyz_with_admin_token"]
        lines.append(f"| {str(run['match_requires_key']).lower()} | {run['anonymous_readyz']} | "
                     f"{run['churn_from_anonymous']['loads']} | {run['churn_from_anonymous']['unloads']} | {statuses} | "
                     f"{run['distinct_answers_overall']} | {token['status']} ({token['loads']} load) | "
                     f"{run['metrics_without_token_status']} |")
    lines += ["", "Answers (status, body with the name blanked out, count):", ""]
    for run in report["runs"]:
        lines.append(f"- FAQ_MATCH_REQUIRES_KEY={str(run['match_requires_key']).lower()}:")
        for status, _, body, n in run["answers"]:
            lines.append(f"  - {status} x{n}: `{body if len(body) <= 200 else body[:200] + ' ...'}`")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=15, help="anonymous readyz per KB name")
    p.add_argument("--workdir", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="faq-anon-probe-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = prepare(workdir)
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
              "cores": os.cpu_count(), "requests": args.requests,
              "command": " ".join(["python", "bench/anon_probe.py", *(argv if argv is not None else sys.argv[1:])]),
              "runs": [probe(env, requires_key, args.requests, workdir) for requires_key in (True, False)]}
    write_report(Path(args.out or REPO / "bench" / "results" / "anon_probe.json"), report, render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
