"""Store throughput: bulk import, idempotent re-import, --sync with 10% changed, snapshot, export.

    python bench/store_import.py                                   # SQLite in a temp folder
    python bench/store_import.py --url postgresql://postgres@127.0.0.1:5432/test_bench   # an EMPTY database

Synthetic KB (--faqs x --variants). Prints the timings and writes bench/results/store_import.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kb.records import KbRecord  # noqa: E402
from app.store import FaqStore  # noqa: E402
from migrations import runner  # noqa: E402


def timed(label: str, results: dict, fn):
    start = time.perf_counter()
    out = fn()
    results[label] = round(time.perf_counter() - start, 3)
    print(f"{label:<28} {results[label]:8.3f} s")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="database URL (default: a temporary SQLite file)")
    p.add_argument("--faqs", type=int, default=20_000)
    p.add_argument("--variants", type=int, default=5)
    args = p.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = args.url or f"sqlite:///{tmp.name}/bench.db"
    runner.upgrade(url)
    store = FaqStore(url)
    records = [
        KbRecord(f"faq{i}", f"question {j} about topic {i} with some more words",
                 f"answer {i} " * 20 if j == 0 else None, [f"t{i % 7}"] if j == 0 else None)
        for i in range(args.faqs) for j in range(args.variants)
    ]
    changed = [
        KbRecord(r.faq_id, r.question + (" v2" if i % 10 == 0 else ""),
                 (r.answer + "!") if r.answer and i % 20 == 0 else r.answer, r.tags)
        for i, r in enumerate(records)
    ]
    results: dict = {"url": url.split("@")[-1], "variants": len(records)}
    print(f"{len(records)} variants in {args.faqs} FAQs, {results['url']}")
    timed("import", results, lambda: store.import_records(records))
    timed("re-import (no changes)", results, lambda: store.import_records(records))
    timed("sync, 10% changed", results, lambda: store.import_records(changed, sync=True))
    timed("snapshot", results, store.snapshot)
    timed("export", results, lambda: sum(1 for _ in store.export_records()))
    store.close()
    out = REPO / "bench" / "results" / "store_import.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
