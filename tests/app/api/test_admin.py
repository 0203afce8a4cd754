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
    assert any("FAQ_ADMIN_TOKEN" in rec.message and "KB tokens" in rec.message for rec in caplog.records)
    _, kb_token = store.catalog.issue_token("default", "admin")
    _, read_token = store.catalog.issue_token("default", "read")
    with TestClient(app) as client:
        assert client.get("/admin/faqs", headers={"Authorization": "Bearer anything"}).status_code == 401
        assert client.post("/admin/index/reload").status_code == 401
        # the read key reaches its KB but holds no role
        assert client.get("/admin/faqs", headers={"Authorization": f"Bearer {read_token}"}).status_code == 403
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


def test_faq_fields_through_crud_match_and_delete(admin):
    """metadata, source, follow_ups and context_only: written by POST/PUT/PATCH, returned by GET, carried by
    every /match entry after the KB refresh (FAQs of the build included), and pruned from follow-ups when the
    FAQ they name is deleted."""
    client, store, manifest = admin
    fields = {"metadata": {" Lang ": "en", "Team": " billing "}, "source": "https://help.example.com/refunds",
              "follow_ups": [{"faq_id": "cancel_order", "text": "Cancel  the order\ninstead?"},
                             {"faq_id": "payment_methods", "text": "How did you pay?"}]}
    # an FAQ of the build, edited through PATCH only in these fields: a change, served after the refresh
    before = store.revision()
    r = client.patch("/admin/faqs/refund", headers=AUTH, json=fields)
    assert r.status_code == 200, r.text
    want = {"metadata": {"lang": "en", "team": "billing"}, "source": "https://help.example.com/refunds",
            "follow_ups": [{"faq_id": "cancel_order", "text": "Cancel the order instead?"},
                           {"faq_id": "payment_methods", "text": "How did you pay?"}], "context_only": False}
    assert {k: r.json()[k] for k in want} == want and store.revision() == before + 1
    assert {k: client.get("/admin/faqs/refund", headers=AUTH).json()[k] for k in want} == want
    assert client.patch("/admin/faqs/refund", headers=AUTH, json=fields).status_code == 200
    assert store.revision() == before + 1, "the same fields again change nothing"
    body = client.post("/match", json={"query": "I want my money back", "threshold": 0.0}).json()
    assert body["index_version"] == manifest["version"]
    best = body["matches"][0]
    assert best["faq_id"] == "refund" and best["tags"] == []
    assert {k: best[k] for k in ("metadata", "source", "follow_ups")} == {k: want[k] for k in ("metadata", "source", "follow_ups")}
    assert body["answer"]["follow_ups"] == want["follow_ups"]
    batch = client.post("/match/batch", json={"queries": [{"query": "I want my money back"}]}).json()
    assert batch["results"][0]["matches"][0]["metadata"] == want["metadata"]

    # POST with every field; PUT resets what it leaves out; PATCH "source": null clears the source
    new = {"faq_id": "gift_cards", "answer": "Gift cards never expire.", "questions": ["Do gift cards expire?"],
           "tags": ["cards"], "metadata": {"k": "v"}, "source": "terms.pdf",
           "follow_ups": [{"faq_id": "refund", "text": "Refunds?"}], "context_only": True}
    r = client.post("/admin/faqs", headers=AUTH, json=new)
    assert r.status_code == 201 and r.json()["context_only"] is True and r.json()["source"] == "terms.pdf"
    r = client.patch("/admin/faqs/gift_cards", headers=AUTH, json={"source": None, "context_only": False})
    assert r.json()["source"] is None and r.json()["metadata"] == {"k": "v"} and r.json()["context_only"] is False
    r = client.put("/admin/faqs/gift_cards", headers=AUTH, json={"answer": "Never.", "questions": ["Expiry?"]})
    assert (r.json()["metadata"], r.json()["follow_ups"], r.json()["tags"]) == ({}, [], [])

    # deleting an FAQ takes it out of the follow-ups that name it, in the same write
    assert store.prompting_to("cancel_order") == ["refund"]
    assert client.delete("/admin/faqs/cancel_order", headers=AUTH).status_code == 204
    assert client.get("/admin/faqs/refund", headers=AUTH).json()["follow_ups"] == [want["follow_ups"][1]]
    best = client.post("/match", json={"query": "I want my money back"}).json()["matches"][0]
    assert best["follow_ups"] == [want["follow_ups"][1]]


@pytest.mark.parametrize("fields, named", [
    ({"metadata": {f"k{i}": "v" for i in range(51)}}, "metadata"),
    ({"metadata": {"k" * 101: "v"}}, "longer than 100 characters"),
    ({"metadata": {"k": "v" * 501}}, "longer than 500 characters"),
    ({"metadata": {"Lang": "en", "lang ": "fr"}}, "'Lang' and 'lang '"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"source": ""}, "source is empty"),
    ({"source": "s" * 501}, "source is longer than 500 characters"),
    ({"follow_ups": [{"faq_id": f"f{i}", "text": "t"} for i in range(21)]}, "follow_ups"),
    ({"follow_ups": [{"faq_id": "shipping_time", "text": "t" * 201}]}, "follow_ups[0].text is longer than 200 characters"),
    ({"follow_ups": [{"faq_id": "shipping_time", "text": "a"}, {"faq_id": "shipping_time", "text": "b"}]},
     "already follow_ups[0]"),
    ({"follow_ups": [{"faq_id": "nowhere", "text": "t"}]}, "follow_ups[0].faq_id 'nowhere' is not an FAQ"),
    ({"follow_ups": [{"faq_id": "x", "text": "t"}]}, "the FAQ itself"),
    ({"follow_ups": [{"faq_id": "shipping_time"}]}, "text"),
    ({"context_only": "yes"}, "context_only"),
])
def test_faq_fields_bad_input_is_a_422_naming_the_field(admin, fields, named):
    client, store, _ = admin
    before = store.revision()
    for method, path, body in [("POST", "/admin/faqs", {"faq_id": "x", "answer": "a", "questions": ["q"], **fields}),
                               ("PATCH", "/admin/faqs/refund", fields)]:
        if method == "PATCH" and "itself" in named:
            continue
        r = client.request(method, path, headers=AUTH, json=body)
        assert r.status_code == 422, (method, r.text)
        assert named in r.text, r.text
    assert client.get("/admin/faqs/x", headers=AUTH).status_code == 404 and store.revision() == before


def test_a_context_only_faq_is_never_answered_without_its_context(admin):
    client, _, _ = admin
    assert top(client, "How long does shipping take?", 1) == ["shipping_time"]
    r = client.post("/admin/faqs", headers=AUTH, json={
        "faq_id": "cancel_how_long", "answer": "A cancellation is confirmed within one hour.",
        "questions": ["How long does that take?"], "context_only": True})
    assert r.status_code == 201, r.text
    client.patch("/admin/faqs/cancel_order", headers=AUTH, json={
        "follow_ups": [{"faq_id": "cancel_how_long", "text": "How long does that take?"}]})
    for query in ("How long does that take?", "how long does it take"):
        body = client.post("/match", json={"query": query, "top_k": 10}).json()
        assert "cancel_how_long" not in [m["faq_id"] for m in body["matches"]], body
    # the flag lifted, it is a candidate like any other FAQ
    assert client.patch("/admin/faqs/cancel_how_long", headers=AUTH, json={"context_only": False}).status_code == 200
    assert top(client, "How long does that take?", 1) == ["cancel_how_long"]
