"""The /admin API: bearer-token auth, FAQ CRUD, changes visible in /match without a rebuild (delta +
tombstones), KB changes made by another process picked up by the poller, and /admin/index."""
from __future__ import annotations

import logging
import time

import pytest
from fastapi.testclient import TestClient

from app.api.main import create_app
from app.api.schemas import MAX_PAGE_OFFSET
from tests.helpers.api import KB, build, make_settings, make_store

TOKEN = "s3cret-admin-token-of-32-characters"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def admin(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path, admin_token=TOKEN)
    store = make_store(settings)
    manifest = build(store, encoder, settings)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        yield client, store, manifest


def top(client: TestClient, query: str, top_k: int = 3) -> list[str]:
    r = client.post("/match", json={"query": query, "top_k": top_k})
    assert r.status_code == 200, r.text
    return [m["faq_id"] for m in r.json()["matches"]]


def test_without_admin_token_only_kb_tokens_reach_admin(tmp_path, encoder, caplog):  # noqa: F811
    settings = make_settings(tmp_path, admin_token=None)
    store = make_store(settings)
    with caplog.at_level(logging.WARNING, logger="app.api.factory"):
        app = create_app(settings, store=store, encoder=encoder)
    assert any("FAQ_ADMIN_TOKEN" in rec.message and "KB admin tokens" in rec.message for rec in caplog.records)
    _, kb_token = store.catalog.issue_token("default", "admin")
    _, read_token = store.catalog.issue_token("default", "read")
    with TestClient(app) as client:
        assert client.get("/admin/faqs", headers={"Authorization": "Bearer anything"}).status_code == 401
        assert client.post("/admin/index/reload").status_code == 401
        assert client.get("/admin/faqs", headers={"Authorization": f"Bearer {read_token}"}).status_code == 401
        assert client.get("/admin/faqs", headers={"Authorization": f"Bearer {kb_token}"}).status_code == 200


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": TOKEN},
    {"Authorization": "Bearer "},
    {"Authorization": "Bearer tökén".encode("latin-1")},  # non-ASCII bytes must not crash the compare
])
def test_admin_requires_the_bearer_token(admin, headers):
    client, _, _ = admin
    for method, path in [("GET", "/admin/faqs"), ("GET", "/admin/faqs/refund"), ("DELETE", "/admin/faqs/refund"),
                         ("GET", "/admin/index"), ("POST", "/admin/index/reload")]:
        r = client.request(method, path, headers=headers)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer" and "admin token" in r.json()["error"]
    assert client.get("/admin/faqs/refund", headers=AUTH).status_code == 200, "nothing was deleted"


def test_crud_roundtrip(admin):
    client, store, _ = admin
    page = client.get("/admin/faqs", headers=AUTH, params={"limit": 3}).json()
    assert page["total"] == len(KB) and len(page["items"]) == 3 and page["offset"] == 0
    assert client.get("/admin/faqs", headers=AUTH, params={"q": "refund"}).json()["total"] >= 1
    assert client.get("/admin/faqs", headers=AUTH, params={"limit": 0}).status_code == 422
    # found by schemathesis: an offset past SQLite's 64-bit integers was a 500
    r = client.get("/admin/faqs", headers=AUTH, params={"offset": 805632006999931486208})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "offset", r.text
    far = client.get("/admin/faqs", headers=AUTH, params={"offset": MAX_PAGE_OFFSET}).json()
    assert far["items"] == [] and far["total"] == len(KB)

    new = {"faq_id": "gift_cards", "answer": "Gift cards never expire.", "questions": ["Do gift cards expire?"],
           "tags": ["billing"]}
    r = client.post("/admin/faqs", json=new, headers=AUTH)
    assert r.status_code == 201, r.text
    assert r.json()["questions"] == ["Do gift cards expire?"] and r.json()["tags"] == ["billing"]
    assert client.post("/admin/faqs", json=new, headers=AUTH).status_code == 409

    got = client.get("/admin/faqs/gift_cards", headers=AUTH).json()
    assert got["answer"] == "Gift cards never expire." and got["created_at"]

    r = client.patch("/admin/faqs/gift_cards", json={"answer": "Gift cards expire after 5 years."}, headers=AUTH)
    assert r.status_code == 200 and r.json()["answer"] == "Gift cards expire after 5 years."
    assert r.json()["questions"] == ["Do gift cards expire?"], "PATCH keeps what it does not mention"

    r = client.put("/admin/faqs/gift_cards", json={"answer": "Replaced.", "questions": ["Gift card validity?"]}, headers=AUTH)
    assert r.status_code == 200 and r.json()["questions"] == ["Gift card validity?"] and r.json()["tags"] == []

    assert client.delete("/admin/faqs/gift_cards", headers=AUTH).status_code == 204
    assert client.get("/admin/faqs/gift_cards", headers=AUTH).status_code == 404
    assert client.delete("/admin/faqs/gift_cards", headers=AUTH).status_code == 404
    assert client.patch("/admin/faqs/gift_cards", json={"answer": "x"}, headers=AUTH).status_code == 404
    assert client.put("/admin/faqs/nope", json={"answer": "x", "questions": ["q"]}, headers=AUTH).status_code == 404


