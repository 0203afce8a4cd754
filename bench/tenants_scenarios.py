"""bench/tenants.py's scenarios: the servers, the clients and what each scenario (cold, perf, swap) measures."""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.compare import server_env
from bench.hostile import Clients
from bench.load import add_server_timings, percentiles
from bench.serving import Server, faq, free_port, rss_mb
from bench.tenants_plan import (
    ADMIN_TOKEN, COLD_TARGET_MS, LATENCY_TARGET, MULTI_MIX, MULTI_REF, RSS_SLACK, SINGLE, SINGLE_ROUTE, first_at,
    metric_value, pool_runs, ratio,
)


# ---------------------------------------------------------------- servers and clients

def start_server(args: argparse.Namespace, name: str, data_dir: Path, extra: dict[str, str]) -> tuple[Server, str]:
    port = free_port()
    env = server_env(args, {"FAQ_DATA_DIR": str(data_dir), "FAQ_ENCODER": "minilm", **extra})
    logs = args.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning"]
    server = Server(argv, env, logs / f"{name}.log")
    base = f"http://127.0.0.1:{port}"
    # /healthz, not /readyz: /readyz is the default KB's, which holds nothing in the many-KB data dir
    t0 = time.perf_counter()
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{name}: server exited with {server.proc.returncode}:\n{server.log_tail()}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.perf_counter() - t0 > args.ready_timeout:
            server.stop()
            raise RuntimeError(f"{name}: not up after {args.ready_timeout:.0f} s:\n{server.log_tail()}")
        time.sleep(0.25)
    print(f"{name}: up in {time.perf_counter() - t0:.1f} s on {base} (log {server.log_path})", flush=True)
    return server, base


def read_metrics(client: httpx.Client) -> dict:
    text = client.get("/metrics").text
    return {"resident": metric_value(text, "faq_kbs_resident"), "loads": metric_value(text, "faq_kb_loads_total")}


class Watch:
    """RSS of the server and its /metrics resident count, sampled in a thread: the peaks between the
    benchmark's own readings, and the RSS time series for the chart."""

    def __init__(self, pid: int, base: str, interval_s: float = 0.1):
        self.pid, self.base, self.interval_s = pid, base, interval_s
        self.t0 = time.perf_counter()
        self.series: list[tuple[float, float]] = []
        self.max_resident: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)

    def _run(self) -> None:
        last_rss = 0.0
        with httpx.Client(base_url=self.base, timeout=5) as client:
            while not self._stop.wait(self.interval_s):
                now = time.perf_counter() - self.t0
                if now - last_rss >= 0.25:
                    value = rss_mb(self.pid)
                    if value is not None:
                        self.series.append((round(now, 2), round(value, 1)))
                    last_rss = now
                try:
                    resident = read_metrics(client)["resident"]
                except (httpx.HTTPError, ValueError):
                    continue
                if resident is not None:
                    self.max_resident = resident if self.max_resident is None else max(self.max_resident, resident)

    def __enter__(self) -> "Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def touch_pass(client: httpx.Client, pid: int, plan: list[dict], label: str) -> list[dict]:
    """One request to each KB in turn, one at a time; per KB its latency and what followed it."""
    rows = []
    for entry in plan:
        query = entry["queries"][0][0] if entry["queries"] else entry["faqs"][next(iter(entry["faqs"]))]["phrasings"][0]
        t0 = time.perf_counter()
        try:
            r = client.post(f"/kbs/{entry['name']}/match", json={"query": query})
            status, body = r.status_code, (r.json() if r.status_code == 200 else r.text[:300])
        except httpx.HTTPError as exc:
            status, body = 0, f"{type(exc).__name__}: {exc}"
        ms = (time.perf_counter() - t0) * 1000.0
        m = read_metrics(client)
        rows.append({"pass": label, "kb": entry["name"], "ms": round(ms, 2), "status": status,
                     "server_total_ms": body["timings_ms"]["total"] if status == 200 else None,
                     "error": None if status == 200 else body,
                     "resident": m["resident"], "loads": m["loads"], "rss_mb": round(rss_mb(pid) or 0.0, 1)})
    return rows


