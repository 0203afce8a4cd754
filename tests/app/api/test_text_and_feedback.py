"""Every text a client can send, on every route, on SQLite and PostgreSQL: NUL, lone surrogates and
oversized values are a 4xx naming the field, never a 5xx, and change nothing (no FAQ saved, no
query-log row, export still works). Then the /feedback rules: written once (409), faq_id must exist
(422), the session check (403), and concurrent posts with exactly one winner."""
from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
import uuid
from typing import Annotated, get_args, get_origin
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from sqlalchemy import func, select, text

from app.api import schemas
from app.api.main import create_app
from app.api.schemas import STORABLE
from app.db.models import QueryLog
from kb.files import write_kb
from tests.helpers.api import build, make_settings, make_store

TOKEN = "text-admin-token-of-32-characters"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NUL_MSG = "must not contain NUL characters"
SURROGATE_MSG = "must be valid Unicode text (it contains an unpaired surrogate)"
PATH, QUERY = "<path>", "<query>"  # where a value goes when it is not in the JSON body


@contextlib.contextmanager
def pg_database():
    """A fresh PostgreSQL database for the module (conftest's pg_url is per test: too slow here)."""
    import psycopg2
    from sqlalchemy.engine import make_url

    admin_url = os.environ.get("FAQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        admin = psycopg2.connect(make_url(admin_url).set(drivername="postgresql").render_as_string(hide_password=False),
                                 connect_timeout=3)
    except psycopg2.OperationalError as exc:
        pytest.skip(f"PostgreSQL not reachable at {admin_url}: {' '.join(str(exc).split())}")
    admin.autocommit = True
    name = f"faq_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
            try:
                yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
            finally:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def api(request, tmp_path_factory, encoder):  # noqa: F811
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(pg_database()) if request.param == "postgres" else None
        settings = make_settings(tmp_path_factory.mktemp(f"text-{request.param}"), admin_token=TOKEN, database_url=url)
        store = make_store(settings)
        stack.callback(store.close)
        build(store, encoder, settings)
        # raise_server_exceptions: a 500 fails the test with the server's traceback
        with TestClient(create_app(settings, store=store, encoder=encoder), raise_server_exceptions=True) as client:
            yield client, store


# ---------------------------------------------------------------- every text field of every route

FAQ = {"faq_id": "new-faq", "answer": "An answer.", "questions": ["A question?", "Another one?"], "tags": ["a", "b"]}
REPLACE = {k: v for k, v in FAQ.items() if k != "faq_id"}

# (method, url, body, where the value goes, field named in the answer, the field's length limit)
TARGETS = [
    ("POST", "/match", {"query": "ok"}, ("query",), "query", 1000),
    ("POST", "/match", {"query": "ok"}, ("session_id",), "session_id", 128),
    ("POST", "/match", {"query": "ok"}, ("arm",), "arm", None),
    ("POST", "/match/batch", {"queries": [{"query": "ok"}, {"query": "ok"}]}, ("queries", 1, "query"),
     "queries[1].query", 1000),
    ("POST", "/match/batch", {"queries": [{"query": "ok"}]}, ("queries", 0, "session_id"),
     "queries[0].session_id", 128),
    ("POST", "/match/batch", {"queries": [{"query": "ok"}]}, ("queries", 0, "arm"), "queries[0].arm", None),
    ("POST", "/feedback", {"request_id": "r", "correct": True}, ("request_id",), "request_id", 64),
    ("POST", "/feedback", {"request_id": "r", "correct": True}, ("faq_id",), "faq_id", 200),
    ("POST", "/feedback", {"request_id": "r", "correct": True}, ("session_id",), "session_id", 128),
    ("POST", "/admin/faqs", FAQ, ("faq_id",), "faq_id", 200),
    ("POST", "/admin/faqs", FAQ, ("answer",), "answer", 20000),
    ("POST", "/admin/faqs", FAQ, ("questions", 1), "questions[1]", 1000),
    ("POST", "/admin/faqs", FAQ, ("tags", 0), "tags[0]", 100),
    ("PUT", "/admin/faqs/refund", REPLACE, ("answer",), "answer", 20000),
    ("PUT", "/admin/faqs/refund", REPLACE, ("questions", 0), "questions[0]", 1000),
    ("PUT", "/admin/faqs/refund", REPLACE, ("tags", 1), "tags[1]", 100),
    ("PATCH", "/admin/faqs/refund", {}, ("answer",), "answer", 20000),
    ("PATCH", "/admin/faqs/refund", {"questions": ["ok"]}, ("questions", 0), "questions[0]", 1000),
    ("PATCH", "/admin/faqs/refund", {"tags": ["ok"]}, ("tags", 0), "tags[0]", 100),
    ("GET", "/admin/faqs/{}", None, PATH, "faq_id", 200),
    ("PUT", "/admin/faqs/{}", REPLACE, PATH, "faq_id", 200),
    ("PATCH", "/admin/faqs/{}", {"answer": "changed"}, PATH, "faq_id", 200),
    ("DELETE", "/admin/faqs/{}", None, PATH, "faq_id", 200),
    ("GET", "/admin/faqs", None, QUERY, "q", 200),
]
TARGET_IDS = [f"{m} {u} {f}" for m, u, _, _, f, _ in TARGETS]


