"""The pure parts of bench/tenants.py: how KBs are cut from the data sets, metric parsing, pooling."""
from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import tenants_plan, tenants_scenarios  # noqa: E402


def pool(n_faqs: int, per_faq: int, n_queries: int = 3) -> dict:
    faqs = {f"f{i}": {"answer": f"answer {i}", "tags": ["t"], "phrasings": [f"q{i}-{j}" for j in range(per_faq)]}
            for i in range(n_faqs)}
    queries = [(f"user {i}-{k}", f"f{i}") for i in range(n_faqs) for k in range(n_queries)]
    return {"faqs": faqs, "queries": queries}


def test_take_round_robin_keeps_every_faq_and_evens_counts():
    taken = tenants_plan.take_round_robin({"a": ["a1", "a2", "a3"], "b": ["b1"], "c": ["c1", "c2"]}, 5)
    assert taken == {"a": ["a1", "a2"], "b": ["b1"], "c": ["c1", "c2"]}
    assert tenants_plan.take_round_robin({"a": ["a1"], "b": ["b1"]}, 10) == {"a": ["a1"], "b": ["b1"]}
    assert tenants_plan.take_round_robin({"a": ["a1"], "b": ["b1"]}, 1) == {"a": ["a1"]}


def test_spread_sizes_covers_the_range():
    sizes = tenants_plan.spread_sizes(5, 100, 500, random.Random(0))
    assert sorted(sizes) == [100, 200, 300, 400, 500]
    assert tenants_plan.spread_sizes(1, 100, 500, random.Random(0)) == [100]


def test_plan_kbs_real_sets_first_then_intent_slices_in_size():
    real = [("demo", pool(10, 60)), ("energy", pool(5, 2))]
    intents = [("clinc", pool(40, 100)), ("banking", pool(30, 35))]
    plan = tenants_plan.plan_kbs(real, intents, 12, seed=1, min_size=100, max_size=500, max_queries=50)
    assert [e["name"] for e in plan] == [f"kb-{i:03d}" for i in range(12)]
    assert [e["source"] for e in plan[:2]] == ["demo", "energy"]
    assert plan[0]["n_phrasings"] == 500 and plan[0]["n_faqs"] == 10  # cut, every FAQ kept
    assert plan[1]["n_phrasings"] == 10  # smaller than the range: kept whole
    assert Counter(e["source"] for e in plan[2:]) == {"clinc": 5, "banking": 5}
    assert sorted(e["n_phrasings"] for e in plan[2:]) == sorted(tenants_plan.spread_sizes(10, 100, 500, random.Random(0)))
    for e in plan[2:]:
        assert 8 <= e["n_faqs"] <= 30
        assert sum(len(f["phrasings"]) for f in e["faqs"].values()) == e["n_phrasings"]
        assert e["queries"] and len(e["queries"]) <= 50
        assert all(faq_id in e["faqs"] for _, faq_id in e["queries"])
    assert tenants_plan.plan_kbs(real, intents, 12, seed=1) == tenants_plan.plan_kbs(real, intents, 12, seed=1)


def test_plan_kbs_spreads_a_large_kb_over_enough_intents():
    plan = tenants_plan.plan_kbs([], [("banking", pool(30, 35))], 2, min_size=490, max_size=500)
    for e in plan:
        assert e["n_phrasings"] in (490, 500) and e["n_faqs"] >= 15  # 35 phrasings per intent at most


def test_metric_value_reads_unlabelled_samples():
    text = "# HELP faq_kbs_resident x\nfaq_kbs_resident 20.0\nfaq_kb_loads_total 7.0\nfaq_kb_loads_created 1.7e9\n"
    assert tenants_plan.metric_value(text, "faq_kbs_resident") == 20.0
    assert tenants_plan.metric_value(text, "faq_kb_loads_total") == 7.0
    assert tenants_plan.metric_value(text, "faq_missing") is None


def test_pool_runs_pools_latencies_and_top1():
    runs = [{"latencies": [1.0, 2.0], "server": {"total": [0.5]}, "labelled": 2, "correct": 1,
             "errors_by_kind": {}, "throughput_rps": 10.0, "latency_ms": {"p50": 1.5}},
            {"latencies": [3.0], "server": {"total": [1.5, 2.5]}, "labelled": 2, "correct": 2,
             "errors_by_kind": {"http_503": 1}, "throughput_rps": 20.0, "latency_ms": {"p50": 3.0}}]
    pooled = tenants_plan.pool_runs(runs)
    assert pooled["ok"] == 3 and pooled["errors"] == 1 and pooled["latency_ms"]["p50"] == 2.0
    assert pooled["server_timings_ms_median"]["total"] == 1.5 and pooled["top1_accuracy"] == 0.75
    assert pooled["throughput_rps"] == 15.0 and pooled["per_round_p50"] == [1.5, 3.0]


def test_rss_points_and_cold_summary():
    rows = [{"kb": f"kb-{i:03d}", "ms": 10.0 * (i + 1), "status": 200, "resident": min(i + 2, 4), "rss_mb": 100.0 + i}
            for i in range(5)]
    points = tenants_scenarios.rss_points(rows, budget=4, n_kbs=5)
    assert points["after_1_kb"] == 100.0 and points["at_budget"] == 102.0 and points["after_all_touched"] == 104.0
    assert points["at_20_resident"] is None
    rows.append({"kb": "kb-x", "ms": 400.0, "status": 500, "resident": 4, "rss_mb": 105.0})
    s = tenants_scenarios.cold_summary(rows)
    assert s["n"] == 6 and s["failed"] == 1 and s["max_ms"] == 50.0 and s["over_target"] == 0
