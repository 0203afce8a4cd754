"""Screenshots of the console's pages on the demo KB, for docs/console/.

    PYTHONPATH=. python scripts/console_screenshots.py [--out docs/console]

Starts the app on app/demo/faq.jsonl (MiniLM, one build, in a temporary data folder that is removed
afterwards) on 127.0.0.1, signs in with a throwaway FAQ_ADMIN_TOKEN in headless Debian chromium
(1200x800) and writes one PNG per page. The Traffic page's charts are drawn from real /match requests on
two arms (`ann` and `lexical`) with feedback, sent by `demo_traffic` first and then spread over the past
week in the log, since a run takes a minute and its requests would otherwise all fall in one hour. The PNGs are quantised to 256 colours: they are documentation,
and git keeps every version of them. `demo_console()` is also what bench/console_load.py measures.
"""
from __future__ import annotations

import argparse
import io
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEMO_KB = REPO / "app" / "demo" / "faq.jsonl"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1200, "height": 800}
#: a few edits of the demo KB: what the import page's dry run shows
IMPORT_SAMPLE = (
    '{"faq_id": "billing-refund", "question": "Can I get a refund?", "answer": "Yearly plans can be refunded '
    'within 30 days of payment.", "tags": ["billing"]}\n'
    '{"faq_id": "gift-cards", "question": "Do you sell gift cards?", "answer": "Not yet.", "tags": ["billing"]}\n'
    '{"faq_id": "gift-cards", "question": "Can I give Nimbus as a present?"}\n'
)
#: questions the demo KB has no answer for: the abstains of the Traffic page
OFF_TOPIC = ("what is the weather in Lisbon tomorrow", "recommend a good pizza place", "who won the match last night",
             "how tall is the Eiffel tower", "translate hello into Japanese", "is it going to rain",
             "what time is it in Sydney", "tell me a joke about cats")


@dataclass
class DemoConsole:
    url: str
    token: str
    data_dir: Path
    app: Any = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def demo_console() -> Iterator[DemoConsole]:
    """The app on the demo KB, served by uvicorn in a thread, until the block ends."""
    import torch
    import uvicorn

    from app.api.main import create_app
    from app.release.expected_precision import CURVE_FILE, plot_expected_precision
    from app.settings import Settings
    from index.artifacts import BuildRegistry
    from app.release import build_current
    from kb.files import read_kb
    from migrations.runner import migrated_store
    from models.encoders.pretrained import MiniLMEncoder

    torch.set_num_threads(2)
    data_dir = Path(tempfile.mkdtemp(prefix="faq-console-demo-"))
    token = secrets.token_urlsafe(24)
    try:
        settings = Settings(data_dir=data_dir, encoder="minilm", torch_threads=2, encode_workers=1,
                            kb_poll_seconds=0, admin_token=token, query_log=True)
        store = migrated_store(settings)
        store.import_records(read_kb(DEMO_KB))
        encoder = MiniLMEncoder(device="cpu")
        registry = BuildRegistry(settings.index_dir)
        manifest = build_current(store, encoder, registry, n_trees=settings.ann_n_trees, encoder_spec="minilm")
        plot_expected_precision(manifest, settings, registry.path(manifest["version"]) / CURVE_FILE)
        app = create_app(settings, store=store, encoder=encoder)
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        try:
            yield DemoConsole(f"http://127.0.0.1:{port}", token, data_dir, app)
        finally:
            server.should_exit = True
            thread.join(30)
            store.close()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def demo_traffic(demo: DemoConsole, requests: int = 420, days: int = 7, seed: int = 7) -> int:
    """Real /match requests on the arms `ann` and `lexical` (alternating) with /feedback on about half of
    the answers, then their log rows' times spread over the past `days`; returns how many were sent.
    Questions are the demo KB's phrasings, some with a word dropped, and a few off-topic ones."""
    import random
    from datetime import datetime, timedelta, timezone

    import httpx
    from sqlalchemy import bindparam, update

    from app.store.base import qlog_t
    from kb.files import read_kb

    rng = random.Random(seed)
    phrasings = [(r.faq_id, r.question) for r in read_kb(DEMO_KB)]
    asked = []
    for i in range(requests):
        if rng.random() < 0.08:
            faq_id, query = None, rng.choice(OFF_TOPIC)
        else:
            faq_id, query = rng.choice(phrasings)
            words = query.split()
            if len(words) > 3 and rng.random() < 0.6:  # a shorter, sloppier question, and fewer cache hits
                del words[rng.randrange(len(words))]
                query = " ".join(words).lower()
        asked.append((faq_id, {"query": query, "arm": ("ann", "lexical")[i % 2]}))
    now = datetime.now(timezone.utc)
    # back to the first day the 7-day page shows (it starts at a UTC midnight), never before it
    span = now - now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=days - 1, minutes=-2)
    times = []
    with httpx.Client(base_url=demo.url, timeout=60) as client:
        for start in range(0, len(asked), 20):
            chunk = asked[start:start + 20]
            r = client.post("/match/batch", json={"queries": [body for _, body in chunk]})
            r.raise_for_status()
            for (faq_id, _), result in zip(chunk, r.json()["results"]):
                # busier in the middle of the week, so the lines are not flat by construction only
                times.append({"rid": result["request_id"],
                              "at": now - timedelta(minutes=1) - span * rng.triangular(0, 1, 0.5) ** 1.3})
                answer = result["answer"]
                if answer is None or rng.random() < 0.5:
                    continue
                if rng.random() < 0.7:
                    feedback = {"request_id": result["request_id"], "correct": answer["faq_id"] == faq_id}
                else:  # the FAQ the asker meant, as a clarify pick would send it
                    feedback = {"request_id": result["request_id"], "faq_id": faq_id or answer["faq_id"]}
                client.post("/feedback", json=feedback).raise_for_status()
    state = demo.app.state.service
    if not state.query_log.flush(60):
        raise RuntimeError("the query log was not written")
    with state.store.engine.begin() as conn:
        conn.execute(update(qlog_t).where(qlog_t.c.request_id == bindparam("rid")).values(created_at=bindparam("at")),
                     times)
    return len(asked)


