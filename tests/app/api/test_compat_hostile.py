"""Hostile input on the QnA Maker and Azure routes, each case generated: a userId longer than a session id,
JSON nested past the parser's stack, FAQ ids of non-ASCII digits, small-talk answers that are not storable
text, qnaId lookups past the request's filters and context, and refusals worded in the service's words.
None of them gets a 5xx; every refusal is a 400 in the route's own error shape naming the field."""
from __future__ import annotations

import json
import sys
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings, strategies as st
from sqlalchemy import select

from app.api import compat
from app.api.main import create_app
from app.api.schemas import MAX_SESSION_CHARS
from app.db.models import QueryLog
from kb.formats.base import qna_ids
from tests.helpers.compat import imported_kbs
from tests.helpers.console import csrf_of, sign_in

ADMIN = "compat-hostile-admin-token-0123456789abcdef"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
QNA = "/qnamaker/knowledgebases/{kb}/generateAnswer"
AZURE = "/language/:query-knowledgebases"


def examples(n: int):
    """`n` examples against the module's app, shared by all of them (hypothesis warns about fixtures)."""
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))


#: text a client may send in any string field: NUL and lone surrogates excluded (those are refused)
storable = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
#: any code point, NUL and lone surrogates included (what a JSON string can carry)
any_text = st.text(st.characters(exclude_categories=()), max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | any_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(any_text, children, max_size=3),
    max_leaves=8)
#: pydantic's words, which a client must never see
PYDANTIC_WORDS = ("Input should", "instance of", "Value error", "pydantic", "valid dictionary", "[type=")


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    """(app, store, read keys by KB, client): the Azure fixture as KB `gym`, the QnA Maker one as `bikes`."""
    config, store, keys = imported_kbs(tmp_path_factory.mktemp("compat_hostile"), encoder, ADMIN)
    app = create_app(config, store=store, encoder=encoder)
    with TestClient(app) as client:
        yield app, store, keys, client


def qna(client, body, kb="bikes"):
    # sent ASCII-escaped: a lone surrogate has no UTF-8 form, only a JSON escape
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(QNA.format(kb=kb), content=content,
                       headers={"Authorization": f"EndpointKey {ADMIN}", "Content-Type": "application/json"})


def azure(client, body, project="gym"):
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(AZURE, params={"projectName": project, "deploymentName": "production",
                                      "api-version": "2023-04-01"}, content=content,
                       headers={"Ocp-Apim-Subscription-Key": ADMIN, "Content-Type": "application/json"})


