"""`context` on /match: a follow-up prompt sent back answers its FAQ, a context-only FAQ is a candidate only
after an FAQ that prompts to it, an unknown previous FAQ (deleted mid-conversation) is matched without
context and said so, and a malformed context is a 422 naming the field."""
from __future__ import annotations

import pytest

from app.store import KbRecord
from tests.helpers.api import KB, serving

TOKEN = "s3cret-admin-token-of-32-characters"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROMPT = "How long does the refund take?"


def records() -> list[KbRecord]:
    out = []
    for faq_id, (answer, questions) in KB.items():
        for i, q in enumerate(questions):
            follow = [{"faq_id": "refund_timing", "text": PROMPT}] if faq_id == "refund" and i == 0 else None
            out.append(KbRecord(faq_id, q, answer if i == 0 else None, [] if i == 0 else None, follow_ups=follow))
    out.append(KbRecord("refund_timing", "How many days until the refund reaches my card?",
                        "Refunds reach your card 5 to 10 working days after we receive the parcel.", [],
                        context_only=True))
    return out


@pytest.fixture
def served(tmp_path, encoder):  # noqa: F811
    with serving(tmp_path, encoder, records(), TOKEN) as (client, store, settings):
        yield client, store


def ask(client, query, **context):
    body = {"query": query, "top_k": 10, "threshold": 0.0}
    if context:
        body["context"] = context
    r = client.post("/match", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_prompt_sent_back_answers_its_faq_with_certainty(served):
    client, _ = served
    body = ask(client, "  how long does the REFUND take ", previous_faq_id="refund")
    assert body["decision"] == "answer" and body["answer"]["faq_id"] == "refund_timing"
    assert body["answer"]["score"] == 1.0 and body["matches"][0]["question"] == PROMPT
    assert body["context"]["applied"] == "follow_up" and "refund" in body["context"]["note"]
    first = ask(client, "I want my money back")
    assert first["answer"]["follow_ups"] == [{"faq_id": "refund_timing", "text": PROMPT}]


def test_a_context_only_faq_needs_the_faq_that_prompts_to_it(served):
    client, _ = served
    for query in ("How many days until the refund reaches my card?", PROMPT, "refund days card"):
        alone = ask(client, query)
        assert "refund_timing" not in [m["faq_id"] for m in alone["matches"]] and alone["context"]["applied"] == "none"
        elsewhere = ask(client, query, previous_faq_id="shipping_time")
        assert "refund_timing" not in [m["faq_id"] for m in elsewhere["matches"]]
        assert elsewhere["context"]["applied"] == "prompted"
    after = ask(client, "How many days until the refund reaches my card?", previous_faq_id="refund")
    assert after["matches"][0]["faq_id"] == "refund_timing" and after["context"]["applied"] == "prompted"


def test_an_unknown_previous_faq_is_matched_without_context_and_said_so(served):
    client, _ = served
    body = ask(client, PROMPT, previous_faq_id="no_such_faq", previous_query="refunds?")
    assert body["context"]["applied"] == "unknown_previous" and "no_such_faq" in body["context"]["note"]
    assert "refund_timing" not in [m["faq_id"] for m in body["matches"]]
    assert client.delete("/admin/faqs/refund", headers=AUTH).status_code == 204  # deleted mid-conversation
    body = ask(client, PROMPT, previous_faq_id="refund")
    assert body["context"]["applied"] == "unknown_previous"
    assert "refund_timing" not in [m["faq_id"] for m in body["matches"]]


def test_the_query_cache_tells_contexts_apart(served):
    client, _ = served
    assert ask(client, PROMPT)["context"]["applied"] == "none"
    assert ask(client, PROMPT, previous_faq_id="refund")["answer"]["faq_id"] == "refund_timing"
    again = ask(client, PROMPT)
    assert again["context"]["applied"] == "none" and "refund_timing" not in [m["faq_id"] for m in again["matches"]]


@pytest.mark.parametrize("context, field", [
    ({"previous_faq": "refund"}, "context.previous_faq"),
    ("refund", "context"),
    ({"previous_faq_id": ""}, "context.previous_faq_id"),
    ({"previous_faq_id": 7}, "context.previous_faq_id"),
    ({"previous_query": "q" * 1001}, "context.previous_query"),
    ({"previous_faq_id": "a\x00b"}, "context.previous_faq_id"),
])
def test_a_malformed_context_is_a_422_naming_the_field(served, context, field):
    client, store = served
    before = store.revision()
    r = client.post("/match", json={"query": "refund?", "context": context})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == field, r.text
    r = client.post("/match/batch", json={"queries": [{"query": "refund?", "context": context}]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "queries[0]." + field, r.text
    assert store.revision() == before


def test_an_elliptical_turn_is_scored_with_the_previous_faq_and_a_new_question_on_its_own(served):
    client, _ = served
    alone = ask(client, "how long does it take?")
    turn = ask(client, "how long does it take?", previous_faq_id="refund", previous_query="I want my money back")
    assert turn["context"]["applied"] == "prompted" and "as evidence" in turn["context"]["note"]
    assert turn["expected_precision"] is None  # the build's table describes queries alone
    ids = [m["faq_id"] for m in turn["matches"]]
    assert "refund" in ids and "refund" not in [m["faq_id"] for m in alone["matches"][:1]]
    switch = ask(client, "How do I change my email address?", previous_faq_id="refund")
    assert switch["matches"][0]["faq_id"] == "change_email" and switch["decision"] == "answer"
    assert sum(m["score"] for m in turn["matches"]) <= 1.0 + 1e-6