async def touch_concurrent(base: str, plan: list[dict], clients: int) -> list[dict]:
    """`clients` clients taking the KBs in turn: first requests to KBs, several at once."""
    rows: list[dict] = []
    next_i = 0
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        async def worker() -> None:
            nonlocal next_i
            while next_i < len(plan):
                entry = plan[next_i]
                next_i += 1
                query = entry["queries"][-1][0] if entry["queries"] else "hello"
                t0 = time.perf_counter()
                try:
                    r = await client.post(f"/kbs/{entry['name']}/match", json={"query": query})
                    status, error = r.status_code, (None if r.status_code == 200 else r.text[:300])
                except httpx.HTTPError as exc:
                    status, error = 0, f"{type(exc).__name__}: {exc}"
                rows.append({"pass": f"{clients} clients", "kb": entry["name"], "status": status, "error": error,
                             "ms": round((time.perf_counter() - t0) * 1000.0, 2)})
        await asyncio.gather(*(worker() for _ in range(clients)))
    return rows


def server_load_times(log_path: Path) -> dict[str, list[float]]:
    """The server's own "loaded KB <name> in N ms" lines, per KB in order."""
    out: dict[str, list[float]] = {}
    for m in re.finditer(r"loaded KB (\S+) in (\d+) ms", log_path.read_text(errors="replace")):
        out.setdefault(m.group(1), []).append(float(m.group(2)))
    return out


def attach_load_times(rows: list[dict], loads: dict[str, list[float]]) -> None:
    """Give each touch the server's own load time of its KB: a KB's loads are logged in the order of
    its touches, and every touch of a KB that is not resident loads it once."""
    left = {kb: list(values) for kb, values in loads.items()}
    for r in rows:
        values = left.get(r["kb"])
        r["server_load_ms"] = values.pop(0) if values and r["status"] == 200 else None


def cold_summary(rows: list[dict]) -> dict:
    ok = [r["ms"] for r in rows if r["status"] == 200]
    arr = sorted(ok)
    p90 = percentiles(ok)["p90"]
    load_ms = [r["server_load_ms"] for r in rows if r.get("server_load_ms") is not None]
    first_total = [r["server_total_ms"] for r in rows if r.get("server_total_ms") is not None]
    return {"n": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
            "server_load_ms_p50": percentiles(load_ms)["p50"], "server_load_ms_max": percentiles(load_ms)["max"],
            "match_total_ms_p50": percentiles(first_total)["p50"],
            "failed_status": dict(Counter(str(r["status"]) for r in rows if r["status"] != 200)),
            "p50_ms": percentiles(ok)["p50"], "p90_ms": p90, "max_ms": arr[-1] if arr else None,
            "over_target": sum(ms > COLD_TARGET_MS for ms in ok),
            "slowest": sorted(({"kb": r["kb"], "ms": r["ms"]} for r in rows if r["status"] == 200),
                              key=lambda x: -x["ms"])[:3]}


def brief(rows: list[dict]) -> str:
    s = cold_summary(rows)
    return (f"{s['ok']}/{s['n']} ok, p50 {s['p50_ms']} p90 {s['p90_ms']} max {s['max_ms']} ms, "
            f"{s['over_target']} over {COLD_TARGET_MS:.0f} ms; RSS now {rows[-1].get('rss_mb', '–')} MB")


def rss_points(rows: list[dict], budget: int, n_kbs: int) -> dict:
    """RSS at the marks the targets name, from the never-loaded pass (resident counts the default KB)."""
    first = rows[0] if rows else None
    at_budget = first_at(rows, "resident", min(budget, n_kbs + 1))
    at_20 = first_at(rows, "resident", 20)
    return {"after_1_kb": first and first["rss_mb"], "at_20_resident": at_20 and at_20["rss_mb"],
            "at_budget": at_budget and at_budget["rss_mb"],
            "after_all_touched": rows[-1]["rss_mb"] if rows else None}


# ---------------------------------------------------------------- scenarios

def first_load(rows: list[dict], rss_start: float | None) -> dict | None:
    """The process's first KB load: with the default KB empty it also loads the encoder the KBs' builds
    name (the default KB's encoder was chosen without a manifest), so it stands apart from the others."""
    if not rows:
        return None
    r = rows[0]
    return {"kb": r["kb"], "client_ms": r["ms"], "server_load_ms": r.get("server_load_ms"),
            "rss_added_mb": None if rss_start is None else round(r["rss_mb"] - rss_start, 1)}


