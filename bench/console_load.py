"""First load of each console page on the demo KB, in headless chromium.

    python bench/console_load.py [--runs 5]

The app runs on app/demo/faq.jsonl as scripts/console_screenshots.py starts it (MiniLM, one build, a
temporary data folder, uvicorn on 127.0.0.1 in this process). Each run opens a fresh browser context
(empty cache: the stylesheet, script and icon are fetched again), signs in, then loads the page once;
the time is the navigation's load event (performance.getEntriesByType("navigation")), so it counts the
server's answer, the static files and the browser's layout. "try a question (answer)" is the POST that
asks the demo question; "traffic" draws its charts from the requests `demo_traffic` sends first
(420 on two arms, spread over a week), and "review" its queues from the same log (its answer check runs
in the background after the first load, so later loads show the lint findings; the load is the page's,
not the check's). Median of --runs per page; the target is <= 1 s each.

Writes bench/results/console_load.json and console_load.md. Browser and server share this machine's cores.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation.machine import cpu_info  # noqa: E402
from scripts.console_screenshots import (IMPORT_SAMPLE, VIEWPORT, demo_console, demo_traffic, launch,  # noqa: E402
                                         sign_in)

TARGET_MS = 1000.0
PAGES = [
    ("sign-in", "/console/login"),
    ("KBs", "/console/kbs"),
    ("FAQs", "/console/kbs/default/faqs"),
    ("FAQ search", "/console/kbs/default/faqs?q=refund"),
    ("FAQ edit", "/console/kbs/default/faqs/edit?id=billing-refund"),
    ("try a question", "/console/kbs/default/try"),
    ("try a question (answer)", None),
    ("builds", "/console/kbs/default/builds"),
    ("import", "/console/kbs/default/import"),
    ("import dry run", None),
    ("traffic", "/console/kbs/default/traffic"),
    ("review", "/console/kbs/default/review"),
]
LOAD_MS = "(() => { const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime; })()"


def first_load(browser, demo, name: str, path: str | None, sample: Path) -> float:
    context = browser.new_context(base_url=demo.url, viewport=VIEWPORT)
    try:
        page = context.new_page()
        if name != "sign-in":
            sign_in(page, demo.token)
        if name == "try a question (answer)":
            page.goto("/console/kbs/default/try")
            page.fill("#query", "how do I get my money back for the yearly plan?")
            with page.expect_navigation():
                page.click("#ask")
        elif name == "import dry run":
            page.goto("/console/kbs/default/import")
            page.set_input_files("#file", str(sample))
            with page.expect_navigation():
                page.click("#dry-run")
        else:
            page.goto(path)
        page.wait_for_load_state("load")
        return float(page.evaluate(LOAD_MS))
    finally:
        context.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    from playwright.sync_api import sync_playwright

    rows = []
    with demo_console() as demo, sync_playwright() as playwright:
        browser = launch(playwright)
        sample = demo.data_dir / "edits.jsonl"
        sample.write_text(IMPORT_SAMPLE, encoding="utf-8")
        demo_traffic(demo)
        first_load(browser, demo, "FAQs", "/console/kbs/default/faqs", sample)  # warm-up: the encoder's first call
        for name, path in PAGES:
            times = [first_load(browser, demo, name, path, sample) for _ in range(args.runs)]
            rows.append({"page": name, "path": path, "median_ms": round(statistics.median(times), 1),
                         "max_ms": round(max(times), 1), "runs_ms": [round(t, 1) for t in times]})
            print(f"{name:26s} median {rows[-1]['median_ms']:7.1f} ms  max {rows[-1]['max_ms']:7.1f} ms")
        browser.close()
    result = {"date": date.today().isoformat(), "runs": args.runs, "target_ms": TARGET_MS, "machine": cpu_info(),
              "kb": "app/demo/faq.jsonl", "pages": rows,
              "all_within_target": all(r["median_ms"] <= TARGET_MS for r in rows)}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "console_load.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    lines = [f"# Console first page loads ({result['date']})", "",
             f"Demo KB (134 FAQs, 548 phrasings), headless chromium, a fresh browser context per load, median of "
             f"{args.runs}; target <= {TARGET_MS:.0f} ms. Made by `bench/console_load.py`.", "",
             "| page | median ms | max ms |", "|---|---:|---:|"]
    lines += [f"| {r['page']} | {r['median_ms']:.1f} | {r['max_ms']:.1f} |" for r in rows]
    lines += ["", f"Every page within the target: {'yes' if result['all_within_target'] else 'no'}."]
    (args.out_dir / "console_load.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
