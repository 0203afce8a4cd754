"""The Changes page in a real browser (Playwright, Debian's chromium, a live uvicorn server) on a KB whose
publishing is reviewed: an edit shows as a change, word by word; Try a question answers it on the draft and not
on production; Publish serves it; Roll back serves the earlier publication again. Every page is watched for
JavaScript and console errors (tests/app/console/test_browser.py `Watched`)."""
from __future__ import annotations

import os

import httpx
import pytest

from tests.helpers.browser import Watched, sign_in
from tests.helpers.api import bearer, build, kb_records, make_settings, make_store
from tests.helpers.server import LiveServer

ROOT = "publishing-browser-root-token-of-32c"
SCREENSHOTS = os.environ.get("FAQ_TEST_SCREENSHOTS")  # a folder: the pages are saved there to look at


@pytest.fixture(scope="module")
def live(tmp_path_factory, encoder):
    from app.api.main import create_app

    settings = make_settings(tmp_path_factory.mktemp("console_publishing"), admin_token=ROOT, publishing="reviewed")
    store = make_store(settings, kb_records())
    build(store, encoder, settings)
    with LiveServer(create_app(settings, store=store, encoder=encoder)) as server:
        yield server, store


def production_answer(url: str, query: str) -> str | None:
    r = httpx.post(f"{url}/match", json={"query": query}, timeout=30)
    assert r.status_code == 200, r.text
    answer = r.json()["answer"]
    return answer["answer"] if answer else None


def shot(page, name: str) -> None:
    if SCREENSHOTS:
        page.screenshot(path=os.path.join(SCREENSHOTS, f"{name}.png"), full_page=True)


def test_changes_try_publish_and_roll_back_in_the_browser(live, browser):
    server, store = live
    before = store.get_faq("refund").answer
    edited = "Refunds are paid to your card within 5 days, or as store credit at once."
    r = httpx.patch(f"{server.url}/admin/faqs/refund", json={"answer": edited}, headers=bearer(ROOT), timeout=30)
    assert r.status_code == 200, r.text
    w = Watched(browser, server.url)
    try:
        page = sign_in(w, ROOT)
        page.goto("/console/kbs/default/changes")
        assert "reviewed" in page.inner_text("#publishing-mode")
        row = page.locator("#changes tr.changed[data-faq=refund]")
        word_diff = row.locator(".word-diff")
        assert [t.strip() for t in word_diff.locator("del").all_inner_texts()] == ["the original payment method", "10 days."]
        assert [t.strip() for t in word_diff.locator("ins").all_inner_texts()] == ["your card",
                                                                                   "5 days, or as store credit at once."]
        shot(page, "changes")

        page.goto("/console/kbs/default/try")
        assert page.input_value("#deployment") == "test"  # an editor of a reviewed KB tries the draft first
        page.fill("#query", "How do I get a refund?")
        with page.expect_navigation():
            page.click("#ask")
        assert page.inner_text("#answered-from") == "test" and edited in page.inner_text("#result")
        page.select_option("#deployment", "production")
        with page.expect_navigation():
            page.click("#ask")
        assert page.inner_text("#answered-from") == "production" and edited not in page.inner_text("#result")
        assert production_answer(server.url, "How do I get a refund?") == before

        page.goto("/console/kbs/default/changes")
        page.fill("#note", "faster refunds")
        with page.expect_navigation():
            page.click("#publish")
        assert "Published publication 2: 0 added, 0 removed, 1 changed." in page.inner_text(".flash")
        assert page.inner_text("#no-changes") == "No FAQ changed."
        assert production_answer(server.url, "How do I get a refund?") == edited
        shot(page, "published")

        with page.expect_navigation():
            page.click("button[aria-label='Roll back to publication 1']")
        assert "Production serves publication 1 again (as publication 3)." in page.inner_text(".flash")
        assert production_answer(server.url, "How do I get a refund?") == before
        assert page.locator("#publications tr.current").get_attribute("data-id") == "3"
        assert page.locator("#changes tr.changed[data-faq=refund]").count() == 1  # the draft kept its edit
    finally:
        w.close()
    assert w.problems == [] and w.dialogs == []