def placeholder_faq(demo: DemoConsole) -> None:
    """An FAQ saved with a placeholder answer, as an editor drafting it might: the review page's lint
    queue flags it."""
    import httpx

    r = httpx.post(f"{demo.url}/admin/faqs", headers={"Authorization": f"Bearer {demo.token}"}, timeout=60,
                   json={"faq_id": "gift-cards", "answer": "TBD", "questions": ["Do you sell gift cards?"]})
    r.raise_for_status()


def launch(playwright):
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    return playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)


def sign_in(page, token: str) -> None:
    page.goto("/console/login")
    page.fill("#token", token)
    with page.expect_navigation():
        page.click("button[type=submit]")


def _save(page, out: Path, full_page: bool = False) -> int:
    from PIL import Image

    shot = Image.open(io.BytesIO(page.screenshot(full_page=full_page)))
    small = shot.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(out, optimize=True)
    return out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "console")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with demo_console() as demo, sync_playwright() as playwright:
        browser = launch(playwright)
        context = browser.new_context(base_url=demo.url, viewport=VIEWPORT)
        page = context.new_page()
        shots: list[tuple[str, int]] = []

        def shot(name: str, full_page: bool = False) -> None:
            page.wait_for_load_state("load")
            shots.append((name, _save(page, args.out / f"{name}.png", full_page)))

        page.goto("/console/login")
        shot("01-sign-in")
        sign_in(page, demo.token)
        shot("02-kbs")
        page.goto("/console/kbs/default/try")
        page.fill("#query", "how do I get my money back for the yearly plan?")
        with page.expect_navigation():
            page.click("#ask")
        shot("03-try-a-question")
        page.goto("/console/kbs/default/faqs?q=refund")
        shot("04-faqs")
        page.goto("/console/kbs/default/faqs/edit?id=billing-refund")
        shot("05-faq-edit")
        page.goto("/console/kbs/default/builds")
        shot("06-builds")
        sample = demo.data_dir / "edits.jsonl"
        sample.write_text(IMPORT_SAMPLE, encoding="utf-8")
        page.goto("/console/kbs/default/import")
        page.set_input_files("#file", str(sample))
        with page.expect_navigation():
            page.click("#dry-run")
        shot("07-import-dry-run")
        demo_traffic(demo)
        page.goto("/console/kbs/default/traffic")
        shot("08-traffic", full_page=True)  # all four charts
        placeholder_faq(demo)
        page.goto("/console/kbs/default/review")
        page.wait_for_selector("#lint-running", state="detached", timeout=120_000)  # it reloads until lint is done
        shot("09-review", full_page=True)
        browser.close()
    for name, size in shots:
        print(f"{args.out / name}.png: {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
