"""Small talk on /match: "hi" and "thanks" get `decision: "chitchat"` with the kind and the KB's reply in its
persona (or its own answers), a question that opens with a greeting is still matched, a KB can turn small
talk off, and small talk is logged as such, counted apart on the traffic page and kept out of the
unanswered-questions queue."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from app.conversation.small_talk.answers import load_answers
from app.curation.mining import mine_report
from app.traffic import summarize
from tests.helpers.api import kb_records, serving

TOKEN = "s3cret-admin-token-of-32-characters"
SHIPPED = load_answers()["personas"]


@pytest.fixture
def served(tmp_path, encoder):  # noqa: F811
    with serving(tmp_path, encoder, kb_records(), TOKEN) as (client, store, settings):
        yield client, store


def ask(client, query, path="/match"):
    r = client.post(path, json={"query": query})
    assert r.status_code == 200, r.text
    return r.json()


def test_small_talk_is_answered_as_such_and_questions_are_not(served):
    client, _ = served
    for text, kind in [("hi there!", "greeting"), ("thanks a lot", "thanks"), ("are you a bot?", "bot_identity"),
                       ("bye for now", "goodbye")]:
        body = ask(client, text)
        assert body["decision"] == "chitchat", (text, body["decision"])
        assert body["chitchat"]["kind"] == kind
        assert body["chitchat"]["answer"] in SHIPPED["professional"][kind]
        assert body["answer"] is None and body["options"] == []
    for text in ["hi, how do I reset my password?", "thanks, but when will my package arrive?", "I want my money back"]:
        body = ask(client, text)
        assert body["decision"] != "chitchat" and body["chitchat"] is None, text
    assert ask(client, "hello, how can I cancel my order")["matches"][0]["faq_id"] == "cancel_order"
    batch = client.post("/match/batch", json={"queries": [{"query": "thank you!"}, {"query": "how long does shipping take"}]})
    assert [r["decision"] == "chitchat" for r in batch.json()["results"]] == [True, False]


@pytest.mark.parametrize("persona", ["professional", "friendly", "witty"])
def test_the_deployment_sets_the_persona_its_own_answers_or_no_small_talk(tmp_path, encoder, persona):  # noqa: F811
    own = {"goodbye": ["See you soon, from all of us."]}
    with serving(tmp_path, encoder, kb_records(), TOKEN, small_talk_persona=persona, small_talk_answers=own) as (client, *_):
        assert ask(client, "hey there")["chitchat"]["answer"] in SHIPPED[persona]["greeting"]
        assert ask(client, "bye now")["chitchat"]["answer"] == "See you soon, from all of us."
    with serving(tmp_path / "off", encoder, kb_records(), TOKEN, small_talk=False) as (client, *_):
        assert ask(client, "hey there")["decision"] != "chitchat"


def test_a_kb_picks_a_persona_edits_answers_and_can_turn_small_talk_off(tmp_path, encoder):  # noqa: F811
    from fastapi.testclient import TestClient

    from app.api.main import create_app

    with serving(tmp_path, encoder, kb_records(), TOKEN) as (_, store, settings):
        pass
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        store.catalog.set_settings("default", {"small_talk_persona": "witty"})
        app.state.housekeeping.poll_all()
        assert ask(client, "hello")["chitchat"]["answer"] in SHIPPED["witty"]["greeting"]
        store.catalog.set_settings("default", {"small_talk_persona": "friendly",
                                               "small_talk_answers": {"thanks": ["Any time! Team Shop"]}})
        app.state.housekeeping.poll_all()
        assert ask(client, "thank you so much")["chitchat"]["answer"] == "Any time! Team Shop"
        assert ask(client, "good morning")["chitchat"]["answer"] in SHIPPED["friendly"]["greeting"]
        store.catalog.set_settings("default", {"small_talk": False})
        app.state.housekeeping.poll_all()
        body = ask(client, "hello")
        assert body["decision"] in ("answer", "clarify", "abstain") and body["chitchat"] is None


def test_small_talk_is_logged_counted_apart_and_never_unanswered(served):
    client, store = served
    for text in ["hi", "hi", "thanks!", "what is the weather on mars", "what is the weather on mars"]:
        ask(client, text)
    client.app.state.service.query_log.flush()
    rows = store.query_log.traffic_rows(datetime.now(timezone.utc) - timedelta(hours=1)).rows
    decisions = sorted(r["decision"] for r in rows)
    assert decisions.count("chitchat") == 3
    totals = summarize(rows, "24h", datetime.now(timezone.utc)).arms[0].total
    assert totals.small_talk == 3 and totals.abstained + totals.answered + totals.clarified == 2
    clusters = mine_report(store, min_cluster=2)["clusters"]
    queries = {q["query"] for c in clusters for q in c["queries"]}
    assert "hi" not in queries and "what is the weather on mars" in queries
    metrics = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert 'faq_kb_match_queries_total{decision="chitchat",kb="default"} 3.0' in metrics