def send(client: TestClient, target: tuple, value: str):
    """The target's request with `value` in its place; JSON is sent ASCII-escaped, as a client that
    writes "\\ud800" would (a lone surrogate has no UTF-8 form)."""
    method, url, body, where, _, _ = target
    # in a URL, a lone surrogate can only be sent as its (invalid) UTF-8 bytes
    in_url = quote(value.encode("utf-8", "surrogatepass"), safe="")
    if where == PATH:
        url = url.format(in_url)
    elif where == QUERY:
        url = f"{url}?q={in_url}"
    else:
        body = copy.deepcopy(body)
        holder = body
        for key in where[:-1]:
            holder = holder[key]
        holder[where[-1]] = value
    if body is None:
        return client.request(method, url, headers=AUTH)
    return client.request(method, url, content=json.dumps(body).encode(),
                          headers={**AUTH, "Content-Type": "application/json"})


def state_of(client: TestClient, store) -> tuple:
    """What a rejected request must leave alone: the KB revision and the query log."""
    client.app.state.service.query_log.flush()
    with store.engine.connect() as conn:
        logged = conn.execute(select(func.count()).select_from(QueryLog)).scalar()
        feedback = conn.execute(text("SELECT count(*) FROM query_log WHERE feedback_correct IS NOT NULL "
                                     "OR feedback_faq_id IS NOT NULL")).scalar()
    return store.revision(), logged, feedback


def check_rejected(response, target: tuple, kind: str, value: str) -> None:
    method, url, _, where, field, limit = target
    assert response.status_code < 500, (target, value, response.text)
    if where == PATH and "/" in value:
        return  # an encoded "/" is decoded before routing: another (unknown) route answers
    if kind == "surrogate" and where in (PATH, QUERY):
        # the server decodes invalid UTF-8 in URLs as U+FFFD, which is storable text: an ordinary lookup
        assert response.status_code in (200, 404, 422), (target, response.text)
        return
    assert response.status_code == 422, (target, value, response.text)
    body = response.json()
    detail = {d["field"]: d["message"] for d in body.get("detail") or []}
    if kind == "nul":
        assert detail.get(field) == NUL_MSG, (target, body)
    elif kind == "surrogate":
        assert detail.get(field) == SURROGATE_MSG, (target, body)
    elif field in detail:  # oversized: the schema's limit ...
        assert limit is None or detail[field] == f"must be at most {limit} characters" or field == "arm", body
    else:  # ... or the KB rules' (question and tag lengths are checked after whitespace normalisation)
        assert f"{field} is longer than {limit} characters" in body["error"], (target, body)


