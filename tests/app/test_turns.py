"""app/conversation/turns.py on its own: what the previous turn changes about a query (a prompt sent back, the FAQs the
previous one prompts to, a previous FAQ the KB no longer has), read from a real KB snapshot."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.store import KbRecord
from app.conversation.turns import NO_TURN, Turn, TurnPlan, fold_prompt, plan_turn
from tests.helpers.api import make_settings, make_store

COST_PROMPT = "How much does shipping cost?"
TRACK_PROMPT = "Track my order"


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    """What a retriever holds of the KB (its `answers` and `details`, as `Retriever.with_kb` copies them from a
    snapshot): plan_turn reads nothing else, so no index is needed."""
    follow_ups = [{"faq_id": "shipping_cost", "text": COST_PROMPT}, {"faq_id": "track_order", "text": TRACK_PROMPT}]
    records = [
        KbRecord("shipping_time", "How long does shipping take?", "3 to 5 days.", [], follow_ups=follow_ups),
        KbRecord("shipping_cost", "What does delivery cost?", "Free over 50 euros.", [], context_only=True),
        KbRecord("track_order", "Where is my parcel?", "Use the link in your email.", []),
        KbRecord("refund", "Can I get my money back?", "Within 30 days.", []),
    ]
    store = make_store(make_settings(tmp_path_factory.mktemp("turns")), records)
    snapshot = store.snapshot()
    store.close()
    return SimpleNamespace(answers=dict(snapshot.faqs), details=dict(snapshot.details))


def test_no_turn_or_no_previous_faq_changes_nothing(kb):
    assert plan_turn(None, "how long does shipping take", kb) is NO_TURN
    # a previous query alone (the client lost the FAQ id) is no context either
    assert plan_turn(Turn(previous_query="how long does shipping take"), "and the cost?", kb) is NO_TURN
    assert NO_TURN.report() == {"applied": "none", "note": None} and NO_TURN.prompted == frozenset()


def test_a_prompt_sent_back_is_its_faq_whatever_its_case_spacing_and_end_punctuation(kb):
    plan = plan_turn(Turn("shipping_time", "how long does shipping take"), "  how much   does SHIPPING cost ", kb)
    assert plan.applied == "follow_up"
    assert plan.clicked == "shipping_cost" and plan.prompt == COST_PROMPT
    assert plan.prompted == {"shipping_cost", "track_order"}
    assert plan.report() == {"applied": "follow_up", "note": f"the prompt {COST_PROMPT!r} of 'shipping_time'"}
    # the second prompt is found too, not only the first
    assert plan_turn(Turn("shipping_time"), "track my order!", kb).clicked == "track_order"


def test_another_query_after_an_faq_with_prompts_makes_them_candidates_without_choosing_one(kb):
    plan = plan_turn(Turn("shipping_time"), "and how much is it to send abroad", kb)
    assert plan == TurnPlan("prompted", frozenset({"shipping_cost", "track_order"}))
    assert plan.clicked is None and plan.report() == {"applied": "prompted", "note": None}


def test_a_previous_faq_without_prompts_prompts_to_nothing(kb):
    plan = plan_turn(Turn("refund", "can I get my money back"), "how long does it take", kb)
    assert plan.applied == "prompted" and plan.prompted == frozenset() and plan.clicked is None


def test_an_unknown_previous_faq_is_reported_and_the_query_matched_without_context(kb):
    plan = plan_turn(Turn("gone_faq", "old question"), COST_PROMPT, kb)
    assert plan.applied == "unknown_previous" and plan.prompted == frozenset() and plan.clicked is None
    assert plan.report()["note"] == ("previous_faq_id 'gone_faq' is not an FAQ of this KB (deleted?): "
                                     "matched without context")
    # a retriever without a KB snapshot yet (answers not loaded) knows no FAQ at all
    assert plan_turn(Turn("shipping_time"), COST_PROMPT, SimpleNamespace()).applied == "unknown_previous"


def test_a_prompt_whose_faq_is_no_longer_answered_is_not_a_click(kb):
    """The retriever's answers and details are one snapshot, but a prompt's target can still be missing from
    its answers (e.g. the FAQ was removed from what this retriever serves): its text is then an ordinary query."""
    answers = {k: v for k, v in kb.answers.items() if k != "shipping_cost"}
    plan = plan_turn(Turn("shipping_time"), COST_PROMPT, SimpleNamespace(answers=answers, details=kb.details))
    assert plan.applied == "prompted" and plan.clicked is None
    assert "shipping_cost" in plan.prompted  # the prompt's FAQ stays a candidate in its own right


def test_fold_prompt_drops_case_spacing_and_trailing_punctuation_only():
    assert fold_prompt("  How much\tdoes  SHIPPING cost?! ") == "how much does shipping cost"
    assert fold_prompt("Track my order...") == "track my order"
    assert fold_prompt("Is it 5.99 or 6?") == "is it 5.99 or 6"  # inner punctuation stays
    assert fold_prompt("Straße?") == fold_prompt("STRASSE") == "strasse"  # casefold, not lower
    assert fold_prompt("?!") == ""


def test_a_turns_key_tells_turns_apart():
    """The key is what a cached result is stored under: two requests with other context must not share one."""
    assert Turn("a", "q").key() == Turn("a", "q").key() == ("a", "q")
    assert len({Turn("a", "q").key(), Turn("a", "r").key(), Turn("b", "q").key(), Turn().key()}) == 4
