"""Many KBs in one `faq serve` process, measured over HTTP the way a deployment runs it.

    python bench/tenants.py [--kbs 100] [--data-dir runs/tenants] [--reuse] [--only cold,perf,swap]

Data: 100 KBs of 100-500 phrasings (`--min-size`, `--max-size`). The four realistic sets in
evaluation/data/*/faq.jsonl and app/demo/faq.jsonl are one KB each (kb-000 is the demo, cut to
--max-size phrasings); the others are seeded slices of CLINC150 and BANKING77 intents (converted from
../shared/data by `faq data prepare` into <data-dir>/sources), sizes spread evenly over the range.
Each KB's queries are its set's test queries (held-out user wording of the chosen intents). The plan
is written to <data-dir>/plan.json; the datasets themselves are read at run time, never committed.

Build (in this process, one MiniLM for all): every KB goes into one data dir (<data-dir>/multi: one
SQLite database, kbs/<name>/indexes), the reference KB (--reference, default kb-000) also alone as the
default KB of <data-dir>/single. Both with the same --n-trees. Re-running with --reuse skips what is
built already (an interrupted build resumes); without it an existing data dir is refused.

Scenarios, each on its own `faq serve` (MiniLM, query cache off, FAQ_* from the shell dropped):
- cold: FAQ_MAX_RESIDENT_KBS=--budget (20). One client sends the first request to each KB in turn
  (never loaded), then --lru-passes more times (each KB was unloaded by the LRU since), then 4 clients
  go round-robin over all KBs. Per request: latency; after each, /metrics (faq_kbs_resident,
  faq_kb_loads) and the server's RSS. A thread reads /metrics every 100 ms to catch the resident count
  between requests. RSS counts as bounded while every pass ends within 5% of the RSS at the budget.
- perf: FAQ_MAX_RESIDENT_KBS=KBs+1 (every KB stays loaded; the default KB takes one place). First
  the same never-loaded pass (RSS per resident KB), then beside it a single-KB `faq serve` of the
  reference KB: per round and --concurrency, four load runs on the same generator: the single
  deployment's /match, the same at its /kbs/default/match (what the route alone costs), the same
  queries at /kbs/<reference>/match of the many-KB process, and every KB's queries interleaved over
  /kbs/<kb>/match (other queries than the single deployment's: what spreading traffic over KBs
  costs, not a like-for-like comparison). Latencies are pooled over --rounds, and the order of the
  runs flips every round.
- swap: FAQ_KB_POLL_SECONDS=1. One client thread per --swap-kbs KB queries without pause while one
  KB gets `faq kb import` (a new FAQ), `faq index build` (a new version, `current` switched, picked
  up by the poller) and `faq index activate <old>` + POST /kbs/<kb>/admin/index/reload: every
  non-200 answer is a failure.

Writes bench/results/tenants.json, tenants.md and (with matplotlib) tenants.png; server logs stay in
<data-dir>/logs. The load generator runs on the same cores as the server.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import re
import shlex
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compare import Server, configured_model_cache, free_port, rss_mb, server_env  # noqa: E402
from bench.hostile import Clients, faq  # noqa: E402
from bench.load import add_server_timings, percentiles  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

DEFAULT_OUT_DIR = REPO / "bench" / "results"
REAL_SETS = (("demo", "app/demo/faq.jsonl", "app/demo/queries.jsonl"),
             *((name, f"evaluation/data/{name}/faq.jsonl", f"evaluation/data/{name}/test.jsonl")
               for name in ("campus_it", "council", "energy", "grocery")))
INTENT_SETS = ("clinc150", "banking77")
ADMIN_TOKEN = "tenants-bench-token"
COLD_TARGET_MS = 300.0
LATENCY_TARGET = 1.10  # resident KBs' p50 at most 10% over the single-KB deployment's
#: with an LRU budget, RSS is taken as bounded while it stays within 5% of its value when the budget
#: was first reached: every later load replaces an unloaded KB of about the same size
RSS_SLACK = 1.05
SINGLE, MULTI_REF, MULTI_MIX = "single KB", "many KBs: reference KB", "many KBs: every KB in turn"
#: the single-KB server through the /kbs/{kb} route: what the route costs apart from holding many KBs
SINGLE_ROUTE = "single KB at /kbs/default/match"


# ---------------------------------------------------------------- pure helpers (tested)

def take_round_robin(phrasings: dict[str, list[str]], size: int) -> dict[str, list[str]]:
    """Up to `size` phrasings, one FAQ after the other in turn, so a cut keeps every FAQ (as long as
    `size` >= the number of FAQs) and evens out their counts; each FAQ's own order is kept."""
    taken: dict[str, list[str]] = {faq_id: [] for faq_id in phrasings}
    n, depth = 0, 0
    while n < size:
        added = False
        for faq_id, texts in phrasings.items():
            if depth < len(texts) and n < size:
                taken[faq_id].append(texts[depth])
                n += 1
                added = True
        if not added:
            break
        depth += 1
    return {faq_id: texts for faq_id, texts in taken.items() if texts}