def scenario_cold(args: argparse.Namespace, plan: list[dict], budget: int, name: str) -> dict:
    server, base = start_server(args, name, args.data_dir / "multi", {"FAQ_MAX_RESIDENT_KBS": str(budget)})
    pid = server.proc.pid
    rss_after_pass: list[float] = []
    try:
        with Watch(pid, base) as watch, httpx.Client(base_url=base, timeout=60) as client:
            rss_start = rss_mb(pid)
            rows = touch_pass(client, pid, plan, "never loaded")
            rss_after_pass.append(rows[-1]["rss_mb"])
            print(f"  never loaded: {brief(rows)}", flush=True)
            for i in range(args.lru_passes if budget <= len(plan) else 0):
                again = touch_pass(client, pid, plan, "unloaded by the LRU")
                rss_after_pass.append(again[-1]["rss_mb"])
                print(f"  unloaded by the LRU, pass {i + 1}: {brief(again)}", flush=True)
                rows += again
            if budget <= len(plan):
                conc = asyncio.run(touch_concurrent(base, plan, 4))
                print(f"  4 clients: {brief(conc)}", flush=True)
                rows += conc
            final = read_metrics(client)
            rss_end = rss_mb(pid)
    finally:
        server.stop()
    attach_load_times(rows, server_load_times(server.log_path))
    by_pass: dict[str, list[dict]] = {}
    for r in rows:
        by_pass.setdefault(r["pass"], []).append(r)
    read_resident = [r["resident"] for r in rows if r.get("resident") is not None]
    max_resident = max([*read_resident, *([watch.max_resident] if watch.max_resident is not None else [])],
                       default=None)
    server_ms = [r["server_load_ms"] for r in rows if r.get("server_load_ms") is not None]
    points = rss_points(by_pass.get("never loaded", []), budget, len(plan))
    bound = None if points["at_budget"] is None else round(points["at_budget"] * RSS_SLACK, 1)
    return {"name": name, "budget": budget, "kbs": len(plan), "lru_passes": args.lru_passes,
            "passes": {label: cold_summary(rs) for label, rs in by_pass.items()},
            "first_load": first_load(rows, rss_start),
            "max_resident_seen": max_resident, "budget_kept": max_resident is not None and max_resident <= budget,
            "kb_loads": final["loads"], "resident_at_end": final["resident"],
            "server_load_ms": percentiles(server_ms) if server_ms else None,
            "rss_mb": {"start": round(rss_start or 0, 1), **points, "after_each_pass": rss_after_pass,
                       "end": round(rss_end or 0, 1), "peak": max((v for _, v in watch.series), default=None),
                       "bound": bound},
            "rss_bounded": bound is not None and max(rss_after_pass + [rss_end or 0]) <= bound,
            "rss_series": watch.series, "touches": rows}


async def drive(base: str, targets: list[tuple[str, str, str | None]], concurrency: int, n_requests: int,
                max_seconds: float, warmup: int = 20, top_k: int = 5) -> dict:
    """bench/load.py's closed loop over (path, query, faq_id) targets, so one run can spread over KBs:
    each client sends one request at a time, taking the next target in turn."""
    latencies: list[float] = []
    server: dict[str, list[float]] = {k: [] for k in ("encode", "retrieve", "rerank", "decide", "total",
                                                      "queue_wait")}
    errors: Counter[str] = Counter()
    labelled = correct = 0
    next_i = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:
        for path, query, _ in targets[-warmup:]:
            await client.post(path, json={"query": query, "top_k": top_k})
        start = time.perf_counter()
        deadline = start + max_seconds

        async def worker() -> None:
            nonlocal next_i, labelled, correct
            while time.perf_counter() < deadline and next_i < n_requests:
                path, query, faq_id = targets[next_i % len(targets)]
                next_i += 1
                t0 = time.perf_counter()
                try:
                    r = await client.post(path, json={"query": query, "top_k": top_k})
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] += 1
                    continue
                ms = (time.perf_counter() - t0) * 1000.0
                if r.status_code != 200:
                    errors[f"http_{r.status_code}"] += 1
                    continue
                body = r.json()
                latencies.append(ms)
                add_server_timings(server, body["timings_ms"])
                if faq_id is not None:
                    labelled += 1
                    correct += bool(body["matches"]) and body["matches"][0]["faq_id"] == faq_id

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall_s = time.perf_counter() - start
    return {"concurrency": concurrency, "latencies": latencies, "server": server, "errors_by_kind": dict(errors),
            "latency_ms": percentiles(latencies), "throughput_rps": round(len(latencies) / wall_s, 2),
            "labelled": labelled, "correct": correct}


def interleave(plan: list[dict]) -> list[tuple[str, str, str | None]]:
    """Every KB's queries, KB after KB in turn, so consecutive requests go to different KBs."""
    out = []
    for j in range(max(len(e["queries"]) for e in plan)):
        for e in plan:
            if e["queries"]:
                q, faq_id = e["queries"][j % len(e["queries"])]
                out.append((f"/kbs/{e['name']}/match", q, faq_id))
    return out


