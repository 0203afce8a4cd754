"""app/api/service.py called directly, as the routes and the console call it: matching through the KB's batcher
(answers, the client's words echoed and logged, metrics, the trace), the language refusal, answers in the
query's language, feedback, refreshing after a write and the FAQ as the API shows it. One served app (MiniLM,
the API tests' KB) for the module; its event loop runs the coroutines."""
from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from app.api import service
from app.api.errors import problem_of
from app.api.main import create_app
from app.api.schemas import MatchRequest
from app.match import NoStagesError
from app.settings import Settings
from app.store import FaqNotFound, FeedbackAlreadyRecorded
from models.language import Detection
from tests.helpers.api import build, kb_records, make_settings, make_store

RESET_ES = "Usa el enlace «Olvidé mi contraseña» en la página de inicio de sesión."


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    """(client, the default KB's state): reset_password has a Spanish answer; "parcel" is the KB's "package"."""
    records = [dataclasses.replace(r, answers={"es": RESET_ES}) if r.faq_id == "reset_password" and r.answer else r
               for r in kb_records()]
    settings = make_settings(tmp_path_factory.mktemp("service"), synonyms=[["package", "parcel"]])
    store = make_store(settings, records)
    build(store, encoder, settings)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        yield client, client.app.state.service


def match(served, *queries: dict, trace: service.MatchTrace | None = None):
    """service.match on the app's own event loop, where its batcher runs."""
    client, state = served
    return client.portal.call(service.match, state, [MatchRequest(**q) for q in queries], trace)


def metric(state, name: str, **labels) -> float:
    return state.metrics.registry.get_sample_value(name, labels) or 0.0


def test_match_answers_each_query_in_order_from_the_served_index(served):
    state = served[1]
    before = metric(state, "faq_match_queries_total")
    password, delivery = match(served, {"query": "I forgot my password"},
                               {"query": "how long does shipping take", "top_k": 2})
    assert password.answer.faq_id == "reset_password" and password.decision == "answer"
    assert password.answer.answer == "Use the 'Forgot password' link on the sign-in page."  # English: the main one
    assert delivery.matches[0].faq_id == "shipping_time" and len(delivery.matches) == 2
    assert password.index_version == delivery.index_version == state.retriever.version
    assert password.arm == "ann" and password.language == "en" and password.request_id != delivery.request_id
    assert metric(state, "faq_match_queries_total") == before + 2


def test_the_clients_words_are_echoed_and_logged_whatever_the_synonyms_made_of_them(served):
    state = served[1]
    asked = "when does my parcel get here"
    trace = service.MatchTrace()
    [response] = match(served, {"query": asked}, trace=trace)
    assert response.query == asked and response.matches[0].faq_id == "shipping_time"
    # the trace holds what was ranked: the rewritten query, on the retriever that ranked it
    assert trace.retriever is state.retriever and len(trace.results) == 1
    assert trace.results[0].query == "when does my package get here"
    assert [m.faq_id for m in trace.results[0].matches] == [m.faq_id for m in response.matches]
    state.query_log.flush()
    [row] = [r for r in state.store.read_query_log() if r["query"] == asked]
    assert row["faq_id"] == response.answer.faq_id and row["decision"] == response.decision
    assert row["score"] == pytest.approx(response.matches[0].score)


def test_an_arm_that_needs_a_re_ranker_is_refused_before_anything_is_queued(served):
    state = served[1]
    before = metric(state, "faq_match_queries_total")
    with pytest.raises(NoStagesError) as refused:
        match(served, {"query": "I forgot my password"}, {"query": "refund please", "rerank": True})
    assert problem_of(refused.value).status == 409
    assert "FAQ_RERANKER" in str(refused.value) and "(arm 'ann+rerank' needs a re-ranker)" in str(refused.value)
    assert metric(state, "faq_match_queries_total") == before, "not even the first query of the batch ran"


def test_feedback_is_recorded_once_on_a_logged_answer(served):
    state = served[1]
    [response] = match(served, {"query": "how can I close my account for good"})
    call = served[0].portal.call
    assert call(service.record_feedback, state, response.request_id, True, None, None) is True
    assert call(service.record_feedback, state, "no-such-request", True, None, None) is False
    with pytest.raises(FeedbackAlreadyRecorded):
        call(service.record_feedback, state, response.request_id, False, None, None)
    with pytest.raises(FaqNotFound):
        call(service.record_feedback, state, response.request_id, None, "no_such_faq", None)
    state.query_log.flush()
    [row] = [r for r in state.store.read_query_log(with_feedback=True) if r["query"] == response.query]
    assert row["feedback_correct"] is True


