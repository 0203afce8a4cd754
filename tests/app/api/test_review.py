"""The review queues over the admin API: the queues the console and the CLI show, with the same rules."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.curation.mining import mine_report
from app.store.reviews import lint_key, phrasing_key
from tests.helpers.api import bearer, two_built_kbs

ROOT = "review-api-root-token-of-32-characters"


@pytest.fixture
def served(tmp_path, encoder):  # noqa: F811
    settings, store = two_built_kbs(tmp_path, encoder, ROOT)
    shop_admin = store.catalog.issue_token("shop", "admin")[1]
    from app.api.main import create_app

    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        for query, feedback in [("password gone, what now", {"faq_id": "reset_password"}),
                                ("do you sell gift cards", {"correct": False}),
                                ("Do you sell gift cards?", {"correct": False})]:
            r = client.post("/match", json={"query": query})
            assert client.post("/feedback", json={"request_id": r.json()["request_id"], **feedback}).status_code == 200
        yield client, store, shop_admin


def test_list_accept_dismiss_and_restore(served):
    client, store, _ = served
    auth = bearer(ROOT)
    queues = client.get("/admin/review", headers=auth)
    assert queues.status_code == 200, queues.text
    body = queues.json()
    [phrasing] = body["phrasings"]
    assert (phrasing["faq_id"], phrasing["question"]) == ("reset_password", "password gone, what now")
    assert phrasing["review_key"] == phrasing_key("reset_password", "password gone, what now")
    [cluster] = body["clusters"]
    assert cluster["size"] == 2
    r = client.post(f"/admin/review/phrasings/{phrasing['review_key']}/accept", headers=auth)
    assert r.status_code == 200 and r.json()["added"] == 1
    assert "password gone, what now" in r.json()["faq"]["questions"]
    assert client.post("/match", json={"query": "password gone, what now"}).json()["matches"][0]["question"] \
        == "password gone, what now"
    assert client.post(f"/admin/review/phrasings/{phrasing['review_key']}/accept", headers=auth).status_code == 409
    r = client.post("/admin/review/dismissals", headers=auth,
                    json={"queue": "cluster", "key": cluster["review_key"], "reason": "we will never sell them"})
    assert r.status_code == 201 and r.json()["subject"].lower().startswith("do you sell gift cards")
    assert client.get("/admin/review", headers=auth).json()["clusters"] == []
    assert mine_report(store)["stats"]["dismissed_clusters"] == 1
    assert client.post("/admin/review/dismissals", headers=auth,
                       json={"queue": "cluster", "key": cluster["review_key"]}).status_code == 409
    listed = client.get("/admin/review/dismissals", headers=auth).json()
    assert [(d["queue"], d["reason"], d["dismissed_by"]) for d in listed] == [
        ("cluster", "we will never sell them", "the admin API")]
    assert client.delete(f"/admin/review/dismissals/cluster/{cluster['review_key']}", headers=auth).status_code == 204
    assert client.delete(f"/admin/review/dismissals/cluster/{cluster['review_key']}", headers=auth).status_code == 404
    assert len(client.get("/admin/review", headers=auth).json()["clusters"]) == 1


def test_a_lint_finding_is_dismissed_by_faq_with_a_reason(served):
    client, store, _ = served
    auth = bearer(ROOT)
    no_reason = client.post("/admin/review/dismissals", headers=auth, json={"queue": "lint", "faq_id": "refund"})
    assert no_reason.status_code == 422 and "reason" in no_reason.text
    assert client.post("/admin/review/dismissals", headers=auth,
                       json={"queue": "lint", "faq_id": "nope", "reason": "x"}).status_code == 404
    r = client.post("/admin/review/dismissals", headers=auth,
                    json={"queue": "lint", "faq_id": "refund", "reason": "legal wrote it"})
    assert r.status_code == 201
    assert r.json()["key"] == lint_key("refund", store.get_faq("refund").answer)


def test_bad_input_and_other_kbs_tokens_change_nothing(served):
    client, store, shop_admin = served
    auth = bearer(ROOT)
    for method, path, body in [
        ("post", "/admin/review/phrasings/xyz/accept", None),
        ("post", "/admin/review/dismissals", {"queue": "phrasing"}),
        ("post", "/admin/review/dismissals", {"queue": "lint", "faq_id": "refund", "reason": "x" * 501}),
        ("post", "/admin/review/dismissals", {"queue": "other", "key": "a" * 64}),
        ("post", "/admin/review/dismissals", {"queue": "phrasing", "key": "a" * 64, "extra": 1}),
        ("delete", f"/admin/review/dismissals/nope/{'a' * 64}", None),
        ("get", "/admin/review?since=yesterday", None),
    ]:
        r = client.request(method.upper(), path, headers=auth, json=body)
        assert r.status_code == 422, (path, body, r.status_code, r.text)
    revision = store.revision()
    key = phrasing_key("reset_password", "password gone, what now")
    assert client.post(f"/admin/review/phrasings/{key}/accept", headers=bearer(shop_admin)).status_code == 403
    assert client.post(f"/kbs/default/admin/review/phrasings/{key}/accept",
                       headers=bearer(shop_admin)).status_code == 403
    assert client.get("/kbs/shop/admin/review", headers=bearer(shop_admin)).status_code == 200
    assert client.get("/admin/review").status_code == 401
    assert store.revision() == revision and store.reviews.dismissed() == []
