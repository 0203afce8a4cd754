"""Load generator for a running `faq serve`: concurrent POST /match from asyncio + httpx.

    faq serve --port 8000 &
    python bench/load.py --url http://127.0.0.1:8000 --concurrency 32 --requests 2000 \
        --queries app/demo/queries.jsonl

Each of `--concurrency` clients sends one request at a time, cycling through the query file, until
`--requests` requests are done or `--max-seconds` have passed (both bounds always apply). Only
loopback URLs are accepted: this is a local benchmark, not a tool to hammer other machines.

Prints and writes (default bench/results/load.json): client latency p50/p90/p99/max, throughput,
errors by kind, the server-side `timings_ms` medians (encode/retrieve/rerank/decide/total, each over the
responses that report it), the median queue wait (per response: total minus the four stages; only for
responses that report all of them) and, when the query file has `faq_id` labels, top-1 accuracy and the
answered rate.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kb.records import KbValidationError  # noqa: E402
from kb.files import read_queries  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "load.json"
#: the pipeline's stages in a /match response's `timings_ms`; `total` also holds the wait in the queue
STAGES = ("encode", "retrieve", "rerank", "decide")
QUEUE_WAIT = "queue_wait"


def is_loopback_url(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "max": None}
    arr = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"p50": round(float(p50), 3), "p90": round(float(p90), 3), "p99": round(float(p99), 3),
            "mean": round(float(arr.mean()), 3), "max": round(float(arr.max()), 3)}


def add_server_timings(server: dict[str, list[float]], timings: dict) -> None:
    """One response's `timings_ms` into the per-stage lists. A stage the server does not report is
    skipped (the peer has no `decide`), and so is the queue wait then: it is taken per response, as
    a difference of medians is not the median of the differences."""
    for key in (*STAGES, "total"):
        if timings.get(key) is not None:
            server[key].append(float(timings[key]))
    if all(timings.get(key) is not None for key in (*STAGES, "total")):
        server[QUEUE_WAIT].append(float(timings["total"]) - sum(float(timings[k]) for k in STAGES))


async def run_load(
    url: str, queries: list[tuple[str, str | None]], concurrency: int, n_requests: int, max_seconds: float,
    top_k: int = 5, timeout: float = 30.0, warmup: int = 5,
) -> dict:
    """Fire the load; returns the report dict (see module docstring)."""
    latencies_ms: list[float] = []
    server: dict[str, list[float]] = {stage: [] for stage in (*STAGES, "total", QUEUE_WAIT)}
    errors: Counter[str] = Counter()
    labelled = correct = answered = 0
    versions: Counter[str] = Counter()
    next_index = 0

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        ready = await client.get("/readyz")
        if ready.status_code != 200:
            raise SystemExit(f"server not ready ({ready.status_code}): {ready.text}")
        for i in range(warmup):  # first calls pay one-off costs (thread start-up, page faults of the index)
            await client.post("/match", json={"query": queries[i % len(queries)][0], "top_k": top_k})

        start = time.perf_counter()
        deadline = start + max_seconds

        async def worker() -> None:
            nonlocal next_index, labelled, correct, answered
            while time.perf_counter() < deadline:
                i = next_index
                if i >= n_requests:
                    return
                next_index += 1  # single-threaded event loop: no lock needed
                query, faq_id = queries[i % len(queries)]
                t0 = time.perf_counter()
                try:
                    r = await client.post("/match", json={"query": query, "top_k": top_k})
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] += 1
                    continue
                elapsed_ms = (time.perf_counter() - t0) * 1000.0
                if r.status_code != 200:
                    errors[f"http_{r.status_code}"] += 1
                    continue
                body = r.json()
                latencies_ms.append(elapsed_ms)
                versions[body["index_version"]] += 1
                add_server_timings(server, body["timings_ms"])
                if body["answer"] is not None:
                    answered += 1
                if faq_id is not None:
                    labelled += 1
                    correct += bool(body["matches"]) and body["matches"][0]["faq_id"] == faq_id

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall_s = time.perf_counter() - start

    ok = len(latencies_ms)
    return {
        "url": url,
        "concurrency": concurrency,
        "requests_planned": n_requests,
        "requests_sent": next_index,
        "ok": ok,
        "errors": sum(errors.values()),
        "errors_by_kind": dict(errors),
        "stopped_by_time_limit": next_index < n_requests,
        "wall_s": round(wall_s, 3),
        "throughput_rps": round(ok / wall_s, 2) if wall_s > 0 else None,
        "latency_ms": percentiles(latencies_ms),
        "server_timings_ms_median": {k: (round(statistics.median(v), 3) if v else None) for k, v in server.items()},
        "answered_rate": round(answered / ok, 4) if ok else None,
        "top1_accuracy": round(correct / labelled, 4) if labelled else None,
        "labelled": labelled,
        "index_versions": dict(versions),
        "top_k": top_k,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "client_host": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
    }


def format_report(report: dict) -> str:
    lat, srv = report["latency_ms"], report["server_timings_ms_median"]
    lines = [
        f"{report['ok']}/{report['requests_sent']} ok, {report['errors']} errors {report['errors_by_kind'] or ''}"
        f" in {report['wall_s']}s at concurrency {report['concurrency']}"
        + (" (stopped by --max-seconds)" if report["stopped_by_time_limit"] else ""),
        f"throughput: {report['throughput_rps']} req/s",
        f"latency ms: p50 {lat['p50']}  p90 {lat['p90']}  p99 {lat['p99']}  max {lat['max']}",
        f"server timings_ms medians: encode {srv['encode']}  retrieve {srv['retrieve']}  rerank {srv['rerank']}"
        f"  decide {srv.get('decide')}  total {srv['total']}  (queue wait {srv.get(QUEUE_WAIT)})",
    ]
    if report["top1_accuracy"] is not None:
        lines.append(f"top-1 accuracy {report['top1_accuracy']} on {report['labelled']} labelled queries, "
                     f"answered rate {report['answered_rate']}")
    return "\n".join(lines)


def positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="server base URL, loopback only (e.g. http://127.0.0.1:8000)")
    p.add_argument("--concurrency", type=positive_int, default=32, help="concurrent clients (default 32, max 256)")
    p.add_argument("--requests", type=positive_int, default=1000, help="requests to send (default 1000, max 100000)")
    p.add_argument("--max-seconds", type=float, default=120.0, help="stop after this long (default 120, max 900)")
    p.add_argument("--queries", required=True, help="query file (JSONL/CSV with `query` and optional `faq_id`)")
    p.add_argument("--top-k", type=positive_int, default=5)
    p.add_argument("--timeout", type=float, default=30.0, help="per-request timeout in seconds")
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"report JSON (default {DEFAULT_OUT.relative_to(REPO)})")
    args = p.parse_args(argv)

    if not is_loopback_url(args.url):
        p.error(f"--url must point at a loopback address (127.0.0.1, ::1 or localhost), got {args.url!r}")
    if args.concurrency > 256 or args.requests > 100_000 or not 0 < args.max_seconds <= 900:
        p.error("bounds: --concurrency <= 256, --requests <= 100000, 0 < --max-seconds <= 900")
    try:
        records = read_queries(args.queries)
    except (OSError, KbValidationError) as exc:
        p.error(f"--queries: {exc}")
    if not records:
        p.error(f"--queries: {args.queries} holds no queries")
    queries = [(r.query, r.faq_id) for r in records]

    try:
        report = asyncio.run(run_load(args.url, queries, args.concurrency, args.requests, args.max_seconds,
                                      top_k=args.top_k, timeout=args.timeout))
    except httpx.ConnectError as exc:
        print(f"error: cannot connect to {args.url}: {exc} (is `faq serve` running?)", file=sys.stderr)
        return 2
    report["queries_file"] = Path(args.queries).name
    print(format_report(report))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    print(f"wrote {out}")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
