"""Bad input never reaches a 500: each case gets a clear 4xx naming the field and the limit, and
changes nothing (no query-log row). Includes a hypothesis fuzz of the /match body and the 503
before any index is built."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from sqlalchemy import func, select

from app.api.main import create_app
from app.api.schemas import MAX_BATCH, MAX_QUERY_CHARS, MAX_TOP_K
from app.db.models import QueryLog
# shared helpers and the session-wide MiniLM fixture live in the contract tests' module
from tests.helpers.api import build, make_settings, make_store

MAX_BODY = 4096


@pytest.fixture(scope="module")
def service(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("bad_input"), max_body_bytes=MAX_BODY)
    store = make_store(settings)
    build(store, encoder, settings)
    # raise_server_exceptions: a 500 would make the test fail loudly with the server traceback
    with TestClient(create_app(settings, store=store, encoder=encoder), raise_server_exceptions=True) as client:
        yield client, store


def logged_rows(client: TestClient, store) -> int:
    client.app.state.service.query_log.flush()
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(QueryLog)).scalar()


def fields(response) -> dict[str, str]:
    return {d["field"]: d["message"] for d in response.json().get("detail") or []}


BAD_MATCH_BODIES = [
    ({"query": ""}, "query", "must not be empty"),
    ({"query": "   \t\n "}, "query", "must not be empty or whitespace only"),
    ({"query": "x" * (MAX_QUERY_CHARS + 1)}, "query", f"must be at most {MAX_QUERY_CHARS} characters"),
    ({}, "query", "field required"),
    ({"query": 42}, "query", "must be a string"),
    ({"query": None}, "query", "must be a string"),
    ({"query": ["a"]}, "query", "must be a string"),
    ({"query": "ok", "top_k": 0}, "top_k", "must be >= 1"),
    ({"query": "ok", "top_k": MAX_TOP_K + 1}, "top_k", f"must be <= {MAX_TOP_K}"),
    ({"query": "ok", "top_k": -3}, "top_k", "must be >= 1"),
    ({"query": "ok", "top_k": "5"}, "top_k", "must be an integer"),
    ({"query": "ok", "top_k": 2.5}, "top_k", "must be an integer"),
    ({"query": "ok", "top_k": True}, "top_k", "must be an integer"),
    ({"query": "ok", "threshold": 1.5}, "threshold", "must be <= 1.0"),
    ({"query": "ok", "threshold": -0.1}, "threshold", "must be >= 0.0"),
    ({"query": "ok", "threshold": "high"}, "threshold", "must be a number"),
    ({"query": "ok", "rerank": "yes"}, "rerank", "must be true or false"),
    ({"query": "ok", "arm": "bm25"}, "arm", "unknown arm 'bm25'; valid arms: ann, ann+rerank, lexical, lexical+rerank"),
    ({"query": "ok", "session_id": "s" * 129}, "session_id", "must be at most 128 characters"),
    ({"query": "ok", "topk": 3}, "topk", "unknown field"),
    ({"query": "a\x00b"}, "query", "must not contain NUL characters"),
    ({"query": "ok", "session_id": "\x00"}, "session_id", "must not contain NUL characters"),
    ({"query": "ok", "arm": "ann\x00"}, "arm", "must not contain NUL characters"),
]


@pytest.mark.parametrize("body,field,message", BAD_MATCH_BODIES, ids=[f"{f}:{m}"[:40] for _, f, m in BAD_MATCH_BODIES])
def test_bad_match_body_is_422_naming_field_and_limit(service, body, field, message):
    client, store = service
    before = logged_rows(client, store)
    r = client.post("/match", json=body)
    assert r.status_code == 422, r.text
    assert fields(r).get(field) == message, r.json()
    assert r.json()["error"].startswith("invalid request: ") and field in r.json()["error"]
    assert logged_rows(client, store) == before, "a rejected request must change nothing"


def test_lone_surrogates_are_422_naming_the_field(service):
    """JSON can carry a lone surrogate ("\\ud800"); no database can store it, and a field name with one
    cannot even be echoed in the error body."""
    client, store = service
    before = logged_rows(client, store)
    cases = [({"query": "a\ud800"}, "query"), ({"query": "ok", "session_id": "\udfff"}, "session_id"),
             ({"query": "ok", "\ud800": 1}, "body"),
             ({"queries": [{"query": "ok"}, {"query": "\udc00"}]}, "queries[1].query")]
    for body, field in cases:
        path = "/match/batch" if "queries" in body else "/match"
        r = client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert "must be valid Unicode text (it contains an unpaired surrogate)" in fields(r)[field], r.json()
    assert logged_rows(client, store) == before


def test_body_that_is_not_an_object(service):
    client, _ = service
    for payload in ([1, 2], "just a string", 3, None):
        r = client.post("/match", json=payload)
        assert r.status_code == 422, r.text
        assert fields(r) in ({"body": "must be a JSON object"}, {"body": "field required"})


def test_invalid_json_is_400(service):
    client, _ = service
    r = client.post("/match", content=b'{"query": "hi",', headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"].startswith("invalid JSON body") and fields(r).keys() == {"body"}
    r = client.post("/match", content=b"\xff\xfe not utf8", headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500


def test_non_finite_numbers_are_rejected(service):
    """Python's JSON parser accepts NaN/Infinity literals; they must still be a clean 422."""
    client, _ = service
    for literal in ("NaN", "Infinity", "-Infinity"):
        r = client.post("/match", content=f'{{"query": "hi", "threshold": {literal}}}',
                        headers={"Content-Type": "application/json"})
        assert r.status_code == 422, (literal, r.text)
        assert "threshold" in fields(r)
        r = client.post("/match", content=f'{{"query": "hi", "top_k": {literal}}}',
                        headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and fields(r) == {"top_k": "must be an integer"}


def test_empty_body_is_422(service):
    client, _ = service
    r = client.post("/match", content=b"", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and fields(r) == {"body": "field required"}


def test_wrong_content_type_is_415(service):
    client, _ = service
    r = client.post("/match", content=b"query=hello", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    r = client.post("/match", content=json.dumps({"query": "hi"}), headers={"Content-Type": "text/plain"})
    assert r.status_code == 415
    # a +json media type and a charset parameter are fine
    r = client.post("/match", content=json.dumps({"query": "hi"}), headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200


def test_body_over_limit_by_content_length_is_413(service):
    client, store = service
    before = logged_rows(client, store)
    r = client.post("/match", content=json.dumps({"query": "a" * MAX_BODY}), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert str(MAX_BODY) in r.json()["error"] and "FAQ_MAX_BODY_BYTES" in r.json()["error"]
    assert logged_rows(client, store) == before
    # answered before routing, still counted under its route template
    assert 'faq_http_requests_total{method="POST",route="/match",status="413"}' in client.get("/metrics").text


def test_body_over_limit_when_streamed_is_413(service):
    """No Content-Length (chunked upload), or one that lies: the middleware counts the bytes."""
    client, _ = service

    def chunks():
        yield b'{"query": "'
        for _ in range(10):
            yield b"a" * 1000
        yield b'"}'

    r = client.post("/match", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    r = client.post("/match", content=b'{"query": "' + b"a" * 10_000 + b'"}',
                    headers={"Content-Type": "application/json", "Content-Length": "20"})
    assert r.status_code == 413
    # just under the limit is fine (then it is the query length that is checked)
    ok = client.post("/match", content=b'{"query": "' + b"a" * 900 + b'"}',
                     headers={"Content-Type": "application/json"})
    assert ok.status_code == 200


def test_rerank_without_reranker_is_409(service):
    client, store = service
    before = logged_rows(client, store)
    r = client.post("/match", json={"query": "hello", "rerank": True})
    assert r.status_code == 409 and "no re-ranker installed" in r.json()["error"]
    r = client.post("/match/batch", json={"queries": [{"query": "a"}, {"query": "b", "rerank": True}]})
    assert r.status_code == 409
    assert logged_rows(client, store) == before
    assert client.post("/match", json={"query": "hello", "rerank": False}).status_code == 200


def test_bad_batches(service):
    client, _ = service
    r = client.post("/match/batch", json={"queries": []})
    assert r.status_code == 422 and fields(r) == {"queries": "must have at least 1 items"}
    r = client.post("/match/batch", json={"queries": [{"query": "q"}] * (MAX_BATCH + 1)})
    assert r.status_code == 422 and fields(r) == {"queries": f"must have at most {MAX_BATCH} items"}
    r = client.post("/match/batch", json={"queries": [{"query": "fine"}, {"query": "fine", "top_k": 99}]})
    assert r.status_code == 422 and fields(r) == {"queries[1].top_k": f"must be <= {MAX_TOP_K}"}
    r = client.post("/match/batch", json={"query": "not a batch"})
    assert r.status_code == 422 and fields(r) == {"queries": "field required", "query": "unknown field"}


def test_bad_feedback(service):
    client, _ = service
    r = client.post("/feedback", json={"request_id": "abc"})
    assert r.status_code == 422 and "correct` and/or `faq_id" in r.json()["error"]
    r = client.post("/feedback", json={"request_id": "abc", "correct": "yes"})
    assert r.status_code == 422 and fields(r) == {"correct": "must be true or false"}
    r = client.post("/feedback", json={"request_id": "x" * 65, "correct": True})
    assert r.status_code == 422 and fields(r) == {"request_id": "must be at most 64 characters"}


def test_unknown_route_and_method(service):
    client, _ = service
    r = client.get("/match")
    assert r.status_code == 405 and r.json() == {"error": "Method Not Allowed"}
    assert client.get("/nope").status_code == 404
    assert client.get("/admin/faqs").status_code == 401, "no token: the admin API refuses"


# any code point, NUL and lone surrogates included (what a JSON string can carry)
any_text = st.text(st.characters(exclude_categories=()), max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False) | any_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4),
    max_leaves=10,
)
match_bodies = st.fixed_dictionaries(
    {},
    optional={
        "query": st.one_of(st.text(max_size=40), any_text, json_values),
        "top_k": st.one_of(st.integers(-5, 60), json_values),
        "threshold": st.one_of(st.floats(-1, 2, allow_nan=False, allow_infinity=False), json_values),
        "rerank": st.one_of(st.booleans(), json_values),
        "arm": st.one_of(st.sampled_from(["ann", "bm25", ""]), json_values),
        "session_id": st.one_of(st.text(max_size=5), any_text, json_values),
        "extra": json_values,
    },
) | json_values


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=match_bodies)
def test_fuzz_match_body_never_500(service, body):
    client, _ = service
    # sent ASCII-escaped: a lone surrogate has no UTF-8 form, only a JSON escape
    r = client.post("/match", content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code in (200, 409, 422), (body, r.status_code, r.text)
    assert "error" in r.json() or r.status_code == 200


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_fuzz_raw_bytes_never_500(service, raw):
    client, _ = service
    r = client.post("/match", content=raw, headers={"Content-Type": "application/json"})
    assert 200 <= r.status_code < 500, (raw, r.status_code, r.text)


def test_no_index_yet_is_503(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path)
    store = make_store(settings)  # KB imported but never built
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        r = client.post("/match", json={"query": "hello"})
        assert r.status_code == 503 and r.json()["error"] == "no index built: run `faq index build`"
        assert client.post("/match/batch", json={"queries": [{"query": "hi"}]}).status_code == 503
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["reason"] == "no index built: run `faq index build`"
        assert client.get("/healthz").status_code == 200
        # client errors still win over the 503 (validation happens first)
        assert client.post("/match", json={"query": ""}).status_code == 422


def test_server_bug_is_500_with_request_id_only(tmp_path, encoder, caplog):  # noqa: F811
    """The catch-all handler: a true server bug gives a 500 with a request id, the traceback is logged."""
    settings = make_settings(tmp_path)
    app = create_app(settings, store=make_store(settings), encoder=encoder)

    def explode() -> None:
        raise RuntimeError("secret internal detail")

    app.add_api_route("/explode", explode)
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/explode")
    assert r.status_code == 500
    body = r.json()
    assert body["error"] == "internal server error" and len(body["request_id"]) == 32
    assert "secret" not in r.text
    assert any(body["request_id"] in rec.getMessage() for rec in caplog.records)
