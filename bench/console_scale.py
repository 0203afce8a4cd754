"""What the console's review and traffic pages cost on a big query log: the demo KB with N synthetic
logged queries (its phrasings, some with a word dropped or a number added; 80% answered), timed as the
pages do their work: the review queues (`mine_report`: the window's log read and mined; the encoder's
grouping comes on top, remembered per text) and the traffic page (the window's rows read, summed,
charted). SQLite in a temporary folder, one process.

    python bench/console_scale.py [--rows 10000,100000]

Writes bench/results/console_scale.json and .md.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import uuid
from datetime import date, datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation.machine import cpu_info  # noqa: E402


def synthetic_log(records: list, n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        r = records[rng.randrange(len(records))]
        words = r.question.split()
        if len(words) > 3 and rng.random() < 0.6:
            del words[rng.randrange(len(words))]
        query = " ".join(words) + ("" if rng.random() < 0.7 else f" {rng.randrange(1000)}")
        answered = rng.random() < 0.8
        rows.append({"request_id": uuid.uuid4().hex, "query": query, "faq_id": r.faq_id if answered else None,
                     "score": rng.random(), "arm": ("ann", "lexical")[rng.randrange(2)],
                     "decision": "answer" if answered else "abstain", "latency_ms": rng.uniform(5, 80)})
    return rows


def measure(n: int) -> dict:
    from app.curation.mining import mine_report
    from app.settings import Settings
    from app.traffic import charts, summarize, window_bounds
    from kb.files import read_kb
    from migrations.runner import migrated_store

    with tempfile.TemporaryDirectory(prefix="console-scale-") as tmp:
        store = migrated_store(Settings(data_dir=Path(tmp)))
        records = read_kb(REPO / "app" / "demo" / "faq.jsonl")
        store.import_records(records)
        rows = synthetic_log(records, n)
        for start in range(0, n, 5000):
            store.log_queries(rows[start:start + 5000])
        t0 = time.perf_counter()
        report = mine_report(store)
        review_s = time.perf_counter() - t0
        now = datetime.now(timezone.utc)
        t0 = time.perf_counter()
        start, end, _ = window_bounds("7d", now)
        found = store.query_log.traffic_rows(start, end)
        traffic = summarize(found.rows, "7d", now, capped=found.capped)
        charts(traffic)
        traffic_s = time.perf_counter() - t0
        store.close()
    return {"rows": n, "review_queues_s": round(review_s, 3), "phrasings": len(report["phrasings"]),
            "clusters": len(report["clusters"]), "traffic_s": round(traffic_s, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="10000,100000")
    ap.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args(argv)
    results = []
    for n in (int(x) for x in args.rows.split(",")):
        results.append(measure(n))
        print(json.dumps(results[-1]))
    out = {"date": date.today().isoformat(), "machine": cpu_info(), "results": results}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "console_scale.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    lines = [f"# Console pages on a big query log ({out['date']})", "",
             f"`python bench/console_scale.py --rows {args.rows}`, demo KB, SQLite, CPU {out['machine'].get('cpu_model')}.",
             "", "| logged queries in the window | review queues s | proposals | clusters | traffic (7 days) s |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['rows']:,} | {r['review_queues_s']:.2f} | {r['phrasings']} | {r['clusters']} | {r['traffic_s']:.2f} |"
              for r in results]
    (args.out_dir / "console_scale.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