def spread_sizes(n: int, lo: int, hi: int, rng: random.Random) -> list[int]:
    """n sizes evenly over [lo, hi], in seeded random order (a KB's size must not follow its source)."""
    sizes = [lo] if n == 1 else [round(lo + (hi - lo) * i / (n - 1)) for i in range(n)]
    rng.shuffle(sizes)
    return sizes


def plan_kbs(real: list[tuple[str, dict]], intents: list[tuple[str, dict]], n_kbs: int, seed: int = 0,
             min_size: int = 100, max_size: int = 500, max_queries: int = 200) -> list[dict]:
    """The KBs to build: the realistic sets first, one KB each (cut to `max_size` phrasings), then
    slices of the intent sets in turn. A pool is {"faqs": {faq_id: {"answer", "tags", "phrasings"}},
    "queries": [(query, faq_id)]}. An intent KB takes `size` phrasings over enough intents that each
    has the phrasings to give (at least 8 intents, at most 30 when the size allows), its queries are
    the pool's queries of those intents (at most `max_queries`, seeded sample)."""
    rng = random.Random(seed)
    plan: list[dict] = []

    def add(source: str, pool: dict, chosen: dict[str, list[str]], queries: list) -> None:
        faqs = {faq_id: {"answer": pool["faqs"][faq_id]["answer"], "tags": pool["faqs"][faq_id]["tags"],
                         "phrasings": texts} for faq_id, texts in chosen.items()}
        plan.append({"name": f"kb-{len(plan):03d}", "source": source, "n_faqs": len(faqs),
                     "n_phrasings": sum(len(t) for t in chosen.values()),
                     "faqs": faqs, "queries": [list(q) for q in queries]})

    for source, pool in real[:n_kbs]:
        chosen = take_round_robin({k: v["phrasings"] for k, v in pool["faqs"].items()}, max_size)
        queries = [q for q in pool["queries"] if q[1] is None or q[1] in chosen][:max_queries]
        add(source, pool, chosen, queries)
    rest = n_kbs - len(plan)
    if rest > 0 and not intents:
        raise ValueError(f"{n_kbs} KBs asked, but only {len(plan)} realistic sets and no intent set")
    for i, size in enumerate(spread_sizes(rest, min_size, max_size, rng) if rest > 0 else []):
        source, pool = intents[i % len(intents)]
        ids = sorted(pool["faqs"])
        min_avail = min(len(pool["faqs"][k]["phrasings"]) for k in ids)
        lo = min(len(ids), max(8, math.ceil(size / max(1, min_avail))))
        hi = max(lo, min(30, len(ids), size // 8))
        chosen_ids = rng.sample(ids, rng.randint(lo, hi))
        shuffled = {k: rng.sample(pool["faqs"][k]["phrasings"], len(pool["faqs"][k]["phrasings"]))
                    for k in chosen_ids}
        chosen = take_round_robin(shuffled, size)
        queries = [q for q in pool["queries"] if q[1] in chosen]
        queries = rng.sample(queries, min(max_queries, len(queries)))
        add(source, pool, chosen, queries)
    return plan


def metric_value(exposition: str, name: str) -> float | None:
    """One unlabelled sample of a Prometheus text exposition (None when absent)."""
    for line in exposition.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den == 0 else round(num / den, 3)


def pool_runs(runs: list[dict]) -> dict:
    """Several load runs of one system and concurrency as one: latencies and server timings pooled,
    throughput the median of the runs."""
    latencies = [x for r in runs for x in r["latencies"]]
    server: dict[str, list[float]] = {}
    for r in runs:
        for key, values in r["server"].items():
            server.setdefault(key, []).extend(values)
    labelled = sum(r["labelled"] for r in runs)
    errors: Counter[str] = Counter()
    for r in runs:
        errors.update(r["errors_by_kind"])
    return {"runs": len(runs), "ok": len(latencies), "errors": sum(errors.values()), "errors_by_kind": dict(errors),
            "latency_ms": percentiles(latencies),
            "throughput_rps": round(statistics.median(r["throughput_rps"] for r in runs), 1) if runs else None,
            "server_timings_ms_median": {k: round(statistics.median(v), 3) if v else None for k, v in server.items()},
            "top1_accuracy": round(sum(r["correct"] for r in runs) / labelled, 4) if labelled else None,
            "per_round_p50": [r["latency_ms"]["p50"] for r in runs]}


def first_at(rows: list[dict], key: str, value: float) -> dict | None:
    """The first touch row whose `key` reached `value`."""
    return next((r for r in rows if r.get(key) is not None and r[key] >= value), None)


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value}"


# ---------------------------------------------------------------- data

def _pool_from_files(kb_path: Path, queries_path: Path) -> dict:
    from kb.records import kb_groups, read_kb, read_queries

    records = read_kb(kb_path)
    groups = kb_groups(records)
    meta: dict[str, dict] = {}
    for rec in records:
        m = meta.setdefault(rec.faq_id, {"answer": None, "tags": None})
        if m["answer"] is None and rec.answer:
            m["answer"] = rec.answer
        if m["tags"] is None and rec.tags is not None:
            m["tags"] = list(rec.tags)
    faqs = {faq_id: {"answer": meta[faq_id]["answer"], "tags": meta[faq_id]["tags"] or [], "phrasings": texts}
            for faq_id, texts in groups.items() if meta[faq_id]["answer"]}
    queries = [(q.query, q.faq_id) for q in read_queries(queries_path)]
    return {"faqs": faqs, "queries": [q for q in queries if q[1] is None or q[1] in faqs]}


def load_pools(shared: Path, sources_dir: Path) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    from evaluation.datasets import prepare

    real = [(name, _pool_from_files(REPO / kb, REPO / queries)) for name, kb, queries in REAL_SETS]
    intents = []
    for name in INTENT_SETS:
        out = sources_dir / name
        if not (out / "dataset.json").exists():
            print(f"preparing {name} from {shared / name} into {out}", flush=True)
            prepare(name, shared / name, out)
        pool = _pool_from_files(out / "kb.jsonl", out / "test.jsonl")
        pool["queries"] = [q for q in pool["queries"] if q[1] is not None]  # in-scope only: out-of-scope has no KB
        intents.append((name, pool))
    return real, intents


def kb_records(entry: dict) -> list:
    from kb.records import KbRecord

    return [KbRecord(faq_id, text, faq["answer"] if i == 0 else None, faq["tags"] if i == 0 else None)
            for faq_id, faq in entry["faqs"].items() for i, text in enumerate(faq["phrasings"])]


def plan_params(args: argparse.Namespace) -> dict:
    return {"kbs": args.kbs, "seed": args.seed, "min_size": args.min_size, "max_size": args.max_size,
            "n_trees": args.n_trees, "reference": args.reference}


def get_plan(args: argparse.Namespace) -> list[dict]:
    path = args.data_dir / "plan.json"
    if path.exists():
        saved = json.loads(path.read_text())
        if saved["params"] != plan_params(args):
            raise SystemExit(f"{args.data_dir} holds KBs made with {saved['params']}, not {plan_params(args)}: "
                             "use another --data-dir")
        return saved["kbs"]
    real, intents = load_pools(args.shared, args.data_dir / "sources")
    plan = plan_kbs(real, intents, args.kbs, seed=args.seed, min_size=args.min_size, max_size=args.max_size)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"params": plan_params(args), "kbs": plan}) + "\n")
    os.replace(tmp, path)
    return plan