def test_crud_bad_input(admin):
    client, _, _ = admin
    cases = [
        ({"faq_id": "x", "answer": "a", "questions": []}, "questions"),
        ({"faq_id": "x", "answer": "a", "questions": ["  "]}, "questions"),
        ({"faq_id": " ", "answer": "a", "questions": ["q"]}, "faq_id"),
        ({"faq_id": "x", "answer": "", "questions": ["q"]}, "answer"),
        ({"faq_id": "x", "answer": "a", "questions": ["q"], "color": "red"}, "color"),
        ({"faq_id": "x", "answer": "a", "questions": "q"}, "questions"),
    ]
    for body, field in cases:
        r = client.post("/admin/faqs", json=body, headers=AUTH)
        assert r.status_code == 422, (body, r.text)
        assert field in {d["field"] for d in r.json()["detail"]}, r.json()
    # the store's own KB rules (shared with `faq kb import`) also give a 422
    r = client.post("/admin/faqs", json={"faq_id": "x", "answer": "a", "questions": ["q"], "tags": ["a;b"]}, headers=AUTH)
    assert r.status_code == 422 and "tags" in r.json()["error"]
    assert client.get("/admin/faqs/x", headers=AUTH).status_code == 404, "nothing was created"


def test_add_edit_delete_visible_in_match_without_rebuild(admin):
    client, _, manifest = admin
    query = "can I adopt a pet giraffe from you?"
    assert "giraffes" not in top(client, query)
    assert client.post("/match", json={"query": query, "top_k": 3}).json()["cached"]  # a repeat: the query cache

    r = client.post("/admin/faqs", headers=AUTH, json={
        "faq_id": "giraffes", "answer": "We do not sell giraffes.",
        "questions": ["Can I adopt a giraffe?", "Do you sell pet giraffes?"]})
    assert r.status_code == 201
    body = client.post("/match", json={"query": query}).json()
    assert body["matches"][0]["faq_id"] == "giraffes" and body["answer"]["answer"] == "We do not sell giraffes."
    assert not body["cached"]  # the KB change emptied the cache
    assert body["index_version"] == manifest["version"], "served from the delta, no rebuild"
    info = client.get("/admin/index", headers=AUTH).json()
    assert info["version"] == manifest["version"] and info["delta_size"] == 2 and info["tombstones"] == 0

    # edit an FAQ from the build: its old question is tombstoned, the new one is in the delta
    r = client.patch("/admin/faqs/opening_hours", headers=AUTH, json={
        "questions": ["What are your opening hours?", "Is the shop open on public holidays?"]})
    assert r.status_code == 200
    assert top(client, "open on public holidays?", 1) == ["opening_hours"]
    info = client.get("/admin/index", headers=AUTH).json()
    assert info["tombstones"] == 2 and info["delta_size"] == 3

    # delete a built FAQ: gone from /match at once
    assert "refund" in top(client, "I want my money back")
    assert client.delete("/admin/faqs/refund", headers=AUTH).status_code == 204
    assert "refund" not in top(client, "I want my money back", 8)
    info = client.get("/admin/index", headers=AUTH).json()
    assert info["tombstones"] == 5 and info["kb_revision"] >= 3
    metrics = client.get("/metrics").text
    assert "faq_index_delta_size 3.0" in metrics and "faq_index_tombstones 5.0" in metrics


def test_poller_picks_up_changes_from_another_process(tmp_path, encoder):  # noqa: F811
    """`faq kb import` in another process only bumps the store revision: the poller must notice."""
    settings = make_settings(tmp_path, admin_token=TOKEN, kb_poll_seconds=0.1)
    store = make_store(settings)
    build(store, encoder, settings)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        from app.store import FaqStore

        other = FaqStore(settings.db_url)  # a second engine, as another process would have
        other.create_faq("warranty", "Two years on all products.", ["How long is the warranty?"])
        deadline = time.monotonic() + 10
        while "warranty" not in top(client, "what warranty do I get", 1):
            assert time.monotonic() < deadline, "poller did not pick up the KB change"
            time.sleep(0.1)
        other.close()


def test_index_info_and_reload_without_new_build(admin):
    client, _, manifest = admin
    info = client.get("/admin/index", headers=AUTH).json()
    assert info["version"] == manifest["version"] and info["manifest"]["calibration"]["a"] == manifest["calibration"]["a"]
    assert info["kb_revision"] == manifest["kb_revision"] and info["loaded_at"]
    r = client.post("/admin/index/reload", headers=AUTH)
    assert r.status_code == 200
    assert r.json() == {"previous_version": manifest["version"], "version": manifest["version"], "swapped": False}


def test_openapi_documents_our_error_body(admin):
    """Every route that reads input says its 4xx bodies are ErrorBody ({error, detail: [{field, message}]}),
    which is what the handlers send, not FastAPI's default {detail: [{loc, msg, type}]}
    (schemathesis flagged the admin routes and /feedback)."""
    client, _, _ = admin
    paths = client.get("/openapi.json").json()["paths"]
    reading = [("/match", "post"), ("/match/batch", "post"), ("/feedback", "post"), ("/admin/faqs", "get"),
               ("/admin/faqs", "post"), ("/admin/faqs/{faq_id}", "put"), ("/admin/faqs/{faq_id}", "patch")]
    for path, method in reading:
        responses = paths[path][method]["responses"]
        for code in ("400", "413", "415", "422"):
            ref = responses[code]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ErrorBody"), (path, method, code, ref)
    r = client.get("/admin/faqs", headers=AUTH, params={"limit": 501})
    assert r.status_code == 422, r.text
    [err] = r.json()["detail"]
    assert set(err) == {"field", "message"} and err["field"] == "limit" and "500" in err["message"], err
