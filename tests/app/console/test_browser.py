"""The console in a real browser: Playwright drives Debian's chromium against a live uvicorn server.

One server and one browser for the module; each test opens its own browser context (its own cookies).
Every page a test opens is watched: a JavaScript error or a console error fails the test, which also
catches inline script or style that the Content-Security-Policy blocks.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest

from tests.helpers.api import KB, two_built_kbs
from tests.helpers.browser import Watched, sign_in
from tests.helpers.server import LiveServer

ROOT = "browser-root-token-of-32-characters"
PROBES = {
    "xss_script": "<script>window.__pwned = 'script'</script>",
    "xss_img": "<img src=x onerror=\"window.__pwned = 'onerror'; alert(1)\">",
    "xss_link": "<a href=\"javascript:window.__pwned='link'\">click</a>",
    "javascript:alert(1)": "'\"><svg onload=alert(1)>",
}


@pytest.fixture(scope="module")
def live(tmp_path_factory, encoder):  # noqa: F811
    settings, store = two_built_kbs(tmp_path_factory.mktemp("console_browser"), encoder, ROOT)
    shop_token = store.catalog.issue_token("shop", "admin")[1]
    from app.api.main import create_app

    app = create_app(settings, store=store, encoder=encoder)
    with LiveServer(app) as server:
        yield server, app, store, shop_token


@pytest.fixture
def watched(browser, live):
    opened: list[Watched] = []

    def open_context() -> Watched:
        w = Watched(browser, live[0].url)
        opened.append(w)
        return w

    yield open_context
    for w in opened:
        w.close()
    assert [p for w in opened for p in w.problems] == []
    assert [d for w in opened for d in w.dialogs] == []


def top_match(live, query: str, kb: str = "") -> list[str]:
    prefix = f"/kbs/{kb}" if kb else ""
    r = httpx.post(f"{live[0].url}{prefix}/match", json={"query": query, "top_k": 10}, timeout=30)
    assert r.status_code == 200, r.text
    return [m["faq_id"] for m in r.json()["matches"]]


def test_global_token_picks_any_kb_and_signs_out(live, watched):
    w = watched()
    page = sign_in(w, ROOT)
    assert page.url.endswith("/console/kbs")
    assert page.locator("ul.kbs a").all_inner_texts() == ["default", "shop"]
    with page.expect_navigation():
        page.click("ul.kbs a >> text=shop")
    assert page.url.endswith("/console/kbs/shop/faqs")
    assert page.locator("tr[data-faq-id=pets]").count() == 1
    page.goto("/console/kbs/default/faqs")
    assert page.locator("tr[data-faq-id=refund]").count() == 1
    cookie = next(c for c in w.context.cookies() if c["name"] == "faq_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert ROOT not in cookie["value"]
    assert page.evaluate("document.cookie") == "", "no script can read the session cookie"
    with page.expect_navigation():
        page.click("#sign-out")
    assert page.url.endswith("/console/login")
    page.goto("/console/kbs/default/faqs")
    assert page.url.endswith("/console/login"), "signed out: pages redirect to the sign-in"


def test_kb_token_sees_only_its_kb(live, watched):
    w = watched()
    page = sign_in(w, live[3])
    assert page.url.endswith("/console/kbs/shop/faqs")
    assert page.locator("header a[href='/console/kbs']").count() == 0, "no KB picker for a KB token"
    w.expected_statuses.add(403)
    for kb in ("default", "nope"):
        response = page.goto(f"/console/kbs/{kb}/faqs")
        assert response.status == 403 and "another KB" in page.inner_text("#problem")
    page.goto("/console/kbs")
    assert page.url.endswith("/console/kbs/shop/faqs")


def test_wrong_token_stays_on_the_sign_in_page(live, watched):
    w = watched()
    w.expected_statuses.add(401)
    page = sign_in(w, "not-a-token")
    assert page.url.endswith("/console/login") and "token" in page.inner_text("#token-error")


def test_post_without_csrf_token_is_refused(live, watched):
    w = watched()
    page = sign_in(w, ROOT)
    revision = live[2].revision()
    for path, form in [("/console/kbs/default/faqs/delete", {"id": "refund"}),
                       ("/console/kbs/default/try", {"query": "refund"}), ("/console/logout", {})]:
        r = page.request.post(path, form=form, max_redirects=0)
        assert r.status == 403, (path, r.status)
        r = page.request.post(path, form={**form, "csrf": "forged"}, max_redirects=0)
        assert r.status == 403, (path, r.status)
    assert live[2].revision() == revision and live[2].get_faq("refund") is not None
    page.goto("/console/kbs")
    assert page.url.endswith("/console/kbs"), "still signed in"


def test_try_a_question_and_record_feedback(live, watched):
    store = live[2]
    w = watched()
    page = sign_in(w, ROOT)
    page.goto("/console/kbs/default/try")
    page.fill("#query", "I forgot my password, how can I reset it?")
    page.fill("#top_k", "3")
    with page.expect_navigation():
        page.click("#ask")
    assert page.inner_text("#decision") in ("answer", "clarify", "abstain")
    for field in ("#score", "#expected-precision", "#threshold"):
        assert page.inner_text(field).strip()
    rows = page.locator("table.matches tbody tr")
    assert rows.count() == 3
    assert rows.first.get_attribute("data-faq-id") == "reset_password"
    phrasing, answer = rows.first.locator("td").nth(1).inner_text(), rows.first.locator("td").nth(2).inner_text()
    assert phrasing in KB["reset_password"][1] and answer == KB["reset_password"][0]
    assert page.get_attribute("input[name=request_id]", "value")
    # why it matched: the signals in the FAQ table and the words shaded by class, never a style attribute
    assert float(rows.first.locator("td.phrasing-cosine").inner_text()) > 0
    words = page.locator("#weights .word")
    assert words.all_inner_texts() == "I forgot my password, how can I reset it?".split()
    assert all(c.split()[-1] in {f"w{i}" for i in range(6)} for c in
               [words.nth(i).get_attribute("class") for i in range(words.count())])
    assert page.inner_text("#top-words").startswith("Weighed most:")
    assert "ms" in page.inner_text("#weights-time")
    assert page.locator("[style]").count() == 0
    with page.expect_navigation():
        page.click("#mark-wrong")
    assert "Feedback recorded" in page.inner_text(".flash")
    logged = [row for row in store.read_query_log(with_feedback=True)
              if row["query"] == "I forgot my password, how can I reset it?"]
    assert len(logged) == 1 and logged[0]["feedback_correct"] is False
    assert logged[0]["faq_id"] in (None, "reset_password")


def test_faq_create_edit_delete_show_in_match_at_once(live, watched):
    w = watched()
    page = sign_in(w, ROOT)
    page.goto("/console/kbs/default/faqs/new")
    page.fill("#faq_id", "gift_cards")
    page.fill("#answer", "Gift cards are sold at every checkout.")
    page.fill("#questions", "Do you sell gift cards?\nCan I buy a gift voucher?")
    page.fill("#tags", "shop, gifts")
    with page.expect_navigation():
        page.click("#save")
    assert "Created FAQ 'gift_cards'" in page.inner_text(".flash")
    assert top_match(live, "do you sell gift cards")[0] == "gift_cards"

    page.goto("/console/kbs/default/faqs?q=gift")
    assert page.locator("tbody tr").count() == 1
    with page.expect_navigation():
        page.click("tr[data-faq-id=gift_cards] a.edit")
    page.fill("#questions", "Is there a loyalty programme with points?")
    with page.expect_navigation():
        page.click("#save")
    assert "Saved FAQ 'gift_cards'" in page.inner_text(".flash")
    assert live[2].get_faq("gift_cards").questions == ["Is there a loyalty programme with points?"]
    assert top_match(live, "loyalty programme points")[0] == "gift_cards"

    page.goto("/console/kbs/default/faqs/edit?id=gift_cards")
    with page.expect_navigation():
        page.click("#delete")
    assert "Deleted FAQ 'gift_cards'" in page.inner_text(".flash")
    assert "gift_cards" not in top_match(live, "loyalty programme points")


def test_answers_per_language_are_added_and_removed_in_the_editor(live, watched, tmp_path):
    w = watched()
    page = sign_in(w, ROOT)
    page.goto("/console/kbs/default/faqs/new")
    page.fill("#faq_id", "gift_wrap")
    page.fill("#answer", "Gift wrapping costs 2 euros at the checkout.")
    page.fill("#questions", "Do you gift wrap?\n¿Envolvéis los pedidos para regalo?")
    page.select_option("#new_answer_language", "es")
    page.fill("#new_answer", "Envolver para regalo cuesta 2 euros en la caja.")
    with page.expect_navigation():
        page.click("#save")
    assert "Created FAQ 'gift_wrap'" in page.inner_text(".flash")
    assert live[2].get_faq("gift_wrap").answers == {"es": "Envolver para regalo cuesta 2 euros en la caja."}
    asked = {"query": "¿Envolvéis los pedidos para regalo?"}
    body = httpx.post(f"{live[0].url}/match", json=asked, timeout=30).json()
    assert body["language"] == "es" and body["matches"][0]["faq_id"] == "gift_wrap"
    assert body["matches"][0]["answer"] == "Envolver para regalo cuesta 2 euros en la caja."

    page.goto("/console/kbs/default/faqs/edit?id=gift_wrap")
    page.screenshot(path=str(tmp_path / "faq_answers.png"), full_page=True)
    page.fill("#answers_es", "")  # emptied: the language goes
    with page.expect_navigation():
        page.click("#save")
    assert live[2].get_faq("gift_wrap").answers == {}
    body = httpx.post(f"{live[0].url}/match", json=asked, timeout=30).json()
    assert body["matches"][0]["answer"] == "Gift wrapping costs 2 euros at the checkout."
    page.goto("/console/kbs/default/faqs/edit?id=gift_wrap")
    with page.expect_navigation():
        page.click("#delete")


def test_validation_errors_show_next_to_the_field(live, watched):
    w = watched()
    w.expected_statuses.update({409, 422})
    page = sign_in(w, ROOT)
    page.goto("/console/kbs/default/faqs/new")
    page.fill("#faq_id", "refund")
    page.fill("#answer", "   ")
    page.fill("#questions", "my phrasing stays")
    with page.expect_navigation():
        page.click("#save")
    assert "answer" in page.inner_text("#answer-error") or page.inner_text("#answer-error")
    assert page.input_value("#questions") == "my phrasing stays"
    page.fill("#answer", "An answer")
    with page.expect_navigation():
        page.click("#save")
    assert "already exists" in page.inner_text("#faq_id-error")


def test_two_editors_cannot_overwrite_each_other(live, watched):
    store = live[2]
    first, second = watched(), watched()
    second.expected_statuses.add(409)
    a, b = sign_in(first, ROOT), sign_in(second, ROOT)
    for page in (a, b):
        page.goto("/console/kbs/default/faqs/edit?id=shipping_time")
    a.fill("#answer", "Shipping takes 2 days now.")
    with a.expect_navigation():
        a.click("#save")
    assert "Saved" in a.inner_text(".flash")
    b.fill("#answer", "Shipping takes a week, says B.")
    b.fill("#questions", "How long does shipping take?\nB's new phrasing")
    with b.expect_navigation():
        b.click("#save")
    assert "Someone else saved this FAQ" in b.inner_text("#form-error")
    assert b.input_value("#answer") == "Shipping takes a week, says B."
    assert "B's new phrasing" in b.input_value("#questions")
    assert "Shipping takes 2 days now." in b.inner_text("#stored")
    assert store.get_faq("shipping_time").answer == "Shipping takes 2 days now."
    b.goto("/console/kbs/default/faqs/edit?id=shipping_time")  # the way out: edit the saved version
    b.fill("#answer", "Shipping takes a week, says B.")
    with b.expect_navigation():
        b.click("#save")
    assert store.get_faq("shipping_time").answer == "Shipping takes a week, says B."


def test_xss_probes_are_inert(live, watched):
    app, store = live[1], live[2]
    for faq_id, probe in PROBES.items():
        store.create_faq(faq_id, f"answer {probe}", [f"question about probes {probe}"], tags=[probe.replace(";", "")])
    app.state.service.refresh_kb(reason="test")
    w = watched()
    page = sign_in(w, ROOT)
    visits = ["/console/kbs/default/faqs?q=probe"] + [
        f"/console/kbs/default/faqs/edit?id={httpx.URL('/', params={'id': faq_id}).query.decode()[3:]}"
        for faq_id in PROBES]
    for path in visits:
        page.goto(path)
        page.wait_for_load_state("load")
        assert page.evaluate("typeof window.__pwned") == "undefined", path
        assert page.evaluate("[...document.querySelectorAll('[href]')].filter(e => "
                             "e.getAttribute('href').trim().toLowerCase().startsWith('javascript:')).length") == 0
        assert page.locator("script:not([src])").count() == 0
    assert page.locator("textarea#answer").input_value() == f"answer {PROBES['javascript:alert(1)']}"
    page.goto("/console/kbs/default/faqs?q=probe")
    shown = set(page.locator("td.answer").all_inner_texts())
    assert shown == {f"answer {probe}" for probe in PROBES.values()}, "the probes are shown as the text they are"
    page.goto("/console/kbs/default/try")
    page.fill("#query", "question about probes <script>window.__pwned = 1</script>")
    with page.expect_navigation():
        page.click("#ask")
    assert page.locator("table.matches tbody tr").count() > 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.locator("table.matches td.answer").first.hover()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    for faq_id in PROBES:
        store.delete_faq(faq_id)
    app.state.service.refresh_kb(reason="test")


def served_version(live, kb: str = "") -> str:
    prefix = f"/kbs/{kb}" if kb else ""
    r = httpx.post(f"{live[0].url}{prefix}/match", json={"query": "refund"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["index_version"]


def test_build_now_polls_then_rollback_from_the_builds_page(live, watched):
    w = watched()
    page = sign_in(w, ROOT)
    page.goto("/console/kbs/shop/builds")
    first = page.locator("tr.current").get_attribute("data-version")
    assert served_version(live, "shop") == first
    with page.expect_navigation():
        page.click("#build-now")
    # console.js reloads the page while the build runs; the finished page stops polling
    page.wait_for_selector("#build-state.build-done", timeout=120_000)
    built = page.locator("tr.current").get_attribute("data-version")
    assert built != first and served_version(live, "shop") == built
    assert page.locator("[data-poll]").count() == 0
    if page.locator("#curve").count():
        assert page.evaluate("document.getElementById('curve').naturalWidth") > 0
    with page.expect_navigation():
        page.click(f"tr[data-version='{first}'] button.activate")
    assert f"{first} is now current" in page.inner_text(".flash")
    assert served_version(live, "shop") == first


def test_import_dry_run_apply_and_bad_lines(live, watched, tmp_path):
    store = live[2].for_kb("shop")
    w = watched()
    w.expected_statuses.add(422)
    page = sign_in(w, ROOT)
    page.goto("/console/kbs/shop/import")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"faq_id": "ok", "question": "Fine?", "answer": "Fine."}\n{oops\n', encoding="utf-8")
    page.set_input_files("#file", str(bad))
    with page.expect_navigation():
        page.click("#dry-run")
    assert page.locator("#import-errors li").all_inner_texts() == [
        page.locator("#import-errors li").first.inner_text()]
    assert page.locator("#import-errors li").first.inner_text().startswith("bad.jsonl:2: invalid JSON")
    assert page.locator("#apply").count() == 0 and store.get_faq("ok") is None
    good = tmp_path / "more.csv"
    good.write_text("faq_id,question,answer,tags\nopening_hours,When are you open?,From 9 to 5.,shop\n",
                    encoding="utf-8")
    page.set_input_files("#file", str(good))
    with page.expect_navigation():
        page.click("#dry-run")
    assert page.inner_text("#faqs-created") == "1" and page.inner_text("#variants-added") == "1"
    assert store.get_faq("opening_hours") is None
    with page.expect_navigation():
        page.click("#apply")
    assert "Imported more.csv: 1 FAQs created" in page.inner_text(".flash")
    assert top_match(live, "when are you open", "shop")[0] == "opening_hours"
    page.goto("/console/kbs/shop/import")
    with page.expect_download() as download:
        page.click("#export")
    assert '"faq_id": "opening_hours"' in open(download.value.path(), encoding="utf-8").read()


def test_feedback_can_name_the_right_faq(live, watched):
    store = live[2]
    w = watched()
    page = sign_in(w, ROOT)
    page.goto("/console/kbs/default/try")
    page.fill("#query", "money back for a broken parcel")
    with page.expect_navigation():
        page.click("#ask")
    page.select_option("#right-faq", "refund")
    with page.expect_navigation():
        page.click("#mark-other")
    assert "the right FAQ is 'refund'" in page.inner_text(".flash")
    [row] = [r for r in store.read_query_log(with_feedback=True) if r["query"] == "money back for a broken parcel"]
    assert (row["feedback_correct"], row["feedback_faq_id"]) == (None, "refund")
    # an id that names no FAQ is refused, and nothing is recorded
    page.fill("#query", "a parcel question")
    with page.expect_navigation():
        page.click("#ask")
    page.fill("#other-faq", "no-such-faq")
    w.expected_statuses.add(422)
    with page.expect_navigation():
        page.click("#mark-other")
    assert "no-such-faq" in page.inner_text("#problem")
    assert [r for r in store.read_query_log(with_feedback=True) if r["query"] == "a parcel question"] == []


def _review_when_checked(page, kb: str):
    """The review page once its background lint has run (the page reloads itself until then)."""
    page.goto(f"/console/kbs/{kb}/review")
    page.wait_for_selector("#lint-running", state="detached", timeout=60_000)
    page.wait_for_load_state("load")
    return page


def test_review_queues_accept_draft_and_dismiss(live, watched):
    store = live[2].for_kb("shop")
    store.create_faq("lockers", "TODO", ["Do you have lockers?"])
    base = live[0].url
    for query, feedback in [("my dog wants to come along", {"faq_id": "pets"}),
                            ("wifi code please", {"faq_id": "wifi"}),
                            ("do you rent bikes", {"correct": False}), ("Do you rent bikes?", {"correct": False})]:
        r = httpx.post(f"{base}/kbs/shop/match", json={"query": query}, timeout=30)
        assert r.status_code == 200, r.text
        f = httpx.post(f"{base}/kbs/shop/feedback", json={"request_id": r.json()["request_id"], **feedback}, timeout=30)
        assert f.status_code == 200, f.text
    w = watched()
    page = _review_when_checked(sign_in(w, ROOT), "shop")
    assert serious_violations(page) == []
    # a mined phrasing: accept, and /match finds it at once
    row = page.locator("#phrasings tr", has_text="my dog wants to come along")
    with page.expect_navigation():
        row.locator("button.accept").click()
    assert "Added the phrasing to FAQ 'pets'" in page.inner_text(".flash")
    assert "my dog wants to come along" in store.get_faq("pets").questions
    assert top_match(live, "my dog wants to come along", "shop")[0] == "pets"
    # another: reject it, with a reason; it leaves the queue for the dismissed list
    row = page.locator("#phrasings tr", has_text="wifi code please")
    row.locator("input[name=reason]").fill("customers ask the staff")
    with page.expect_navigation():
        row.locator("button.dismiss-button").click()
    assert page.locator("#phrasings tr", has_text="wifi code please").count() == 0
    assert "wifi code please" not in store.get_faq("wifi").questions
    # a lint finding: its FAQ opens from the queue; a reason is needed, then it moves to the dismissed list
    _review_when_checked(page, "shop")
    with page.expect_navigation():
        page.locator("#lint tr", has_text="lockers").locator("a.open-faq").click()
    assert page.url.endswith("/console/kbs/shop/faqs/edit?id=lockers") and page.input_value("#answer") == "TODO"
    _review_when_checked(page, "shop")
    finding = page.locator("#lint tr", has_text="lockers")
    finding.locator("input[name=reason]").fill("the rest is on the sign")
    with page.expect_navigation():
        finding.locator("button.dismiss-button").click()
    assert page.locator("#lint tr", has_text="lockers").count() == 0
    page.click("#dismissed summary")
    assert "the rest is on the sign" in page.inner_text("#dismissed")
    assert "customers ask the staff" in page.inner_text("#dismissed")
    # an unanswered cluster: open it as a draft, write the answer, create
    with page.expect_navigation():
        page.locator("#clusters tr", has_text="rent bikes").locator("a.draft").click()
    assert page.input_value("#faq_id") == "rent-bikes"
    assert sorted(page.input_value("#questions").splitlines()) == ["Do you rent bikes?", "do you rent bikes"]
    assert serious_violations(page) == []
    page.fill("#answer", "We do not rent bikes.")
    with page.expect_navigation():
        page.click("#save")
    assert store.get_faq("rent-bikes") is not None
    page = _review_when_checked(page, "shop")
    assert page.locator("#clusters tr", has_text="rent bikes").count() == 0
    assert page.locator("#no-phrasings").count() == 1
    assert page.locator("[style]").count() == 0


def test_traffic_page_draws_one_line_per_arm(live, watched):
    app, store = live[1], live[2]
    for arm in ("ann", "lexical"):
        for query in ("How do I get a refund?", "I forgot my password"):
            r = httpx.post(f"{live[0].url}/match", json={"query": query, "arm": arm}, timeout=30)
            assert r.status_code == 200, r.text
    # the hours before this one, so each arm's line has points to join
    now = datetime.now(timezone.utc)
    store.log_queries([{"request_id": f"traffic-{arm}-{h}-{i}", "query": "q", "arm": arm, "latency_ms": 5.0 + h,
                        "created_at": now - timedelta(hours=h), "faq_id": "refund" if i else None,
                        "decision": "answer" if i else "abstain", "feedback_correct": bool(i % 2) if i else None}
                       for arm in ("ann", "lexical") for h in (1, 2, 3) for i in range(3)])
    assert app.state.service.query_log.flush()
    w = watched()
    page = sign_in(w, ROOT)
    page.goto("/console/kbs/default/builds")
    with page.expect_navigation():
        page.click("header nav a >> text=Traffic")
    assert page.url.endswith("/console/kbs/default/traffic")
    with page.expect_navigation():
        page.click("#window-24h")
    assert page.locator("#window-24h").get_attribute("aria-current") == "page"
    arms = page.locator("#arm-totals tbody tr").evaluate_all("rows => rows.map(r => r.dataset.arm)")
    assert {"ann", "lexical"} <= set(arms)
    for key in ("answer-rate", "abstain-rate", "accuracy", "latency-p50"):
        chart = page.locator(f"#chart-{key} svg[role=img]")
        assert chart.is_visible() and chart.bounding_box()["width"] > 300
        for arm in ("ann", "lexical"):
            series = chart.locator(f"g.series[data-arm='{arm}']")
            assert series.count() == 1, (key, arm)
            assert series.locator("polyline").count() >= 1, (key, arm)
            assert series.locator(".dot").count() >= 3, (key, arm)
    # colour is not the only cue: each arm's line is dashed its own way
    dashes = {page.locator(f"#chart-answer-rate g.series[data-arm='{arm}'] polyline").first.evaluate(
        "e => getComputedStyle(e).strokeDasharray") for arm in ("ann", "lexical")}
    assert len(dashes) == 2
    assert page.locator("#legend li").count() == len(arms)
    page.click("#chart-accuracy summary")
    assert page.locator("#chart-accuracy table.chart-table").is_visible()
    assert page.locator("[style]").count() == 0 and page.locator("script:not([src])").count() == 0


def test_xss_probes_in_users_queries_are_inert_on_the_review_page(live, watched):
    """Anyone may send /match a query: the review page shows them (unanswered clusters, drafts)."""
    base = live[0].url
    for probe in PROBES.values():
        for _ in range(2):  # asked twice and marked wrong: an unanswered cluster
            r = httpx.post(f"{base}/kbs/shop/match", json={"query": f"probe {probe}"}, timeout=30)
            assert r.status_code == 200, r.text
            f = httpx.post(f"{base}/kbs/shop/feedback", json={"request_id": r.json()["request_id"], "correct": False},
                           timeout=30)
            assert f.status_code == 200, f.text
    w = watched()
    page = _review_when_checked(sign_in(w, ROOT), "shop")
    shown = page.locator("#clusters ul.queries li").all_inner_texts()
    for probe in PROBES.values():
        assert any(text.startswith(f"probe {probe}") for text in shown), probe
    drafts = [page.locator("#clusters tr", has_text=f"probe {probe}").locator("a.draft").get_attribute("href")
              for probe in PROBES.values()]
    for path in [None, *drafts]:
        if path is not None:
            page.goto(path)
            page.wait_for_load_state("load")
        assert page.evaluate("typeof window.__pwned") == "undefined", path
        assert page.evaluate("[...document.querySelectorAll('[href]')].filter(e => "
                             "e.getAttribute('href').trim().toLowerCase().startsWith('javascript:')).length") == 0
        assert page.locator("script:not([src])").count() == 0 and page.locator("[style]").count() == 0
    assert page.input_value("#questions").startswith("probe "), "a draft holds the query as text"


def serious_violations(page) -> list[str]:
    """axe-core's serious and critical findings on the page, one line each."""
    axe = pytest.importorskip("axe_playwright_python.sync_playwright", reason="pip install -e '.[test]'")
    results = axe.Axe().run(page)
    assert results.response["testEngine"]["name"] == "axe-core", "axe ran on the page"
    return [f"{page.url}: {v['id']} ({v['impact']}): {v['help']} at "
            + ", ".join(", ".join(n["target"]) for n in v["nodes"][:3])
            for v in results.response["violations"] if v["impact"] in ("serious", "critical")]


