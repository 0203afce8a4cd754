"""bench/tenants.py's KBs: the plan (which KBs are cut from which data sets, at which sizes), their builds,
and the pure helpers the scenarios and the report share (tested by tests/test_bench_tenants.py)."""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from collections import Counter
from pathlib import Path

from bench.load import percentiles



REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO / "bench" / "results"
REAL_SETS = (("demo", "app/demo/faq.jsonl", "app/demo/queries.jsonl"),
             *((name, f"evaluation/data/{name}/faq.jsonl", f"evaluation/data/{name}/test.jsonl")
               for name in ("campus_it", "council", "energy", "grocery")))
INTENT_SETS = ("clinc150", "banking77")
ADMIN_TOKEN = "tenants-bench-admin-token-of-32-chars"
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


def ratio(num: float | None, den: float | None) -> float | None:
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


def fmt(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value}"


# ---------------------------------------------------------------- data

def _pool_from_files(kb_path: Path, queries_path: Path) -> dict:
    from kb.records import kb_groups
    from kb.files import read_kb, read_queries

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

    from app.match.assembly import load_configured_encoder
    from app.settings import Settings
    from index.artifacts import BuildRegistry
    from app.release import build_current
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
        if not store.catalog.exists(name):
            store.catalog.create(name)
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
        manifest = build_current(kb_store, encoder, registry, n_trees=args.n_trees, search_k=multi.ann_search_k,
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