def test_arm_of_takes_the_requests_arm_else_the_sticky_split_else_the_default():
    def arm(settings: Settings, **item) -> str:
        return service.arm_of(SimpleNamespace(settings=settings), MatchRequest(query="q", **item))

    plain = Settings(default_arm="lexical")
    assert arm(plain) == "lexical" and arm(plain, rerank=True) == "lexical+rerank"
    assert arm(plain, arm="ann") == "ann" and arm(plain, arm="ann", rerank=True) == "ann+rerank"
    split = Settings(ab_split="ann:1,lexical:1")
    assert arm(split, arm="ann") == "ann", "a request's own arm beats the split"
    by_session = {s: arm(split, session_id=s) for s in (f"session-{i}" for i in range(16))}
    assert set(by_session.values()) == {"ann", "lexical"}
    assert all(arm(split, session_id=s) == a for s, a in by_session.items()), "one arm for a whole session"
    assert {arm(split) for _ in range(64)} == {"ann", "lexical"}, "without a session: drawn per request"


def german(words: int = 9) -> Detection:
    return Detection("de", 0.97, words, scores={"de": 0.97, "en": 0.01})


def test_a_query_clearly_in_none_of_the_kbs_languages_is_not_answered(served):
    [answered] = match(served, {"query": "I forgot my password"})
    assert answered.answer is not None
    refused = service.in_language(answered.model_copy(deep=True), ["en"], german())
    assert (refused.decision, refused.reason, refused.answer, refused.options) == ("abstain", "language", None, [])
    assert refused.language == "de" and refused.matches == answered.matches, "the ranking is still shown"


def test_the_language_refusal_spares_small_talk_short_queries_and_kbs_without_languages(served):
    [answered] = match(served, {"query": "reset my password please"})
    for response, languages, detection in [
        (answered, None, german()),  # the KB answers in any language
        (answered, ["en", "de"], german()),
        (answered, ["en"], german(words=2)),  # too short to judge
        (answered.model_copy(update={"decision": "chitchat"}), ["en"], german()),
    ]:
        kept = service.in_language(response.model_copy(deep=True), languages, detection)
        assert kept.reason is None and kept.decision == response.decision and kept.answer == response.answer
        assert kept.language == "de"


def test_answers_are_given_in_the_querys_language_where_the_faq_has_one(served):
    retriever = served[1].retriever
    main = "Use the 'Forgot password' link on the sign-in page."
    assert service.answer_in(retriever, "reset_password", "es", main) == RESET_ES
    assert service.answer_in(retriever, "reset_password", "de", main) == main  # none in German: the main one
    assert service.answer_in(retriever, "reset_password", None, main) == main
    assert service.answer_in(retriever, "refund", "es", "Refunds...") == "Refunds..."
    assert service.answer_in(SimpleNamespace(), "reset_password", "es", main) == main  # no KB snapshot loaded


def test_refresh_makes_a_write_matchable_now_and_never_fails_the_write(served, caplog):
    state = served[1]
    state.store.create_faq("warranty", "Two years on every product.", ["How long is the warranty on a laptop?"])
    service.refresh(state)
    [response] = match(served, {"query": "what warranty do I get on my laptop"})
    assert response.answer is not None and response.answer.faq_id == "warranty"
    assert state.retriever.kb_revision == state.store.revision()

    class Unrefreshable:
        def refresh_kb(self, reason: str) -> bool:
            raise OSError("database is locked")

    with caplog.at_level(logging.ERROR, logger="app.api.service"):
        service.refresh(Unrefreshable())  # the write succeeded; the poller retries the refresh
    assert "could not refresh the retriever" in caplog.text and "database is locked" in caplog.text


def test_faq_out_shows_a_stored_faq_as_the_api_does(served):
    store = served[1].store
    stored = store.get_faq("reset_password")
    out = service.faq_out(stored)
    assert out.faq_id == "reset_password" and out.answers == {"es": RESET_ES}
    assert out.questions == stored.questions and out.answer == stored.answer and out.updated_at == stored.updated_at
    # a row object (attributes, not a dataclass) is shown the same way
    row = SimpleNamespace(**dataclasses.asdict(stored))
    assert service.faq_out(row) == out
