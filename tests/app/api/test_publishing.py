"""Draft, publish, roll back through the service: a `reviewed` KB's edits are answered on the `test` deployment
only, until a publish; a rollback serves an earlier publication again and keeps the draft; the QnA Maker
(`isTest`) and Azure (`deploymentName=test`) routes reach the draft too; diffs, conflicts and bad input."""
from __future__ import annotations

import pytest

from tests.helpers.api import bearer, kb_records, serving

ADMIN = "publishing-admin-token-0123456789abcdef"
GIFT = {"faq_id": "gift_cards", "answer": "Gift cards are sold at every till.",
        "questions": ["Do you sell gift cards?", "Can I buy a gift voucher?"]}


@pytest.fixture
def reviewed(tmp_path, minilm_encoder):
    with serving(tmp_path, minilm_encoder, kb_records(), admin_token=ADMIN, publishing="reviewed") as served:
        yield served


def ask(client, query, deployment=None, token=ADMIN):
    body = {"query": query} if deployment is None else {"query": query, "deployment": deployment}
    response = client.post("/match", json=body, headers=bearer(token) if token else {})
    assert response.status_code == 200, response.text
    return response.json()


def answered(result) -> str | None:
    return result["answer"]["faq_id"] if result["answer"] else None


def test_a_reviewed_kb_answers_edits_on_test_only_until_they_are_published(reviewed):
    client, store, _ = reviewed
    # the content served when the KB turned reviewed is its first publication
    listed = client.get("/admin/published", headers=bearer(ADMIN)).json()
    assert [p["id"] for p in listed["publications"]] == [1] and listed["serving"] == 1
    assert client.post("/admin/faqs", json=GIFT, headers=bearer(ADMIN)).status_code == 201
    production = ask(client, "do you sell gift cards", token=None)
    assert production["deployment"] == "production" and answered(production) != "gift_cards"
    test = ask(client, "do you sell gift cards", "test")
    assert test["deployment"] == "test" and answered(test) == "gift_cards"
    assert client.post("/match", json={"query": "gift cards", "deployment": "test"}).status_code == 401

    diff = client.get("/admin/diff", headers=bearer(ADMIN)).json()
    assert [f["faq_id"] for f in diff["added"]] == ["gift_cards"] and diff["removed"] == diff["changed"] == []

    done = client.post("/admin/publish", json={"note": "gift cards"}, headers=bearer(ADMIN)).json()
    assert done["published"] is True and done["publication"]["id"] == 2 and done["serving"] == 2
    assert done["publication"]["summary"]["added"] == 1 and done["publication"]["note"] == "gift cards"
    assert answered(ask(client, "do you sell gift cards", token=None)) == "gift_cards"
    again = client.post("/admin/publish", json={}, headers=bearer(ADMIN))
    assert again.status_code == 200 and again.json()["published"] is False
    assert "nothing changed since publication 2" in again.json()["message"]

    rows = store.audit.read()
    assert [r.action for r in rows if r.action in ("publish", "rollback")] == ["publish", "publish"]


def test_rollback_serves_an_earlier_publication_and_keeps_the_draft(reviewed):
    client, store, _ = reviewed
    client.post("/admin/faqs", json=GIFT, headers=bearer(ADMIN))
    client.post("/admin/publish", json={"note": "gift cards"}, headers=bearer(ADMIN))
    assert answered(ask(client, "can I buy a gift voucher", token=None)) == "gift_cards"

    done = client.post("/admin/rollback", json={"to": 1, "note": "too early"}, headers=bearer(ADMIN)).json()
    assert done["published"] is True and done["publication"]["kind"] == "rollback"
    assert done["publication"]["restored"] == 1 and done["serving"] == 3
    assert answered(ask(client, "can I buy a gift voucher", token=None)) != "gift_cards"
    assert answered(ask(client, "can I buy a gift voucher", "test")) == "gift_cards"  # the draft is kept
    diff = client.get("/admin/diff", params={"from": "3", "to": "draft"}, headers=bearer(ADMIN)).json()
    assert [f["faq_id"] for f in diff["added"]] == ["gift_cards"]

    missing = client.post("/admin/rollback", json={"to": 99}, headers=bearer(ADMIN))
    assert missing.status_code == 404 and "no publication 99" in missing.json()["error"]
    assert client.get("/admin/diff", params={"from": "77"}, headers=bearer(ADMIN)).status_code == 404
    long_note = client.post("/admin/publish", json={"note": "x" * 1001}, headers=bearer(ADMIN))
    assert long_note.status_code == 422 and "note" in long_note.text
    assert [p["id"] for p in client.get("/admin/published", headers=bearer(ADMIN)).json()["publications"]] == [3, 2, 1]


def test_the_compat_routes_read_the_draft_on_their_test_deployment(reviewed):
    client, _, _ = reviewed
    client.post("/admin/faqs", json=GIFT, headers=bearer(ADMIN))

    def qna(is_test):
        r = client.post("/qnamaker/knowledgebases/default/generateAnswer",
                        json={"question": "do you sell gift cards", "isTest": is_test},
                        headers={"Authorization": f"EndpointKey {ADMIN}"})
        assert r.status_code == 200, r.text
        return r.json()

    def azure(deployment):
        r = client.post("/language/:query-knowledgebases",
                        params={"projectName": "default", "deploymentName": deployment, "api-version": "2021-10-01"},
                        json={"question": "do you sell gift cards"}, headers={"Ocp-Apim-Subscription-Key": ADMIN})
        assert r.status_code == 200, r.text
        return r.json()

    test, production = qna(True), qna(False)
    assert test["faqMatch"]["deployment"] == "test" and "Gift cards" in test["answers"][0]["answer"]
    assert production["faqMatch"]["deployment"] == "production"
    assert "Gift cards" not in production["answers"][0]["answer"]
    assert "Gift cards" in azure("test")["answers"][0]["answer"]
    assert "Gift cards" not in azure("production")["answers"][0]["answer"]