def scenario_perf(args: argparse.Namespace, plan: list[dict]) -> dict:
    ref = next(e for e in plan if e["name"] == args.reference)
    budget = len(plan) + 1
    multi, mbase = start_server(args, "perf-multi", args.data_dir / "multi", {"FAQ_MAX_RESIDENT_KBS": str(budget)})
    single = None
    try:
        with httpx.Client(base_url=mbase, timeout=60) as client:
            rss_start = rss_mb(multi.proc.pid)
            touches = touch_pass(client, multi.proc.pid, plan, "never loaded")
        print(f"  never loaded (budget {budget}): {brief(touches)}", flush=True)
        single, sbase = start_server(args, "perf-single", args.data_dir / "single", {})
        single.wait_ready(sbase, args.ready_timeout)
        rss_single = rss_mb(single.proc.pid)
        systems = {SINGLE: (sbase, [("/match", q, f) for q, f in ref["queries"]]),
                   SINGLE_ROUTE: (sbase, [("/kbs/default/match", q, f) for q, f in ref["queries"]]),
                   MULTI_REF: (mbase, [(f"/kbs/{ref['name']}/match", q, f) for q, f in ref["queries"]]),
                   MULTI_MIX: (mbase, interleave(plan))}
        raw: dict[tuple[str, int], list[dict]] = {}
        for rnd in range(args.rounds):
            for c in args.concurrency:
                # the order flips every round: a machine getting busier must not always hit the same system
                for name, (base, targets) in list(systems.items())[::1 if rnd % 2 == 0 else -1]:
                    run = asyncio.run(drive(base, targets, c, args.requests, args.max_seconds))
                    raw.setdefault((name, c), []).append(run)
                    print(f"  round {rnd + 1} {name} c{c}: p50 {run['latency_ms']['p50']} p99 "
                          f"{run['latency_ms']['p99']} ms, {run['throughput_rps']} req/s, "
                          f"errors {run['errors_by_kind'] or 0}", flush=True)
        with httpx.Client(base_url=mbase, timeout=60) as client:
            final = read_metrics(client)
        rss_multi_end, rss_single_end = rss_mb(multi.proc.pid), rss_mb(single.proc.pid)
    finally:
        multi.stop()
        if single is not None:
            single.stop()
    attach_load_times(touches, server_load_times(multi.log_path))
    pooled = {f"{name} c{c}": {"system": name, "concurrency": c, **pool_runs(runs)} for (name, c), runs in raw.items()}
    comparisons = []
    for c in args.concurrency:
        base_run = pooled[f"{SINGLE} c{c}"]
        for name in (SINGLE_ROUTE, MULTI_REF, MULTI_MIX):
            run = pooled[f"{name} c{c}"]
            p50 = ratio(run["latency_ms"]["p50"], base_run["latency_ms"]["p50"])
            comparisons.append({"system": name, "concurrency": c, "p50_ratio": p50,
                                "p99_ratio": ratio(run["latency_ms"]["p99"], base_run["latency_ms"]["p99"]),
                                "throughput_ratio": ratio(run["throughput_rps"], base_run["throughput_rps"]),
                                "p50_within_10pct": p50 is not None and p50 <= LATENCY_TARGET})
    points = rss_points(touches, budget, len(plan))
    per_kb = None
    if points["after_1_kb"] is not None and points["after_all_touched"] is not None and len(plan) > 1:
        per_kb = round((points["after_all_touched"] - points["after_1_kb"]) / (len(plan) - 1), 2)
    return {"budget": budget, "reference": {"name": ref["name"], "source": ref["source"], "n_faqs": ref["n_faqs"],
                                            "n_phrasings": ref["n_phrasings"], "n_queries": len(ref["queries"])},
            "never_loaded": cold_summary(touches), "first_load": first_load(touches, rss_start),
            "resident_after_touch": touches[-1]["resident"] if touches else None,
            "rss_mb": {"multi_start": round(rss_start or 0, 1), **points, "multi_after_load": round(rss_multi_end or 0, 1),
                       "per_resident_kb": per_kb, "single_ready": round(rss_single or 0, 1),
                       "single_after_load": round(rss_single_end or 0, 1)},
            "kb_loads": final["loads"], "runs": pooled, "comparisons": comparisons, "touches": touches}


