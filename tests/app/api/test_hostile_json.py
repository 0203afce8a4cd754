"""JSON bodies the parser itself refuses (nesting deeper than its recursion allows, integers of more
digits than Python converts) get a 400 naming the problem on every route that takes a body, never a 500,
and change nothing."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.api.main import create_app
from tests.helpers.api import bearer, build, make_settings, make_store

TOKEN = "hostile-json-token-0123456789abcdef"
DEPTH = 5000
DIGITS = 5000

DEEP = "[" * DEPTH + "]" * DEPTH
HUGE = "9" * DIGITS

# (method, path, a body template whose {} takes the hostile value)
ROUTES = [
    ("POST", "/match", '{{"query": "refund", "top_k": {}}}'),
    ("POST", "/match/batch", '{{"queries": [{{"query": "refund", "top_k": {}}}]}}'),
    ("POST", "/feedback", '{{"request_id": "abc", "correct": {}}}'),
    ("POST", "/admin/faqs", '{{"faq_id": "x", "answer": "An answer.", "questions": ["q"], "tags": {}}}'),
    ("PUT", "/admin/faqs/refund", '{{"answer": "An answer.", "questions": ["q"], "tags": {}}}'),
    ("PATCH", "/admin/faqs/refund", '{{"tags": {}}}'),
    ("POST", "/kbs/default/match", '{{"query": "refund", "top_k": {}}}'),
]
CASES = [(m, p, t, kind, value) for m, p, t in ROUTES
         for kind, value in (("deep", DEEP), ("huge-int", HUGE), ("negative-huge-int", "-" + HUGE))]


@pytest.fixture(scope="module")
def service(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("hostile_json"), admin_token=TOKEN)
    store = make_store(settings)
    build(store, encoder, settings)
    # raise_server_exceptions: a 500 fails the test with the server's traceback
    with TestClient(create_app(settings, store=store, encoder=encoder), raise_server_exceptions=True) as client:
        yield client, store


@pytest.mark.parametrize("method,path,template,kind,value", CASES,
                         ids=[f"{m} {p} {k}" for m, p, _, k, _ in CASES])
def test_unparseable_json_is_400_naming_the_problem(service, method, path, template, kind, value):
    client, store = service
    before = store.revision()
    r = client.request(method, path, content=template.format(value), headers={
        "Content-Type": "application/json", **bearer(TOKEN)})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error.startswith("invalid JSON body: "), error
    if kind == "deep":
        assert "nested too deeply" in error and "levels" in error, error
    else:
        assert f"{DIGITS} digits" in error and "4300" in error, error
    assert r.json()["detail"] == [{"field": "body", "message": error.removeprefix("invalid JSON body: ")}]
    assert store.revision() == before, "a refused body changes nothing"


def test_nesting_the_parser_accepts_is_a_422_naming_the_field(service):
    client, _ = service
    r = client.post("/match", content='{"query": ' + "[" * 200 + "]" * 200 + "}",
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"] == [{"field": "query", "message": "must be a string"}]
    r = client.post("/match", content='{"query": "refund", "top_k": ' + "9" * 4000 + "}",
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"] == [{"field": "top_k", "message": "must be <= 50"}]
