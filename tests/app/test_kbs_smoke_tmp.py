from fastapi.testclient import TestClient
from app.api.main import create_app
from kb.records import KbRecord
from test_api_contract import build, encoder, make_settings, make_store  # noqa: F401

def test_two_kbs(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path, admin_token="root")
    store = make_store(settings)
    build(store, encoder, settings)
    store.kbs.create("shop")
    shop = store.for_kb("shop")
    shop.import_records([KbRecord("pets", "Can I bring my dog?", "Dogs are welcome on a leash."),
                         KbRecord("parking", "Where do I park?", "Park behind the store.")])
    build(shop, encoder, settings.for_kb("shop"))
    _, token = store.kbs.issue_token("shop")
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        r = client.post("/kbs/shop/match", json={"query": "is my dog allowed"})
        assert r.status_code == 200, r.text
        assert r.json()["matches"][0]["faq_id"] == "pets"
        r = client.post("/match", json={"query": "is my dog allowed"})
        assert r.json()["matches"][0]["faq_id"] != "pets"
        assert client.post("/kbs/nope/match", json={"query": "x"}).status_code == 404
        assert client.post("/kbs/No!/match", json={"query": "x"}).status_code == 422
        h = {"Authorization": f"Bearer {token}"}
        assert client.get("/kbs/shop/admin/faqs", headers=h).status_code == 200
        assert client.get("/admin/faqs", headers=h).status_code == 403
        assert client.get("/kbs/nope/admin/faqs", headers=h).status_code == 403
        assert client.get("/kbs/nope/admin/faqs", headers={"Authorization": "Bearer root"}).status_code == 404
        r = client.post("/kbs/shop/admin/faqs", headers=h, json={"faq_id": "wifi", "answer": "Free wifi: guest", "questions": ["is there wifi"]})
        assert r.status_code == 201, r.text
        assert client.post("/kbs/shop/match", json={"query": "is there wifi"}).json()["matches"][0]["faq_id"] == "wifi"
        assert client.get("/admin/faqs/wifi", headers={"Authorization": "Bearer root"}).status_code == 404
        rid = client.post("/kbs/shop/match", json={"query": "parking?"}).json()["request_id"]
        assert client.post("/feedback", json={"request_id": rid, "correct": True}).status_code == 404
        assert client.post("/kbs/shop/feedback", json={"request_id": rid, "correct": True}).status_code == 200
