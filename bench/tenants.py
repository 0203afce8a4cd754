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
import json
import os
import platform
import re
import shlex
import signal
import statistics
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compare import configured_model_cache  # noqa: E402
from bench.tenants_plan import DEFAULT_OUT_DIR, build_all, get_plan  # noqa: E402
from bench.tenants_report import plot, render_markdown, targets_table  # noqa: E402
from bench.tenants_scenarios import scenario_cold, scenario_perf, scenario_swap  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402


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