def refusal(response, route: str) -> tuple[str, str]:
    """(target, message) of a 400 in the route's own error shape."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    if route == "qna":
        assert error["code"] == "BadArgument"
        return error.get("target", ""), error["message"]
    assert error["code"] == "InvalidArgument" and response.headers["x-ms-error-code"] == "InvalidArgument"
    return (error.get("details") or [{}])[0].get("target", ""), error["message"].removeprefix("Invalid input. ")


# -- userId -------------------------------------------------------------------------------------------
@given(user_id=st.text(st.characters(), max_size=3 * MAX_SESSION_CHARS))
def test_a_user_id_maps_to_a_session_id_that_fits_and_stays_the_users(user_id):
    session = compat.session_of(user_id)
    if not user_id:
        assert session is None
    elif len(user_id) <= MAX_SESSION_CHARS:
        assert session == user_id
    else:
        assert len(session) <= MAX_SESSION_CHARS and session == compat.session_of(user_id)
        assert session != compat.session_of(user_id[:-1] + ("a" if user_id[-1] != "a" else "b"))


@examples(6)
@given(user_id=st.text(storable, min_size=MAX_SESSION_CHARS + 1, max_size=200))
def test_a_user_id_longer_than_a_session_id_is_answered_under_one_session(served, user_id):
    app, store, _, client = served
    answered = [qna(client, {"question": "how much does a ride cost", "userId": user_id}),
                azure(client, {"question": "can i freeze my membership", "userId": user_id}),
                qna(client, {"question": "where can i park", "userId": user_id})]
    app.state.service.query_log.flush()
    logged = []
    for r in answered:
        assert r.status_code == 200, r.text
        with store.engine.connect() as conn:
            logged.append(conn.execute(select(QueryLog.session_id).where(
                QueryLog.request_id == r.json()["faqMatch"]["requestId"])).scalar_one())
    # one session for all of the user's requests, whichever route: the A/B arm is sticky per session
    assert set(logged) == {compat.session_of(user_id)}


# -- nesting --------------------------------------------------------------------------------------------
@examples(12)
@given(past=st.booleans(), levels=st.integers(0, 4000), opener=st.sampled_from(["[", '{"a":']),
       where=st.sampled_from(["body", "question", "context", "filters", "userId"]))
def test_json_nested_past_the_parsers_stack_is_a_400_in_each_services_shape(served, past, levels, opener, where):
    client = served[3]
    # past the recursion limit whatever the stack holds (hypothesis raises the limit while it runs), or within it
    depth = sys.getrecursionlimit() + levels if past else levels % 900 + 1
    closer = "]" if opener == "[" else "}"
    nested = opener * depth + ("" if opener == "[" else "1") + closer * depth
    body = nested if where == "body" else f'{{"question": "hello", "{where}": {nested}}}'
    for route, call in (("qna", qna), ("azure", azure)):
        r = call(client, body)
        assert r.status_code < 500, r.text
        if past:
            target, message = refusal(r, route)
            assert target == "body" and "nested too deeply" in message and "levels" in message, message


# -- FAQ ids of digits that are not ASCII ---------------------------------------------------------------------
non_ascii_digits = st.text(st.characters(categories=("Nd", "No")).filter(lambda c: c.isdigit() and not c.isascii()),
                           min_size=1, max_size=3)


@examples(4)
@given(faq_id=st.one_of(st.sampled_from(["²", "①", "١٢", "1²"]), non_ascii_digits))
def test_an_faq_id_of_non_ascii_digits_is_served_by_both_routes(served, faq_id):
    app, _, _, client = served
    created = client.post("/kbs/bikes/admin/faqs", headers=ADMIN_HEADERS, json={
        "faq_id": faq_id, "answer": "Scooters are not for hire, only bikes.", "questions": ["Can I rent an e-scooter?"]})
    assert created.status_code == 201, created.text
    try:
        retriever = app.state.resident_kbs.get("bikes").require_retriever()
        qna_id = qna_ids(retriever.answers)[faq_id]
        asked = qna(client, {"question": "Can I rent an e-scooter?"})
        assert asked.status_code == 200 and asked.json()["answers"][0]["id"] == qna_id, asked.text
        looked_up = qna(client, {"qnaId": qna_id}).json()["answers"][0]
        assert looked_up["id"] == qna_id and looked_up["answer"].startswith("Scooters")
        by_azure = azure(client, {"qnaId": qna_id}, project="bikes")
        assert by_azure.status_code == 200 and by_azure.json()["answers"][0]["id"] == qna_id
    finally:
        assert client.delete(f"/kbs/bikes/admin/faqs/{quote(faq_id)}", headers=ADMIN_HEADERS).status_code == 204


def test_a_kb_with_such_ids_exports_to_both_services_from_the_console(served):
    _, _, _, client = served
    for faq_id in ("²", "①"):
        assert client.post("/kbs/bikes/admin/faqs", headers=ADMIN_HEADERS, json={
            "faq_id": faq_id, "answer": f"Answer {faq_id}.", "questions": [f"Question {faq_id}?"]}).status_code == 201
    try:
        page, _ = sign_in(served, ADMIN)
        table = page.get("/console/kbs/bikes/export", params={"format": "qnamaker"})
        assert table.status_code == 200, table.text
        assert "Answer ²." in table.text and "Answer ①." in table.text
        project = page.get("/console/kbs/bikes/export", params={"format": "azure"})
        assert project.status_code == 200, project.text
        ids = [q["id"] for q in project.json()["assets"]["qnas"]]
        assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    finally:
        for faq_id in ("²", "①"):
            client.delete(f"/kbs/bikes/admin/faqs/{quote(faq_id)}", headers=ADMIN_HEADERS)


# -- small-talk answers -------------------------------------------------------------------------------
@examples(5)
@given(before=st.text(st.characters(categories=("L", "N", "P", "Zs")), max_size=20),
       after=st.text(st.characters(categories=("L", "N", "P", "Zs")), max_size=20),
       kind=st.sampled_from(["greeting", "thanks", "help"]))
def test_the_console_refuses_a_small_talk_answer_with_nul_and_small_talk_keeps_answering(served, before, after, kind):
    _, store, _, client = served
    page, _ = sign_in(served, ADMIN)
    stored = store.catalog.settings("bikes")
    form = {"csrf": csrf_of(page.get("/console/kbs/bikes/smalltalk").text), "enabled": "on",
            "persona": "friendly", f"answers_{kind}": f"{before}\x00{after}"}
    r = page.post("/console/kbs/bikes/smalltalk", data=form)
    assert r.status_code == 422 and "NUL" in r.text, r.text[-2000:]
    assert store.catalog.settings("bikes") == stored, "a refused form changes nothing"
    for call in (qna, azure):
        hello = call(client, {"question": "hello there"}, "bikes")
        assert hello.status_code == 200 and hello.json()["faqMatch"]["decision"] == "chitchat", hello.text


# -- qnaId lookups --------------------------------------------------------------------------------------
def _folded(metadata: dict[str, str]) -> set[tuple[str, str]]:
    return {(k.strip().lower(), v.strip().lower()) for k, v in metadata.items()}


def _may_answer(retriever, faq_id: str, previous: str | None, passes) -> bool:
    """The oracle: the FAQ passes the filters, and it is context-only only when the previous FAQ prompts it."""
    details = retriever.details.get(faq_id)
    if not passes(_folded(dict(getattr(details, "metadata", None) or {})), getattr(details, "source", None)):
        return False
    if not getattr(details, "context_only", False):
        return True
    prompts = (getattr(retriever.details.get(previous), "follow_ups", None) or []) if previous else []
    return faq_id in {f["faq_id"] for f in prompts}


PAIRS = [("topic", "riding"), ("topic", "pricing"), ("TOPIC", " Billing "), ("plan", "monthly"), ("channel", "kiosk"),
         ("channel", "app"), ("topic", "membership"), ("site", "all"), ("topic", "nowhere")]


@examples(40)
@given(qna_id=st.integers(1, 13), pairs=st.lists(st.sampled_from(PAIRS), max_size=3),
       operation=st.sampled_from([None, "AND", "OR", "or"]), previous=st.sampled_from([None, 1, 2, 8, 12, 77]))
def test_a_qnamaker_lookup_answers_only_what_its_filters_and_context_allow(served, qna_id, pairs, operation, previous):
    app, _, _, client = served
    body = {"qnaId": qna_id, "strictFilters": [{"name": k, "value": v} for k, v in pairs]}
    if operation:
        body["strictFiltersCompoundOperationType"] = operation
    if previous is not None:
        body["context"] = {"previousQnAId": previous}
    r = qna(client, body)
    assert r.status_code == 200, r.text
    retriever = app.state.resident_kbs.get("bikes").require_retriever()
    wanted = {(k.strip().lower(), v.strip().lower()) for k, v in pairs}

    def passes(meta, _source):
        if not wanted:
            return True
        return bool(wanted & meta) if (operation or "AND").upper() == "OR" else wanted <= meta

    known = str(qna_id) in retriever.answers
    allowed = known and _may_answer(retriever, str(qna_id), str(previous) if previous else None, passes)
    first = r.json()["answers"][0]
    assert first["id"] == (qna_id if allowed else -1), (body, first)
    assert r.json()["faqMatch"]["decision"] == ("answer" if allowed else "abstain")


SOURCES = ["member-handbook.pdf", "https://harbourgym.example/prices", "Editorial", "https://elsewhere.example"]


@examples(40)
@given(qna_id=st.integers(100, 109), pairs=st.lists(st.sampled_from(PAIRS), max_size=2),
       meta_op=st.sampled_from([None, "AND", "OR"]), sources=st.lists(st.sampled_from(SOURCES), max_size=2),
       join=st.sampled_from([None, "AND", "OR"]), previous=st.sampled_from([None, 101, 102, 104]))
def test_an_azure_lookup_answers_only_what_its_filters_and_context_allow(served, qna_id, pairs, meta_op, sources,
                                                                          join, previous):
    app, _, _, client = served
    filters: dict = {}
    if pairs:
        filters["metadataFilter"] = {"metadata": [{"key": k, "value": v} for k, v in pairs],
                                     **({"logicalOperation": meta_op} if meta_op else {})}
    if sources:
        filters["sourceFilter"] = sources
    if join:
        filters["logicalOperation"] = join
    body = {"qnaId": qna_id, "filters": filters, **({"context": {"previousQnaId": previous}} if previous else {})}
    r = azure(client, body)
    assert r.status_code == 200, r.text
    retriever = app.state.resident_kbs.get("gym").require_retriever()
    wanted = {(k.strip().lower(), v.strip().lower()) for k, v in pairs}

    def passes(meta, source):
        parts = []
        if wanted:
            parts.append(bool(wanted & meta) if (meta_op or "AND") == "OR" else wanted <= meta)
        if sources:
            parts.append((source or "").strip() in sources)
        if not parts:
            return True
        return any(parts) if join == "OR" else all(parts)

    known = str(qna_id) in retriever.answers
    allowed = known and _may_answer(retriever, str(qna_id), str(previous) if previous else None, passes)
    assert r.json()["answers"][0]["id"] == (qna_id if allowed else -1), (body, r.json()["answers"][0])


# -- refusals in the service's words ---------------------------------------------------------------------
@pytest.mark.parametrize("body,target,message", [
    ([], "body", "must be a JSON object"),
    ("\"text\"", "body", "must be a JSON object"),
    ({"question": "x", "userId": "u" * 201}, "userId", "must be at most 200 characters"),
    ({"question": "x", "top": 51}, "top", "must be <= 50"),
    ({"question": "x", "top": "many"}, "top", "must be an integer"),
    ({"question": "x\x00"}, "question", "must not contain NUL characters"),
    ({"question": "x", "context": "yesterday"}, "context", "must be a JSON object"),
    ({"question": "x", "rankerType": "Fast"}, "rankerType", "must be one of 'Default' or 'QuestionOnly'"),
])
def test_azure_refusals_name_the_field_and_the_limit(served, body, target, message):
    got_target, got = refusal(azure(served[3], body if isinstance(body, str) else json.dumps(body)), "azure")
    assert (got_target, got) == (target, f"{target}: {message}")


@pytest.mark.parametrize("body,target,message", [
    ([1, 2], "body", "must be a JSON object"),
    ({"question": "x", "userId": "u" * 201}, "userId", "must be at most 200 characters"),
    ({"question": "x", "scoreThreshold": 100.5}, "scoreThreshold", "must be <= 100.0"),
    ({"question": "x", "strictFilters": [{"name": "topic"}]}, "strictFilters.0.value", "field required"),
    ({"question": "x", "strictFilters": [{"name": "t\ud800", "value": "v"}]}, "strictFilters.0.name",
     "must be valid Unicode text (it contains an unpaired surrogate)"),
    ({"question": "x", "strictFiltersCompoundOperationType": "XOR"}, "strictFiltersCompoundOperationType",
     "must be one of 'AND', 'OR', 'and', 'or', 'And' or 'Or'"),
    ({"question": "x", "isTest": "maybe"}, "isTest", "must be true or false"),
])
def test_qnamaker_refusals_name_the_field_and_the_limit(served, body, target, message):
    assert refusal(qna(served[3], body), "qna") == (target, f"{target}: {message}")


@examples(60)
@given(body=st.fixed_dictionaries({}, optional={
    "question": st.one_of(st.text(storable, max_size=20), any_text, json_values),
    "qnaId": st.one_of(st.integers(-5, 200), json_values), "top": json_values, "userId": json_values,
    "scoreThreshold": json_values, "confidenceScoreThreshold": json_values, "strictFilters": json_values,
    "strictFiltersCompoundOperationType": json_values, "filters": json_values, "context": json_values,
    "rankerType": json_values, "isTest": json_values, "answerSpanRequest": json_values}) | json_values)
def test_any_body_is_answered_or_refused_in_words_without_pydantics(served, body):
    for route, call in (("qna", qna), ("azure", azure)):
        r = call(served[3], json.dumps(body))
        assert r.status_code in (200, 400), (route, body, r.status_code, r.text)
        if r.status_code == 400:
            target, message = refusal(r, route)
            assert not any(w in message for w in PYDANTIC_WORDS), (route, body, message)


@pytest.mark.parametrize("route", ["qna", "azure"])
def test_a_body_the_guard_refuses_is_answered_in_the_services_shape(served, route):
    """Too large (413) or not JSON (415): refused before it is read, in the route's own error shape."""
    _, _, _, client = served
    limit = served[0].state.service.settings.max_body_bytes
    send = qna if route == "qna" else azure
    big = send(client, json.dumps({"question": "x" * (limit + 10)}))
    assert big.status_code == 413 and big.json()["error"]["code"] == "PayloadTooLarge"
    assert f"the limit is {limit} bytes" in big.json()["error"]["message"]
    headers = ({"Authorization": f"EndpointKey {ADMIN}"} if route == "qna" else {"Ocp-Apim-Subscription-Key": ADMIN})
    path = QNA.format(kb="bikes") if route == "qna" else AZURE
    params = {} if route == "qna" else {"projectName": "gym", "deploymentName": "production",
                                        "api-version": "2023-04-01"}
    plain = client.post(path, params=params, content=b"how do I fix a puncture",
                        headers={**headers, "Content-Type": "text/plain"})
    assert plain.status_code == 415 and plain.json()["error"]["code"] == "UnsupportedMediaType"
    if route == "azure":
        assert plain.headers["x-ms-error-code"] == "UnsupportedMediaType"


@pytest.mark.parametrize("bad", ["hi \x00 there", "hi \ud800 there"])
def test_a_kb_whose_stored_settings_this_version_refuses_is_a_503_naming_the_fix(served, bad):
    """Stored before the storable-text rule (or written by hand): every route to the KB says what to unset."""
    _, store, _, client = served
    name = "broken-nul" if "\x00" in bad else "broken-surrogate"
    store.catalog.create(name, {"small_talk_answers": {"greeting": [bad]}})
    fix = f"faq kb settings --kb {name} --unset KEY"
    r = client.post(f"/kbs/{name}/match", json={"query": "hello"}, headers=ADMIN_HEADERS)
    assert r.status_code == 503 and "small_talk_answers" in r.json()["error"] and fix in r.json()["error"]
    q = qna(client, {"question": "hello"}, kb=name)
    assert q.status_code == 503 and q.json()["error"]["code"] == "ServiceUnavailable" and fix in q.text
    a = azure(client, {"question": "hello"}, project=name)
    assert a.status_code == 503 and a.json()["error"]["code"] == "ServiceUnavailable" and fix in a.text