def build_all(args: argparse.Namespace, plan: list[dict]) -> dict:
    """Import and build every KB not built yet (one encoder for all); the single-KB data dir too."""
    import torch

    from app.assembly import load_configured_encoder
    from app.settings import Settings
    from index.artifacts import BuildRegistry
    from index.build import build_index
    from migrations.runner import migrated_store

    torch.set_num_threads(2)
    multi = Settings(data_dir=args.data_dir / "multi", encoder="minilm", model_cache=args.model_cache)
    single = Settings(data_dir=args.data_dir / "single", encoder="minilm", model_cache=args.model_cache)
    ref = next(e for e in plan if e["name"] == args.reference)
    jobs = [(multi, e["name"], e) for e in plan] + [(single, "default", ref)]
    encoder = None
    built, skipped, t_start = 0, 0, time.perf_counter()
    stores = {}
    for k, (settings, name, entry) in enumerate(jobs, 1):
        store = stores.get(settings.data_dir)
        if store is None:
            store = stores[settings.data_dir] = migrated_store(settings)
        if not store.kbs.exists(name):
            store.kbs.create(name)
        registry = BuildRegistry(settings.for_kb(name).index_dir)
        kb_store = store.for_kb(name)
        # sync: puts back what an earlier run's swap scenario added; a no-op import keeps the revision
        kb_store.import_records(kb_records(entry), sync=True)
        current = registry.current()
        if current and registry.read_manifest(current).get("kb_revision") == kb_store.revision():
            skipped += 1
            continue
        if encoder is None:
            encoder = load_configured_encoder(multi, spec="minilm")
        t0 = time.perf_counter()
        manifest = build_index(kb_store, encoder, registry, n_trees=args.n_trees, search_k=multi.ann_search_k,
                               encoder_spec="minilm")
        built += 1
        done_s = time.perf_counter() - t_start
        eta = done_s / built * (len(jobs) - k)
        where = "single" if settings is single else "multi"
        print(f"[{k}/{len(jobs)}] {where} {name} ({entry['source']}, {manifest['n_faqs']} FAQs, "
              f"{manifest['n_variants']} phrasings): {time.perf_counter() - t0:.1f} s; about {eta / 60:.1f} min left",
              flush=True)
    for store in stores.values():
        store.close()
    return {"built": built, "reused": skipped, "wall_s": round(time.perf_counter() - t_start, 1)}


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
            p50 = _ratio(run["latency_ms"]["p50"], base_run["latency_ms"]["p50"])
            comparisons.append({"system": name, "concurrency": c, "p50_ratio": p50,
                                "p99_ratio": _ratio(run["latency_ms"]["p99"], base_run["latency_ms"]["p99"]),
                                "throughput_ratio": _ratio(run["throughput_rps"], base_run["throughput_rps"]),
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


# ---------------------------------------------------------------- report

def render_markdown(report: dict) -> str:
    m, p = report["machine"], report["plan"]
    lines = [f"# Many KBs in one `faq serve` process ({report['created_at']})", "",
             f"Command: `{report['command']}`", "",
             f"Machine: {m['cpu_model']}, {m['cpus']} CPUs; load average before {m['load_avg_before']}, "
             f"after {m['load_avg_after']}. Encoder MiniLM (runtime from the build manifest), Annoy "
             f"n_trees {p['n_trees']}, query cache off.",
             f"KBs: {p['kbs']} ({', '.join(f'{k}: {v}' for k, v in p['sources'].items())}), "
             f"{p['phrasings_total']:,} phrasings, {p['size_min']}–{p['size_max']} per KB (median "
             f"{p['size_median']}); build: {report['build']}.", ""]
    targets = report.get("targets") or []
    if targets:
        lines += ["| target | measured | met |", "|---|---|---|"]
        lines += [f"| {t['target']} | {t['measured']} | {t['met']} |" for t in targets]
        lines.append("")
    perf = report.get("perf")
    if perf:
        ref = perf["reference"]
        lines += [f"Latency: the single-KB deployment of {ref['name']} ({ref['source']}, {ref['n_faqs']} FAQs, "
                  f"{ref['n_phrasings']} phrasings, {ref['n_queries']} queries) against the {p['kbs']}-KB process "
                  f"with every KB resident (FAQ_MAX_RESIDENT_KBS={perf['budget']}), {report['settings']['rounds']} "
                  f"interleaved rounds of {report['settings']['requests']} requests, latencies pooled:", "",
                  "| system | clients | p50 ms | p90 ms | p99 ms | req/s | errors | top-1 | server total p50 | "
                  "encode p50 | per-round p50 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for run in perf["runs"].values():
            lat, srv = run["latency_ms"], run["server_timings_ms_median"]
            lines.append(f"| {run['system']} | {run['concurrency']} | {_fmt(lat['p50'], 2)} | {_fmt(lat['p90'], 2)} | "
                         f"{_fmt(lat['p99'], 2)} | {_fmt(run['throughput_rps'])} | {run['errors']} | "
                         f"{_fmt(run['top1_accuracy'], 3)} | {_fmt(srv.get('total'), 2)} | {_fmt(srv.get('encode'), 2)} | "
                         f"{', '.join(_fmt(x, 2) for x in run['per_round_p50'])} |")
        lines += ["", "| against the single KB | clients | p50 ratio | p99 ratio | throughput ratio |",
                  "|---|---|---|---|---|"]
        lines += [f"| {c['system']} | {c['concurrency']} | {_fmt(c['p50_ratio'], 3)} | {_fmt(c['p99_ratio'], 3)} | "
                  f"{_fmt(c['throughput_ratio'], 3)} |" for c in perf["comparisons"]]
        lines.append("")
    colds = [c for c in (report.get("cold"), ) if c]
    if colds or perf:
        lines += ["First request to a KB that is not resident (one client unless said; ms):", "",
                  "| server | pass | requests | failed | p50 | p90 | max | over 300 ms | server load p50 / max | "
                  "its /match total p50 |", "|---|---|---|---|---|---|---|---|---|---|"]
        rows = [(c["budget"], label, s) for c in colds for label, s in c["passes"].items()]
        if perf:
            rows.append((perf["budget"], "never loaded", perf["never_loaded"]))
        for budget, label, s in rows:
            lines.append(f"| budget {budget} | {label} | {s['n']} | {s['failed']} | {_fmt(s['p50_ms'])} | "
                         f"{_fmt(s['p90_ms'])} | {_fmt(s['max_ms'])} | {s['over_target']} | "
                         f"{_fmt(s['server_load_ms_p50'], 0)} / {_fmt(s['server_load_ms_max'], 0)} | "
                         f"{_fmt(s['match_total_ms_p50'])} |")
        lines += ["", "Server load = the server's own `loaded KB <name> in N ms` log line (open the KB's index and "
                  "pipeline); its /match total = the first request's `timings_ms.total`. The client's time also holds "
                  "the HTTP round trip and the hand-off of the load to a worker thread."]
        lines.append("")
    if colds or perf:
        lines += ["Server RSS (MB; resident counts the default KB):", "",
                  "| server | at start | after 1 KB | at 20 resident | all touched once | after each later pass | "
                  "end | peak | max resident seen |", "|---|---|---|---|---|---|---|---|---|"]
        for c in colds:
            r = c["rss_mb"]
            later = ", ".join(_fmt(v, 0) for v in r["after_each_pass"][1:]) or "–"
            lines.append(f"| budget {c['budget']} | {_fmt(r['start'], 0)} | {_fmt(r['after_1_kb'], 0)} | "
                         f"{_fmt(r['at_20_resident'], 0)} | {_fmt(r['after_all_touched'], 0)} | {later} | "
                         f"{_fmt(r['end'], 0)} | {_fmt(r['peak'], 0)} | {_fmt(c['max_resident_seen'], 0)} |")
        if perf:
            r = perf["rss_mb"]
            lines.append(f"| budget {perf['budget']} | {_fmt(r['multi_start'], 0)} | {_fmt(r['after_1_kb'], 0)} | "
                         f"{_fmt(r['at_20_resident'], 0)} | {_fmt(r['after_all_touched'], 0)} | – | "
                         f"{_fmt(r['multi_after_load'], 0)} | – | {_fmt(perf['resident_after_touch'], 0)} |")
            lines.append(f"| single KB | {_fmt(r['single_ready'], 0)} (ready) | | | | | "
                         f"{_fmt(r['single_after_load'], 0)} | | 1 |")
            lines += ["", f"Memory per resident KB (all touched once − after 1 KB, over the other KBs): "
                          f"{_fmt(r['per_resident_kb'], 2)} MB."]
        for part in [*colds, *([perf] if perf else [])]:
            f = part.get("first_load")
            if f:
                lines.append(f"First KB loaded (budget {part['budget']}): {f['kb']}, {_fmt(f['client_ms'])} ms at the "
                             f"client, {_fmt(f['server_load_ms'], 0)} ms server load, RSS +{_fmt(f['rss_added_mb'], 0)} MB.")
        lines.append("")
    swap = report.get("swap")
    if swap:
        lines += [f"Hot swap of {swap['kb']} while one client per KB queries {', '.join(swap['kbs'])} without pause "
                  f"(FAQ_KB_POLL_SECONDS=1): {swap['requests']:,} requests, {swap['failed']} failed.", "",
                  "| step | CLI s | served after s | notes |", "|---|---|---|---|"]
        for e in swap["steps"]:
            after = e.get("applied_after_s", e.get("served_after_s"))
            notes = []
            if "version" in e:
                notes.append(f"version {e['version']}")
            if "reload_status" in e:
                body = e.get("reload_body")
                swapped = body.get("swapped") if isinstance(body, dict) else None
                notes.append(f"reload answered {e['reload_status']}" + (
                    "" if swapped is None else ", swapped" if swapped else ", nothing to swap: the poller was first"))
            if "new_faq_still_matched" in e:
                notes.append(f"new FAQ still matched: {e['new_faq_still_matched']}")
            lines.append(f"| {e['step']} | {_fmt(e['cli_s'], 1)} | {_fmt(after, 2)} | {'; '.join(notes)} |")
        lines += ["", "| KB | requests | statuses | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|---|"]
        for kb, s in swap["per_kb"].items():
            lat = s["latency_ms_200"]
            lines.append(f"| {kb}{' (swapped)' if s['swapped'] else ''} | {s['requests']} | {s['status']} | "
                         f"{_fmt(lat['p50'])} | {_fmt(lat['p99'])} | {_fmt(lat['max'])} |")
        lines.append("")
    lines += ["Timings on a shared 2-core machine are noisy, and the load generator shares the cores with the "
              "server: compare within one run.", ""]
    return "\n".join(lines)


def targets_table(report: dict) -> list[dict]:
    out = []
    perf, cold, swap = report.get("perf"), report.get("cold"), report.get("swap")
    if perf:
        for c in perf["comparisons"]:
            if c["system"] in (MULTI_REF, MULTI_MIX):
                run = perf["runs"][f"{c['system']} c{c['concurrency']}"]["latency_ms"]
                base = perf["runs"][f"{SINGLE} c{c['concurrency']}"]["latency_ms"]
                what = "the reference KB" if c["system"] == MULTI_REF else "every KB in turn"
                out.append({"target": f"resident KBs' /match within 10% of one KB: {what}, "
                                      f"{c['concurrency']} client(s)",
                            "measured": f"p50 {run['p50']:.2f} vs {base['p50']:.2f} ms ({c['p50_ratio']:.3f}x), "
                                        f"p99 {run['p99']:.2f} vs {base['p99']:.2f} ms ({c['p99_ratio']:.3f}x)",
                            "met": "yes" if c["p50_within_10pct"] else "no"})
    colds = [(f"budget {cold['budget']}, {label}", s) for label, s in cold["passes"].items()] if cold else []
    if perf:
        colds.append((f"budget {perf['budget']}, never loaded", perf["never_loaded"]))
    for label, s in colds:
        out.append({"target": f"first query to a cold KB <= 300 ms ({label})",
                    "measured": f"p50 {_fmt(s['p50_ms'])}, p90 {_fmt(s['p90_ms'])}, max {_fmt(s['max_ms'])} ms over "
                                f"{s['n']} KBs; {s['over_target']} over 300 ms, {s['failed']} failed",
                    "met": "yes" if s["over_target"] == 0 and s["failed"] == 0 else "no"})
    if cold:
        r = cold["rss_mb"]
        out.append({"target": f"faq_kbs_resident never above FAQ_MAX_RESIDENT_KBS={cold['budget']}",
                    "measured": f"max seen {_fmt(cold['max_resident_seen'], 0)} over {_fmt(cold['kb_loads'], 0)} KB loads",
                    "met": "yes" if cold["budget_kept"] else "no"})
        all_resident = f"; all {perf['budget'] - 1} KBs resident: {_fmt(perf['rss_mb']['multi_after_load'], 0)} MB" \
            if perf else ""
        out.append({"target": f"RSS bounded by FAQ_MAX_RESIDENT_KBS={cold['budget']} (every pass ends <= 1.05 x RSS "
                              "at the budget)",
                    "measured": f"at the budget {_fmt(r['at_budget'], 0)} MB; after each pass over all {cold['kbs']} "
                                f"KBs {', '.join(_fmt(v, 0) for v in r['after_each_pass'])}, end {_fmt(r['end'], 0)}, "
                                f"peak {_fmt(r['peak'], 0)} MB{all_resident}",
                    "met": "yes" if cold["rss_bounded"] else "no"})
    if swap:
        out.append({"target": "hot swap of one KB under load: 0 failed requests",
                    "measured": f"{swap['failed']} failed of {swap['requests']:,} on {len(swap['kbs'])} KBs",
                    "met": "yes" if swap["failed"] == 0 else "no"})
    return out


def plot(report: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    parts = [report[key] for key in ("cold", "perf") if report.get(key)]
    if not parts:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for part in parts:
        rows = [r for r in part["touches"] if r.get("rss_mb") is not None]
        ax1.plot(range(1, len(rows) + 1), [r["rss_mb"] for r in rows], label=f"FAQ_MAX_RESIDENT_KBS={part['budget']}")
    ax1.set_xlabel(f"requests to a KB, one client, KB after KB ({report['plan']['kbs']} per pass)")
    ax1.set_ylabel("server RSS (MB)")
    ax1.set_title("RSS of the one faq serve process")
    ax1.legend()
    for part in parts:
        by_pass: dict[str, list[float]] = {}
        for r in part["touches"]:
            if r["status"] == 200:
                by_pass.setdefault(r["pass"], []).append(r["ms"])
        for label, values in by_pass.items():
            values = sorted(values)
            ax2.plot(values, [(i + 1) / len(values) for i in range(len(values))],
                     label=f"budget {part['budget']}: {label}")
    ax2.axvline(COLD_TARGET_MS, color="grey", linestyle=":", label="300 ms")
    ax2.set_xscale("log")
    ticks = [t for t in (5, 10, 20, 50, 100, 200, 300, 500, 1000, 2000)
             if t <= max(COLD_TARGET_MS, *(r["ms"] for part in parts for r in part["touches"]))]
    ax2.set_xticks(ticks, [str(t) for t in ticks])
    ax2.minorticks_off()
    ax2.set_xlabel("first request to a KB that is not resident (ms)")
    ax2.set_ylabel("share of KBs")
    ax2.set_title("Cold KB latency")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kbs", type=int, default=100, help="KBs in the process (default 100)")
    p.add_argument("--min-size", type=int, default=100, help="phrasings of the smallest KB (default 100)")
    p.add_argument("--max-size", type=int, default=500, help="phrasings of the largest KB (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-trees", type=int, default=10, help="Annoy trees of every build, both deployments (default 10)")
    p.add_argument("--reference", default="kb-000", help="the KB also deployed alone (default kb-000, the demo)")
    p.add_argument("--data-dir", type=Path, default=REPO / "runs" / "tenants",
                   help="plan, prepared sources, both data dirs and server logs (default runs/tenants)")
    p.add_argument("--reuse", action="store_true", help="use an existing --data-dir: build only what is missing")
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data", help="CLINC150 and BANKING77 "
                   "folders (default ../shared/data)")
    p.add_argument("--only", default="cold,perf,swap", help="scenarios, comma-separated: cold, perf, swap")
    p.add_argument("--budget", type=int, default=20, help="FAQ_MAX_RESIDENT_KBS of the cold scenario (default 20)")
    p.add_argument("--lru-passes", type=int, default=3, help="passes over all KBs after the first, cold "
                   "scenario: each request then finds its KB unloaded by the LRU (default 3)")
    p.add_argument("--concurrency", default="1,8", help="clients per load run, comma-separated (default 1,8)")
    p.add_argument("--requests", type=int, default=1000, help="requests per load run (default 1000)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the load runs (default 5)")
    p.add_argument("--max-seconds", type=float, default=60.0, help="time cap of each load run (default 60)")
    p.add_argument("--swap-kbs", type=int, default=6, help="KBs queried during the swap (default 6)")
    p.add_argument("--ready-timeout", type=float, default=300.0)
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR)
    p.add_argument("--name", default="tenants", help="report file stem (default tenants)")
    args = p.parse_args(argv)
    args.only = {s.strip() for s in args.only.split(",") if s.strip()}
    if not args.only <= {"cold", "perf", "swap"}:
        p.error("--only takes cold, perf, swap")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.kbs < 2 or not 1 <= args.min_size <= args.max_size:
        p.error("--kbs >= 2 and 1 <= --min-size <= --max-size")
    if not re.fullmatch(r"kb-\d{3}", args.reference) or int(args.reference[3:]) >= args.kbs:
        p.error(f"--reference must be one of kb-000..kb-{args.kbs - 1:03d}")
    args.data_dir = args.data_dir.resolve()
    args.faq_env = {}  # what bench/compare.py's server_env adds on top of its clean environment
    return args


def main(argv: list[str] | None = None) -> int:
    # the model cache is read from the shell's FAQ_MODEL_CACHE before FAQ_* go: a FAQ_DATABASE_URL from
    # the shell must not send this process's builds into a real store
    model_cache = configured_model_cache().resolve()
    for key in [k for k in os.environ if k.startswith("FAQ_")]:
        del os.environ[key]
    args = parse_args(argv)
    args.model_cache = model_cache
    if args.data_dir.exists() and any(args.data_dir.iterdir()) and not args.reuse:
        print(f"error: {args.data_dir} exists: pass --reuse to build only what is missing there, or remove it",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the servers' finally blocks must run
    load_before = os.getloadavg()
    t_all = time.perf_counter()
    plan = get_plan(args)
    sizes = [e["n_phrasings"] for e in plan]
    print(f"{len(plan)} KBs, {sum(sizes):,} phrasings ({min(sizes)}-{max(sizes)} per KB)", flush=True)
    build = build_all(args, plan)
    print(f"build: {build}", flush=True)

    report: dict = {"created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "command": shlex.join(["python", "bench/tenants.py", *(sys.argv[1:] if argv is None else argv)]),
                    "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), **cpu_info(),
                                "python": platform.python_version(),
                                "load_avg_before": [round(x, 2) for x in load_before]},
                    "plan": {"kbs": len(plan), "n_trees": args.n_trees, "phrasings_total": sum(sizes),
                             "size_min": min(sizes), "size_max": max(sizes), "size_median": int(statistics.median(sizes)),
                             "sources": dict(Counter(e["source"] for e in plan)),
                             "per_kb": [{k: e[k] for k in ("name", "source", "n_faqs", "n_phrasings")}
                                        | {"n_queries": len(e["queries"])} for e in plan]},
                    "build": build,
                    "settings": {"requests": args.requests, "rounds": args.rounds, "concurrency": args.concurrency,
                                 "budget": args.budget, "max_seconds": args.max_seconds}}
    failures = []
    for key, run in (("cold", lambda: scenario_cold(args, plan, args.budget, f"cold-budget{args.budget}")),
                     ("perf", lambda: scenario_perf(args, plan)),
                     ("swap", lambda: scenario_swap(args, plan))):
        if key not in args.only:
            continue
        print(f"scenario {key}", flush=True)
        try:
            report[key] = run()
        except (RuntimeError, OSError, httpx.HTTPError, KeyError, ValueError) as exc:
            print(f"scenario {key} failed: {exc}", file=sys.stderr, flush=True)
            report[key + "_failed"] = str(exc)[-3000:]
            failures.append(key)
    report["machine"]["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    report["wall_s"] = round(time.perf_counter() - t_all, 1)
    report["targets"] = targets_table(report)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / args.name
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    md = render_markdown(report)
    stem.with_suffix(".md").write_text(md, encoding="utf-8")
    charted = plot(report, stem.with_suffix(".png"))
    print(md)
    print(f"wrote {stem}.json, {stem}.md" + (f", {stem}.png" if charted else " (no matplotlib: no chart)")
          + f" in {report['wall_s'] / 60:.1f} min")
    missed = [t for t in report["targets"] if t["met"] != "yes"]
    return 1 if failures or missed else 0


if __name__ == "__main__":
    sys.exit(main())
