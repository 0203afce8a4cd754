"""The match path's steps one at a time (app/match/): each run on a real batch (MiniLM, a built Annoy index,
a KB with follow-up prompts, a context-only FAQ and tags), checked on what it writes; the chain's order
against what each step reads and writes; the query cache's check -> run -> merge."""
from __future__ import annotations

import pytest

from app.match.assembly import build_pipeline
from app.match import MatchQuery, NoStagesError, cache
from app.match.batch import Batch, Item
from app.match.chain import STEPS, rank
from app.match.request import MatchResult
from app.conversation.turns import Turn
from index.artifacts import BuildRegistry
from index.retriever import Retriever
from kb.filters import FaqFilter
from kb.records import KbRecord
from tests.helpers.api import build, make_settings, make_store

FAQS = [
    KbRecord("reset_password", "How do I reset my password?", "Use the 'Forgot password' link.", ["account"],
             follow_ups=[{"faq_id": "security_code", "text": "I did not get the code"}]),
    KbRecord("reset_password", "I forgot my password"),
    KbRecord("security_code", "Where is my security code?", "The code is sent by text message.", ["account"],
             context_only=True),
    KbRecord("security_code", "The reset code never arrived"),
    KbRecord("shipping_time", "How long does shipping take?", "3 to 5 business days.", ["orders"]),
    KbRecord("shipping_time", "When will my package arrive?"),
    KbRecord("refund", "How do I get a refund?", "Refunds take 10 days.", ["orders"]),
    KbRecord("refund", "I want my money back"),
    KbRecord("opening_hours", "What are your opening hours?", "9:00-18:00, Monday to Saturday.", []),
    KbRecord("opening_hours", "When is the store open?"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("steps"))
    store = make_store(settings, FAQS)
    build(store, encoder, settings)
    retriever = Retriever.load(BuildRegistry(settings.index_dir).current_dir()).with_kb(store.snapshot(), encoder)
    return settings, retriever


def batch_of(pipeline, retriever, *requests: MatchQuery) -> Batch:
    vecs = pipeline.encode([r.query for r in requests])
    return Batch(pipeline, retriever, [Item(r, vecs[i], retriever) for i, r in enumerate(requests)], vecs)


def run_until(batch: Batch, name: str) -> Batch:
    """The steps before `name` and `name` itself."""
    for step in STEPS:
        step.run(batch)
        if step.name == name:
            return batch
    raise AssertionError(name)


def test_each_step_reads_only_what_the_request_or_an_earlier_step_gives():
    known = {"request", "vec", "retriever", "batch.vecs", "batch.pipeline"}
    assert [s.name for s in STEPS] == ["query", "candidates", "rerank", "conversation", "decision", "answers"]
    for step in STEPS:
        missing = set(step.reads) - known
        assert not missing, f"{step.name} reads {missing} before any step writes it"
        known |= set(step.writes)
    assert "result" in known


def test_query_step_selects_the_filter_and_plans_the_turn(served, encoder):
    settings, retriever = served
    pipeline = build_pipeline(settings, encoder, retriever)
    batch = run_until(batch_of(pipeline, retriever,
                               MatchQuery("refund please", filter=FaqFilter(all_of=(("tag", "orders", ""),))),
                               MatchQuery("I did not get the code", turn=Turn("reset_password")),
                               MatchQuery("and the code?", turn=Turn("no-such-faq"))), "query")
    filtered, clicked, unknown = batch.items
    assert set(filtered.selection.faq_ids) == {"shipping_time", "refund"}
    assert (clicked.plan.applied, clicked.plan.clicked) == ("follow_up", "security_code")
    assert unknown.plan.applied == "unknown_previous" and unknown.selection is None


def test_candidates_keep_to_the_filter_and_open_context_only_faqs_only_after_their_prompt(served, encoder):
    settings, retriever = served
    pipeline = build_pipeline(settings, encoder, retriever)
    batch = run_until(batch_of(pipeline, retriever,
                               MatchQuery("the reset code never arrived"),
                               MatchQuery("the reset code never arrived", turn=Turn("reset_password")),
                               MatchQuery("money back", filter=FaqFilter(all_of=(("tag", "orders", ""),)))),
                      "candidates")
    alone, after_prompt, filtered = batch.items
    assert "security_code" not in {m.faq_id for m in alone.matches}
    assert after_prompt.matches[0].faq_id == "security_code"
    assert {m.faq_id for m in filtered.matches} <= {"shipping_time", "refund"}
    for item in batch.items:
        scores = [m.score for m in item.matches]
        assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    assert batch.served is pipeline.served(retriever) and batch.decided


def test_rerank_step_leaves_plain_arms_alone_and_refuses_without_stages(served, encoder):
    settings, retriever = served
    pipeline = build_pipeline(settings, encoder, retriever)
    batch = run_until(batch_of(pipeline, retriever, MatchQuery("refund")), "candidates")
    before = list(batch.items[0].matches)
    STEPS[2].run(batch)
    assert batch.items[0].matches == before
    staged = run_until(batch_of(pipeline, retriever, MatchQuery("refund", arm="ann+rerank")), "candidates")
    with pytest.raises(NoStagesError):
        STEPS[2].run(staged)


def test_conversation_step_recognises_small_talk_only_when_the_kb_answers_it(served, encoder):
    settings, retriever = served
    talkative = build_pipeline(settings, encoder, retriever)
    batch = run_until(batch_of(talkative, retriever, MatchQuery("hi there!"), MatchQuery("refund")), "conversation")
    assert batch.items[0].reply is not None and batch.items[0].reply.kind == "greeting"
    assert batch.items[1].reply is None
    quiet = build_pipeline(settings.model_copy(update={"small_talk": False}), encoder, retriever)
    assert run_until(batch_of(quiet, retriever, MatchQuery("hi there!")), "conversation").items[0].reply is None


def test_decision_step_scores_with_the_model_and_decides_on_the_threshold(served, encoder):
    settings, retriever = served
    pipeline = build_pipeline(settings, encoder, retriever)
    batch = run_until(batch_of(pipeline, retriever, MatchQuery("how do I reset my password", 3, 0.5),
                               MatchQuery("how do I reset my password", 3, 1.0)), "decision")
    sure, never = batch.items
    assert batch.ref is not None and len(sure.matches) <= 3
    assert sure.decision.kind == "answer" and sure.matches[0].faq_id == "reset_password"
    assert sure.decision.threshold == 0.5 and never.decision.kind != "answer"
    curve = build_pipeline(settings.model_copy(update={"scoring": "calibration"}), encoder, retriever)
    plain = run_until(batch_of(curve, retriever, MatchQuery("how do I reset my password", 3, 0.5)), "decision")
    assert plain.ref is None and plain.items[0].table is None and plain.items[0].decision.expected_precision is None


def test_answers_step_answers_a_prompt_sent_back_with_certainty_and_small_talk_in_the_kbs_voice(served, encoder):
    settings, retriever = served
    pipeline = build_pipeline(settings, encoder, retriever)
    batch = run_until(batch_of(pipeline, retriever, MatchQuery("I did not get the code", turn=Turn("reset_password")),
                               MatchQuery("hello!")), "answers")
    clicked, hello = (item.result for item in batch.items)
    assert clicked.decision == "answer" and clicked.answer.faq_id == "security_code" and clicked.answer.score == 1.0
    assert clicked.context["applied"] == "follow_up" and clicked.expected_precision is None
    assert hello.decision == "chitchat" and hello.answer is None and hello.small_talk["kind"] == "greeting"


def test_the_chain_times_each_part_and_rerank_only_for_rerank_arms(served, encoder):
    settings, retriever = served
    pipeline = build_pipeline(settings, encoder, retriever)
    requests = [MatchQuery("refund")]
    [result] = rank(pipeline, requests, pipeline.encode(["refund"]), retriever, encode_ms=1.5)
    assert list(result.timings_ms) == ["encode", "retrieve", "rerank", "decide", "total"]
    assert result.timings_ms["encode"] == 1.5 and result.timings_ms["rerank"] == 0.0
    assert result.timings_ms["total"] >= result.timings_ms["retrieve"] > 0


def test_the_cache_is_checked_then_the_missing_run_then_merged_in_order(served, encoder):
    settings, retriever = served
    pipeline = build_pipeline(settings, encoder, retriever, cache_size=16)
    first = [MatchQuery("refund"), MatchQuery("opening hours")]
    results = pipeline.match_many(first)
    requests = [MatchQuery("REFUND "), MatchQuery("where is my parcel"), MatchQuery("opening   hours")]
    found = cache.cached(pipeline, requests, retriever)
    todo = cache.missing(found)
    assert todo == [1] and found[0].cached and found[0].query == "REFUND " and found[2].matches == results[1].matches
    fresh = MatchResult("where is my parcel", [], None, "v")
    merged = cache.merge(found, todo, [fresh])
    assert merged[1] is fresh and [r.query for r in merged] == ["REFUND ", "where is my parcel", "opening   hours"]
