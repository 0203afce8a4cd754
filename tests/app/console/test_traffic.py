"""The console's Traffic page over plain HTTP: real /match requests on two arms and their feedback, counted
per arm; the window's bad values; a KB token sees only its KB's traffic.

Its own app and data folder: the counts are exact only on a query log nobody else writes.
"""
from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.helpers.console import assert_headers, served_kbs, sign_in

ROOT = "console-traffic-token-of-32-characters"
PAGE = "/console/kbs/default/traffic"
ANSWERED = "How do I reset my password?"
UNKNOWN = "xylophone gluon plasma"  # no word BM25 knows: the lexical arm has no candidate, so no answer


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    with served_kbs(tmp_path_factory.mktemp("console_traffic"), encoder, ROOT, "shop") as served:
        app, store, tokens, client = served
        yield app, store, {"shop": tokens["admin"]}, client


def cell(html: str, arm: str, name: str) -> str:
    found = re.search(rf'<tr data-arm="{re.escape(arm)}">.*?<td class="{name}">(.*?)</td>', html, re.S)
    assert found, (arm, name)
    return re.sub(r"<[^>]+>", "", found.group(1)).split()[0]


def test_counts_real_requests_per_arm_with_their_feedback(served):
    app, _, _, client = served
    page, _ = sign_in(served, ROOT)
    empty = page.get(PAGE)
    assert empty.status_code == 200 and "No /match requests in this window" in empty.text
    assert 'href="/console/kbs/default/traffic">Traffic</a>' in empty.text, "the nav links the page"

    def ask(query: str, arm: str) -> dict:
        r = client.post("/match", json={"query": query, "arm": arm})
        assert r.status_code == 200, r.text
        return r.json()

    ann = [ask(ANSWERED, "ann") for _ in range(5)] + [ask("when does my parcel arrive", "ann")]
    lexical = [ask(ANSWERED, "lexical") for _ in range(2)] + [ask(UNKNOWN, "lexical") for _ in range(2)]
    assert lexical[-1]["decision"] == "abstain" and lexical[-1]["answer"] is None
    answered = [r for r in ann if r["decision"] == "answer"]
    assert len(answered) >= 3, [r["decision"] for r in ann]
    feedback = [{"request_id": answered[0]["request_id"], "correct": True},
                {"request_id": answered[1]["request_id"], "correct": False},
                {"request_id": answered[2]["request_id"], "faq_id": answered[2]["answer"]["faq_id"]},
                {"request_id": lexical[-1]["request_id"], "correct": False}]  # on no answer: counted, not judged
    for body in feedback:
        r = client.post("/feedback", json=body)
        assert r.status_code == 200, r.text
    assert client.post("/kbs/shop/match", json={"query": "may I bring my dog", "arm": "lexical"}).status_code == 200
    assert app.state.service.query_log.flush()
    app.state.resident_kbs.get("shop").query_log.flush()

    r = page.get(PAGE + "?window=24h")
    assert r.status_code == 200, r.text
    assert_headers(r)
    html = r.text
    assert re.findall(r'<tr data-arm="([^"]+)">', html) == ["ann", "lexical"], "most requests first; shop's is not here"
    assert (cell(html, "ann", "requests"), cell(html, "lexical", "requests")) == ("6", "4")
    assert cell(html, "ann", "answer-rate") == f"{100 * len(answered) / 6:.1f}%"
    lexical_answered = sum(r["decision"] == "answer" for r in lexical)
    assert cell(html, "lexical", "answer-rate") == f"{100 * lexical_answered / 4:.1f}%"
    assert cell(html, "lexical", "abstain-rate") == f"{100 * sum(r['decision'] == 'abstain' for r in lexical) / 4:.1f}%"
    assert (cell(html, "ann", "feedback"), cell(html, "lexical", "feedback")) == ("3", "1")
    assert cell(html, "ann", "accuracy") == "66.7%", "right, wrong, and a faq_id naming the answer: 2 of 3"
    assert cell(html, "lexical", "accuracy") == "–", "feedback on no answer judges nothing"
    # repeated questions come from the query cache in well under 0.1 ms, so only p95 is sure to show a time
    assert float(cell(html, "ann", "p95")) > 0 and float(cell(html, "ann", "p95")) >= float(cell(html, "ann", "p50"))
    for key in ("answer-rate", "abstain-rate", "accuracy", "latency-p50"):
        chart = re.search(rf'<figure class="chart" id="chart-{key}">(.*?)</figure>', html, re.S).group(1)
        assert '<svg viewBox="0 0 600 220" role="img"' in chart and "<title" in chart and "<desc" in chart
        assert re.findall(r'<g class="series arm-(\d)" data-arm="([^"]+)">', chart) == [("0", "ann"), ("1", "lexical")]
        assert "<details>" in chart and chart.count("<tr><th scope=\"row\">") == 24
    assert "style=" not in html and not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert 'aria-current="page"' in html and 'id="window-24h" class="current"' in html
    assert "No /match requests" not in html

    shop = page.get("/console/kbs/shop/traffic?window=7d")
    assert re.findall(r'<tr data-arm="([^"]+)">', shop.text) == ["lexical"]
    assert cell(shop.text, "lexical", "requests") == "1"


@pytest.mark.parametrize("window", ["1h", "", "7D", "24h%00", "30d "])
def test_a_bad_window_is_a_422_naming_the_field(served, window):
    client, _ = sign_in(served, ROOT)
    r = client.get(PAGE + "?window=" + window.replace(" ", "%20"))
    assert r.status_code == 422 and 'id="problem"' in r.text
    assert "window: must be one of 24h, 7d, 30d" in r.text


def test_a_kb_token_cannot_see_another_kbs_traffic(served):
    client, _ = sign_in(served, served[2]["shop"])
    for kb in ("default", "nope"):
        r = client.get(f"/console/kbs/{kb}/traffic")
        assert r.status_code == 403 and "another KB" in r.text and "data-arm" not in r.text, kb
    assert client.get("/console/kbs/shop/traffic").status_code == 200
    anonymous = TestClient(served[0])
    r = anonymous.get("/console/kbs/shop/traffic", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/login"


def test_the_page_says_when_it_was_capped_and_what_rows_without_a_decision_count_as():
    from datetime import datetime, timedelta, timezone

    from app.api.console.pages import templates
    from app.traffic import charts, summarize

    now = datetime(2026, 11, 26, 9, 30, tzinfo=timezone.utc)
    rows = [{"created_at": now - timedelta(hours=h), "arm": "ann", "faq_id": None, "decision": None,
             "latency_ms": 3.0, "feedback_correct": None, "feedback_faq_id": None} for h in (1, 2)]
    traffic = summarize(rows, "24h", now, capped=True)
    html = templates.get_template("traffic.html").render(
        session=None, csrf="", flash=None, kb="default", traffic=traffic, windows=["24h", "7d", "30d"],
        charts=charts(traffic), logging=False)
    assert re.search(r'id="capped">[^<]*only the newest\s+2, from 2026-11-26 07:30 UTC on', html)
    assert re.search(r'id="undecided">2 requests\s+logged before decisions were kept named no FAQ: they are counted '
                     r'as abstain', html)
    assert 'id="log-off"' in html
    assert re.search(r'<td class="abstain-rate">100.0%</td>', html)
    assert 'class="empty"' in re.search(r'id="chart-accuracy">.*?</figure>', html, re.S).group(0)
