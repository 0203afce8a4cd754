"""Every /match response says the query's language (ISO 639-1); a KB that answers only some languages
(`languages`, FAQ_LANGUAGES) refuses a query clearly in another one with `abstain` and reason "language",
and still answers its own languages and messages too short to judge."""
from __future__ import annotations

from tests.helpers.api import kb_records, serving

TOKEN = "s3cret-admin-token-of-32-characters"
GERMAN = "wie kann ich mein passwort zuruecksetzen"


def ask(client, query):
    r = client.post("/match", json={"query": query})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_language_is_returned_and_every_language_is_matched_by_default(tmp_path, encoder):
    with serving(tmp_path, encoder, kb_records(), TOKEN) as (client, *_):
        english = ask(client, "how do I reset my password?")
        assert english["language"] == "en" and english["reason"] is None
        assert english["matches"][0]["faq_id"] == "reset_password"
        body = ask(client, GERMAN)
        assert body["language"] == "de" and body["reason"] is None and body["matches"]
        batch = client.post("/match/batch", json={"queries": [{"query": "donde esta mi pedido, ya pasaron dos semanas"},
                                                             {"query": "how long does shipping take"}]}).json()
        assert [r["language"] for r in batch["results"]] == ["es", "en"]


def test_a_deployment_answering_english_refuses_other_languages(tmp_path, encoder):
    with serving(tmp_path, encoder, kb_records(), TOKEN, languages="en") as (client, *_):
        body = ask(client, GERMAN)
        assert (body["decision"], body["reason"], body["answer"], body["options"]) == ("abstain", "language", None, [])
        assert body["language"] == "de"
        assert ask(client, "how do I reset my password?")["decision"] == "answer"
        assert ask(client, "passwort reset")["reason"] is None  # two words: too short to refuse


def test_a_kb_sets_its_languages_and_the_next_query_follows(tmp_path, encoder):
    from fastapi.testclient import TestClient

    from app.api.main import create_app

    with serving(tmp_path, encoder, kb_records(), TOKEN) as (_, store, settings):
        pass
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        assert ask(client, GERMAN)["reason"] is None
        store.catalog.set_settings("default", {"languages": ["en", "es"]})
        app.state.housekeeping.poll_all()
        assert ask(client, GERMAN)["reason"] == "language"
        assert ask(client, "como cambio el correo de mi cuenta")["reason"] is None
        store.catalog.set_settings("default", {"languages": ["de"]})
        app.state.housekeeping.poll_all()
        assert ask(client, GERMAN)["reason"] is None
        assert ask(client, "I want my money back please")["reason"] == "language"