def bad_value(kind: str, limit: int | None, prefix: str = "", suffix: str = "") -> str:
    if kind == "nul":
        return f"{prefix}\x00{suffix}"
    if kind == "surrogate":
        return f"{prefix}\udc80{suffix}"
    return "x" * ((limit or 100) + 1 + len(prefix) + len(suffix))


def _checked(annotation, metadata=()) -> bool:
    """Whether every str inside a field's type carries STORABLE."""
    if STORABLE in metadata or any(check in metadata for check in schemas.CHECKS_ITS_TEXT):
        return True
    if get_origin(annotation) is Annotated:
        return _checked(get_args(annotation)[0], get_args(annotation)[1:])
    if annotation is str:
        return False
    return all(_checked(arg) for arg in get_args(annotation) if arg is not type(None))


def test_every_request_model_string_carries_the_text_rule():
    """A field added later without the rule fails here, not in production on PostgreSQL."""
    models = schemas._Strict.__subclasses__()
    assert {m.__name__ for m in models} >= {"MatchRequest", "BatchMatchRequest", "FeedbackRequest", "FaqCreate",
                                            "FaqReplace", "FaqPatch"}
    unchecked = [f"{m.__name__}.{name}" for m in models for name, f in m.model_fields.items()
                 if not _checked(f.annotation, f.metadata)]
    assert unchecked == []
    assert not _checked(list[str]) and not _checked(str | None) and _checked(schemas.Text)


@pytest.mark.parametrize("kind", ["nul", "surrogate", "oversized"])
def test_every_text_field_of_every_route(api, kind):
    client, store = api
    before = state_of(client, store)
    for target in TARGETS:
        check_rejected(send(client, target, bad_value(kind, target[5], "id-", "-x")), target, kind, "")
    assert state_of(client, store) == before


# text around the bad character: anything storable (hypothesis' default alphabet has no surrogates)
_around = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
_bad = st.one_of(
    st.tuples(st.just("nul"), st.builds(lambda a, b: f"{a}\x00{b}", _around, _around)),
    st.tuples(st.just("surrogate"), st.builds(lambda a, c, b: f"{a}{c}{b}", _around,
                                              st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), _around)),
    # past every limit (the answer's 20000 is the largest) and within FAQ_MAX_BODY_BYTES
    st.tuples(st.just("oversized"), st.builds(lambda a, n: (a + "x" * n)[:n], _around, st.integers(20_001, 20_100))),
)


@hsettings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(TARGETS), bad=_bad)
def test_fuzz_unstorable_text_never_5xx_and_changes_nothing(api, target, bad):
    client, store = api
    kind, value = bad
    if kind == "oversized" and target[3] in (PATH, QUERY):
        value = value[:300]  # past the 200-character limit, within what a URL may carry
    before = state_of(client, store)
    check_rejected(send(client, target, value), target, kind, value)
    assert state_of(client, store) == before


def test_rejected_faq_is_not_saved_and_the_kb_still_exports(api, tmp_path):
    client, store = api
    for bad in ({"questions": ["fine", "lone \ud800"]}, {"tags": ["\udfff"]}, {"answer": "nul \x00"}):
        r = client.post("/admin/faqs", content=json.dumps({**FAQ, "faq_id": "hostile", **bad}),
                        headers={**AUTH, "Content-Type": "application/json"})
        assert r.status_code == 422, r.text
    assert client.get("/admin/faqs/hostile", headers=AUTH).status_code == 404
    listing = client.get("/admin/faqs", headers=AUTH, params={"limit": 500})
    assert listing.status_code == 200 and "hostile" not in {f["faq_id"] for f in listing.json()["items"]}
    for name in ("kb.jsonl", "kb.csv"):
        n_faqs, _ = write_kb(tmp_path / name, store.export_records())
        assert n_faqs == listing.json()["total"]