def test_every_console_page_passes_axe(live, watched, tmp_path):
    w = watched()
    w.expected_statuses.update({404, 422})
    page = w.page()
    found: list[str] = []
    page.goto("/console/login")
    found += serious_violations(page)
    page.fill("#token", "wrong")
    w.expected_statuses.add(401)
    with page.expect_navigation():
        page.click("button[type=submit]")
    found += serious_violations(page)  # the sign-in page with its error
    page = sign_in(w, ROOT)
    found += serious_violations(page)  # the KB picker
    for path in ("/console/kbs/default/faqs", "/console/kbs/default/faqs?q=zzzz", "/console/kbs/default/faqs/new",
                 "/console/kbs/default/faqs/edit?id=refund", "/console/kbs/default/try", "/console/kbs/default/builds",
                 "/console/kbs/default/import", "/console/kbs/default/review", "/console/kbs/default/traffic?window=24h",
                 "/console/kbs/default/traffic?window=30d", "/console/kbs/default/smalltalk", "/console/kbs/nope/faqs"):
        page.goto(path)
        found += serious_violations(page)
    page.goto("/console/kbs/default/try")
    page.fill("#query", "How do I get a refund?")
    with page.expect_navigation():
        page.click("#ask")
    found += serious_violations(page)
    page.goto("/console/kbs/default/faqs/new")
    page.fill("#faq_id", "refund")
    page.fill("#answer", " ")
    page.fill("#questions", "x")
    with page.expect_navigation():
        page.click("#save")
    found += serious_violations(page)  # a form with its errors
    upload = tmp_path / "axe.jsonl"
    upload.write_text('{"faq_id": "axe_faq", "question": "Axe?", "answer": "Axe."}\n{bad\n', encoding="utf-8")
    page.goto("/console/kbs/default/import")
    page.set_input_files("#file", str(upload))
    with page.expect_navigation():
        page.click("#dry-run")
    found += serious_violations(page)  # bad lines
    upload.write_text('{"faq_id": "axe_faq", "question": "Axe?", "answer": "Axe."}\n', encoding="utf-8")
    page.set_input_files("#file", str(upload))
    with page.expect_navigation():
        page.click("#dry-run")
    found += serious_violations(page)  # the dry run's counts
    assert found == []