def scenario_swap(args: argparse.Namespace, plan: list[dict]) -> dict:
    kbs = [e for e in plan if e["name"] != args.reference][:args.swap_kbs]
    target = kbs[0]
    server, base = start_server(args, "swap", args.data_dir / "multi",
                                {"FAQ_KB_POLL_SECONDS": "1", "FAQ_ADMIN_TOKEN": ADMIN_TOKEN})
    env = server_env(args, {"FAQ_DATA_DIR": str(args.data_dir / "multi"), "FAQ_ENCODER": "minilm",
                            "FAQ_KB": target["name"]})
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    path = f"/kbs/{target['name']}"
    # a new FAQ taken from another KB's source, so its phrasings are realistic and match nothing here
    donor = next(e for e in plan if e["source"] != target["source"] and e["queries"])
    donor_id, donor_faq = next(iter(donor["faqs"].items()))
    new_id = f"swap-{donor_id}"
    events: list[dict] = []
    versions: list[tuple[float, str | None]] = []
    stop = threading.Event()
    t0 = time.monotonic()

    def version_poll() -> None:
        with httpx.Client(base_url=base, timeout=5) as c:
            while not stop.wait(0.2):
                try:
                    v = c.get(f"{path}/admin/index", headers=headers).json().get("version")
                except (httpx.HTTPError, ValueError):
                    v = None
                if not versions or versions[-1][1] != v:
                    versions.append((round(time.monotonic() - t0, 2), v))

    def served() -> str | None:
        # the admin view: there is no /kbs/{kb}/readyz (404), /readyz is the default KB's
        return httpx.get(f"{base}{path}/admin/index", headers=headers, timeout=10).json().get("version")

    def wait_for(check, timeout_s: float = 120) -> float | None:
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if check():
                return round(time.monotonic() - start, 2)
            time.sleep(0.1)
        return None

    def top1(query: str) -> str | None:
        body = httpx.post(f"{base}{path}/match", json={"query": query}, timeout=10).json()
        return body["matches"][0]["faq_id"] if body.get("matches") else None

    clients = Clients()
    rng = random.Random(3)
    for e in kbs:
        qs = [q for q, _ in e["queries"]] or ["hello"]
        clients.add(e["name"], base, lambda qs=qs: {"query": rng.choice(qs)}, path=f"/kbs/{e['name']}/match")
    poller = threading.Thread(target=version_poll, daemon=True)
    try:
        clients.start()
        time.sleep(3)
        old = served()
        poller.start()

        kb_file = args.data_dir / "swap-new-faq.jsonl"
        kb_file.write_text("".join(json.dumps({"faq_id": new_id, "question": q, "answer": donor_faq["answer"],
                                               "tags": ["swap"]}) + "\n" for q in donor_faq["phrasings"][:3]))
        t = time.monotonic()
        faq(env, "kb", "import", str(kb_file))
        applied = wait_for(lambda: top1(donor_faq["phrasings"][0]) == new_id)
        events.append({"step": "faq kb import (1 new FAQ, 3 phrasings)", "cli_s": round(time.monotonic() - t, 2),
                       "applied_after_s": applied})

        t = time.monotonic()
        out = faq(env, "index", "build", "--encoder", "minilm", "--n-trees", str(args.n_trees), "--no-progress")
        built_s = round(time.monotonic() - t, 2)
        new = re.search(r"built (\S+):", out).group(1)
        picked = wait_for(lambda: served() == new)
        events.append({"step": "faq index build (poller)", "version": new, "cli_s": built_s,
                       "served_after_s": picked})

        t = time.monotonic()
        faq(env, "index", "activate", old)
        r = httpx.post(f"{base}{path}/admin/index/reload", headers=headers, timeout=60)
        back = wait_for(lambda: served() == old)
        events.append({"step": "faq index activate <old> + POST reload", "version": old,
                       "reload_status": r.status_code, "reload_body": r.json() if r.status_code == 200 else r.text[:300],
                       "served_after_s": back, "cli_s": round(time.monotonic() - t, 2),
                       "new_faq_still_matched": top1(donor_faq["phrasings"][0]) == new_id})
        time.sleep(3)
    finally:
        clients.finish()
        stop.set()
        if poller.is_alive():
            poller.join()
        server.stop()
    per_kb = {}
    for e in kbs:
        s = clients.summary(e["name"])
        per_kb[e["name"]] = {**s, "failed": sum(n for st, n in s["status"].items() if st != "200"),
                             "swapped": e is target}
    return {"kb": target["name"], "kbs": [e["name"] for e in kbs], "steps": events,
            "served_versions": versions, "per_kb": per_kb,
            "failed": sum(v["failed"] for v in per_kb.values()),
            "requests": sum(v["requests"] for v in per_kb.values())}