def test_a_bad_row_reaching_the_query_log_costs_only_itself(api):
    """Defence in depth: even if a row with unstorable text got past the API, the writer's batch
    keeps every other row."""
    client, store = api
    state = client.app.state.service
    ids = [uuid.uuid4().hex for _ in range(5)]
    rows = [{"request_id": rid, "query": f"query {i}", "session_id": "s"} for i, rid in enumerate(ids)]
    rows[2]["query"] = "nul \x00 here"
    state.log_matches(rows)
    state.query_log.flush()
    with store.engine.connect() as conn:
        stored = set(conn.execute(select(QueryLog.request_id).where(QueryLog.request_id.in_(ids))).scalars())
    assert stored == set(ids) - {ids[2]}
    assert client.post("/feedback", json={"request_id": ids[0], "correct": True}).status_code == 200


# ---------------------------------------------------------------- /feedback rules

def matched(client: TestClient, session_id: str | None = None) -> str:
    body = {"query": "how do I get my money back"} | ({"session_id": session_id} if session_id else {})
    r = client.post("/match", json=body)
    assert r.status_code == 200, r.text
    return r.json()["request_id"]


def detail(response) -> dict[str, str]:
    return {d["field"]: d["message"] for d in response.json().get("detail") or []}


def test_feedback_is_written_once(api):
    client, _ = api
    rid = matched(client)
    assert client.post("/feedback", json={"request_id": rid, "correct": True}).status_code == 200
    for again in ({"correct": False}, {"faq_id": "refund"}, {"correct": True}):
        r = client.post("/feedback", json={"request_id": rid, **again})
        assert r.status_code == 409, r.text
        message = f"feedback for request {rid} was already recorded"
        assert r.json()["error"] == message and detail(r) == {"request_id": message}
    assert client.post("/feedback", json={"request_id": "no-such", "correct": True}).status_code == 404


def test_feedback_faq_id_must_exist(api):
    client, _ = api
    rid = matched(client)
    r = client.post("/feedback", json={"request_id": rid, "faq_id": "no-such-faq"})
    assert r.status_code == 422, r.text
    assert detail(r) == {"faq_id": "no FAQ 'no-such-faq' in the knowledge base"}
    assert client.post("/feedback", json={"request_id": rid, "faq_id": "refund"}).status_code == 200, "nothing written"


def test_feedback_session_check(api, monkeypatch):
    client, _ = api
    rid = matched(client, session_id="alice")
    r = client.post("/feedback", json={"request_id": rid, "correct": True, "session_id": "mallory"})
    assert r.status_code == 403 and "session_id" in detail(r), r.text
    assert client.post("/feedback", json={"request_id": rid, "correct": True, "session_id": "alice"}).status_code == 200
    # not required by default: leaving it out is fine
    rid = matched(client, session_id="alice")
    assert client.post("/feedback", json={"request_id": rid, "correct": False}).status_code == 200

    monkeypatch.setattr(client.app.state.service.settings, "feedback_requires_session", True)
    rid = matched(client, session_id="alice")
    r = client.post("/feedback", json={"request_id": rid, "correct": True})
    assert r.status_code == 403
    assert detail(r) == {"session_id": f"request {rid} was made in a session: give its session_id"}
    assert client.post("/feedback", json={"request_id": rid, "correct": True, "session_id": "alice"}).status_code == 200
    # requests logged without a session need none
    assert client.post("/feedback", json={"request_id": matched(client), "correct": True}).status_code == 200


def test_concurrent_feedback_posts_have_one_winner(api):
    client, _ = api
    rid = matched(client)
    n = 6
    barrier = threading.Barrier(n)
    codes: list[int] = []

    def post(i: int) -> None:
        barrier.wait()
        codes.append(client.post("/feedback", json={"request_id": rid, "correct": i % 2 == 0}).status_code)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(codes) == [200] + [409] * (n - 1)


def test_feedback_errors_are_documented(api):
    client, _ = api
    spec = client.get("/openapi.json").json()
    responses = spec["paths"]["/feedback"]["post"]["responses"]
    for code in ("403", "404", "409", "422"):
        assert responses[code]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody"), code
    assert "session_id" in spec["components"]["schemas"]["FeedbackRequest"]["properties"]
