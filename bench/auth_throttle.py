"""Token guessing against a real `faq serve` on loopback: how far 200 wrong tokens get.

    python bench/auth_throttle.py [--guesses 200]

One server process (fresh data dir under --workdir, FAQ_ADMIN_TOKEN set, no KB needed: tokens are checked
before any KB is read). From 127.0.0.1, --guesses wrong bearer tokens on GET /admin/faqs, then the right
one; from 127.0.0.2 (Linux routes all of 127.0.0.0/8 to loopback, so it is another client address to the
server), the right one. The same for the console's sign-in form. Every answer is counted by status with
its Retry-After, and `faq_auth_throttled_total` is read from /metrics at the end.

Writes bench/results/auth_throttle.json and .md.
"""
from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compare import Server, free_port  # noqa: E402
from bench.reports import write_report  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

ATTACKER, OTHER = "127.0.0.1", "127.0.0.2"


def client(url: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, transport=httpx.HTTPTransport(local_address=address))


def tally(answers: list[httpx.Response], seconds: float) -> dict:
    waits = [int(r.headers["retry-after"]) for r in answers if "retry-after" in r.headers]
    return {"requests": len(answers), "seconds": round(seconds, 2),
            "status": {str(k): v for k, v in sorted(Counter(r.status_code for r in answers).items())},
            "retry_after_s": {"min": min(waits), "max": max(waits)} if waits else None,
            "without_retry_after_429": sum(r.status_code == 429 and "retry-after" not in r.headers for r in answers)}


def bearer_guesses(url: str, token: str, guesses: int) -> dict:
    with client(url, ATTACKER) as attacker, client(url, OTHER) as other:
        t0 = time.perf_counter()
        answers = [attacker.get("/admin/faqs", headers={"Authorization": f"Bearer {secrets.token_hex(24)}"})
                   for _ in range(guesses)]
        result = tally(answers, time.perf_counter() - t0)
        result["last_error"] = answers[-1].json().get("error")
        right = {"Authorization": f"Bearer {token}"}
        result["right_token_same_address"] = attacker.get("/admin/faqs", headers=right).status_code
        result["right_token_other_address"] = other.get("/admin/faqs", headers=right).status_code
    return result


def csrf(c: httpx.Client) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', c.get("/console/login").text)
    assert found, "no CSRF field on the sign-in page"
    return found.group(1)


def console_guesses(url: str, token: str, guesses: int) -> dict:
    with client(url, ATTACKER) as attacker, client(url, OTHER) as other:
        field = csrf(attacker)
        t0 = time.perf_counter()
        answers = [attacker.post("/console/login", data={"csrf": field, "token": secrets.token_hex(24)})
                   for _ in range(guesses)]
        result = tally(answers, time.perf_counter() - t0)
        result["right_token_same_address"] = attacker.post("/console/login",
                                                           data={"csrf": field, "token": token}).status_code
        r = other.post("/console/login", data={"csrf": csrf(other), "token": token})
        result["right_token_other_address"] = r.status_code
        result["other_address_signed_in"] = r.status_code == 303 and r.headers.get("location") == "/console/kbs"
    return result


def render(report: dict) -> str:
    lines = ["# Failed token checks throttled per address", "",
             f"{report['date']}, `{report['command']}`, {report['cpu']['cpu_model'] or 'CPU unknown'} "
             f"({report['cores']} cores). One `faq serve`; guesses from {ATTACKER}, the right token then from "
             f"both {ATTACKER} and {OTHER}.", "",
             "| | guesses | s | 401 | 429 | Retry-After (s) | right token, same address | right token, other address |",
             "|---|---:|---:|---:|---:|---|---:|---:|"]
    for name, r in report["scenarios"].items():
        wait = f"{r['retry_after_s']['min']}-{r['retry_after_s']['max']}" if r["retry_after_s"] else "-"
        lines.append(f"| {name} | {r['requests']} | {r['seconds']} | {r['status'].get('401', 0)} | "
                     f"{r['status'].get('429', 0)} | {wait} | "
                     f"{r['right_token_same_address']} | {r['right_token_other_address']} |")
    lines += ["", f"`faq_auth_throttled_total`: {report['throttled_metric']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--guesses", type=int, default=200)
    p.add_argument("--workdir", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="faq-auth-throttle-"))
    workdir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(24)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(workdir), "FAQ_ADMIN_TOKEN": token, "FAQ_ENCODER": "minilm",
                "FAQ_ENCODER_RUNTIME": "torch", "FAQ_KB_POLL_SECONDS": "0",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server([sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--log-level", "warning"],
                    env, workdir / "server.log")
    report: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
                    "cores": os.cpu_count(), "guesses": args.guesses,
                    "command": " ".join(["python", "bench/auth_throttle.py", *(argv or sys.argv[1:])]), "scenarios": {}}
    try:
        server.wait_ready(url, 300, path="/healthz")  # no index is needed to check tokens
        report["scenarios"]["bearer (/admin/faqs)"] = bearer_guesses(url, token, args.guesses)
        report["scenarios"]["console sign-in"] = console_guesses(url, token, args.guesses)
        found = re.search(r"^faq_auth_throttled_total (\S+)$", httpx.get(f"{url}/metrics").text, re.M)
        report["throttled_metric"] = float(found.group(1)) if found else None
    finally:
        server.stop()
    write_report(Path(args.out or REPO / "bench" / "results" / "auth_throttle.json"), report, render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