def test_an_immediate_kb_serves_its_edits_everywhere_and_refuses_a_rollback(tmp_path, minilm_encoder):
    with serving(tmp_path, minilm_encoder, kb_records(), admin_token=ADMIN) as (client, _, _):
        client.post("/admin/faqs", json=GIFT, headers=bearer(ADMIN))
        assert answered(ask(client, "do you sell gift cards", token=None)) == "gift_cards"
        done = client.post("/admin/publish", json={}, headers=bearer(ADMIN)).json()
        assert done["published"] is True and done["publication"]["id"] == 1
        refused = client.post("/admin/rollback", json={"to": 1}, headers=bearer(ADMIN))
        assert refused.status_code == 409 and "publishing=reviewed" in refused.json()["error"]


def test_two_publishes_at_once_one_wins_and_the_other_is_told(tmp_path, minilm_encoder, monkeypatch):
    """A publish that finds another one made while it prepared its snapshot loses with 409, and nothing of
    it is stored."""
    import app.release.publishing as publishing

    with serving(tmp_path, minilm_encoder, kb_records(), admin_token=ADMIN, publishing="reviewed") as (client, store, _):
        client.post("/admin/faqs", json=GIFT, headers=bearer(ADMIN))
        prepare = publishing.draft_content

        def racing(scoped):
            found = prepare(scoped)
            publishing.draft_content = prepare  # the rival's publish runs once, between our read and our write
            assert publishing.publish(scoped, "the rival").publication.id == 2
            return found

        monkeypatch.setattr(publishing, "draft_content", racing)
        lost = client.post("/admin/publish", json={"note": "the loser"}, headers=bearer(ADMIN))
        assert lost.status_code == 409 and "another publish or rollback of this KB finished first" in lost.json()["error"]
        assert [(p.id, p.note) for p in store.publications.list()] == [(2, "the rival"), (1, "publishing set to reviewed")]


@pytest.mark.parametrize("method,path,body,status,says", [
    ("post", "/admin/rollback", {"to": 10**30}, 422, "to"),
    ("post", "/admin/rollback", {"to": "٣"}, 422, "to"),
    ("post", "/admin/rollback", {"to": 0}, 422, "to"),
    ("post", "/admin/publish", {"note": "a\u0000b"}, 422, "note"),
    ("post", "/admin/publish", {"note": "x" * 100_000}, 413, "FAQ_MAX_BODY_BYTES"),
    ("post", "/admin/publish", {"note": "x" * 1001}, 422, "note"),
    ("post", "/admin/publish", '{"note": "\\ud800"}', 422, "note"),
    ("post", "/admin/publish", "[" * 1000 + "]" * 1000, 400, "JSON"),
    ("post", "/admin/publish", "", 200, "nothing changed"),
    ("get", "/admin/diff?from=%D9%A3", None, 404, "no publication '٣'"),
    ("get", "/admin/diff?to=%C2%B2", None, 404, "no publication '²'"),
    ("get", "/admin/diff?from=%00", None, 422, "from"),
    ("get", "/admin/diff?from=" + "9" * 10_000, None, 422, "from"),
    ("get", "/admin/published?limit=0", None, 422, "limit"),
    ("post", "/match", {"query": "refund", "deployment": "staging"}, 422, "deployment"),
    ("post", "/match/batch", {"queries": [{"query": "a"}, {"query": "b", "deployment": "test"}]}, 422, "deployment"),
])
def test_hostile_input_gets_a_clear_4xx_and_changes_nothing(reviewed, method, path, body, status, says):
    client, store, _ = reviewed
    before = (store.publications.latest_id(), store.revision())
    kwargs = {"headers": {**bearer(ADMIN), "content-type": "application/json"}}
    if isinstance(body, str):
        kwargs["content"] = body.encode("utf-8", "surrogatepass")
    elif body is not None:
        kwargs["json"] = body
    response = getattr(client, method)(path, **kwargs)
    assert response.status_code == status, response.text
    assert says in response.text
    assert (store.publications.latest_id(), store.revision()) == before


def test_the_console_pages_refuse_hostile_ids_and_notes_with_a_page(reviewed):
    from tests.helpers.console import csrf_of

    client, store, _ = reviewed
    page = client.get("/console/login")
    client.post("/console/login", data={"csrf": csrf_of(page.text), "token": ADMIN})
    changes = client.get("/console/kbs/default/changes")
    assert changes.status_code == 200
    csrf = csrf_of(changes.text)
    for query, status in (("?from=%D9%A3", 404), ("?to=%C2%B2", 404), ("?from=" + "9" * 10_000, 422)):
        assert client.get("/console/kbs/default/changes" + query).status_code == status
    for path, data, status in (("rollback", {"to": "²"}, 404), ("rollback", {"to": "9" * 10_000}, 404),
                               ("publish", {"note": "x" * 1001}, 422), ("publish", {"note": "a\x00b"}, 422)):
        r = client.post(f"/console/kbs/default/{path}", data={"csrf": csrf, **data})
        assert r.status_code == status, (path, data, r.text[:300])
    assert store.publications.latest_id() == 1
