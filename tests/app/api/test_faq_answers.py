"""Answers per language (`answers`) through the API: the admin routes write, patch and return them (bad ones are
a 422 naming `answers.<code>`), and /match, /match/batch and the QnA Maker and Azure routes answer a query with
the FAQ's answer in the query's detected language when it has one, else its main answer; `answers` itself is
never in a /match response."""
from __future__ import annotations

import pytest

from app.store import KbRecord
from tests.helpers.api import KB, bearer, kb_records, serving

TOKEN = "s3cret-admin-token-of-32-characters"
AUTH = bearer(TOKEN)
REFUND_ES = "El reembolso vuelve a tu método de pago en 10 días."
REFUND_DE = "Die Erstattung geht innerhalb von 10 Tagen auf deine Zahlungsart."
SHIPPING_ES = "El envío estándar tarda de 3 a 5 días hábiles."
REFUND_ASKED_ES = "¿Cómo puedo conseguir un reembolso de mi dinero?"
SHIPPING_ASKED_ES = "¿Cuánto tarda el envío de mi pedido?"
ANSWERS = {"refund": {"es": REFUND_ES, "de": REFUND_DE}, "shipping_time": {"es": SHIPPING_ES}}


def records() -> list[KbRecord]:
    """The served test KB, refund and shipping_time with answers per language and a phrasing in Spanish."""
    out = []
    for r in kb_records():
        if r.answer is not None and r.faq_id in ANSWERS:
            r = KbRecord(r.faq_id, r.question, r.answer, r.tags, answers=ANSWERS[r.faq_id])
        out.append(r)
    out += [KbRecord("refund", REFUND_ASKED_ES), KbRecord("shipping_time", SHIPPING_ASKED_ES)]
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):
    with serving(tmp_path_factory.mktemp("faq_answers"), encoder, records(), TOKEN) as served:
        yield served


def ask(client, query: str, **body) -> dict:
    r = client.post("/match", json={"query": query, "top_k": 8, "threshold": 0.0, **body})
    assert r.status_code == 200, r.text
    return r.json()


def assert_in_language(body: dict, answers: dict[str, dict[str, str]] = ANSWERS) -> None:
    """Every entry's answer is its FAQ's answer in the response's language when it has one, else its main one."""
    language = body["language"]
    for entry in [body["answer"], *body["matches"], *body["options"]]:
        if entry is None:
            continue
        want = answers.get(entry["faq_id"], {}).get(language) or KB[entry["faq_id"]][0]
        assert entry["answer"] == want, (language, entry["faq_id"], entry["answer"])
        assert "answers" not in entry


def test_a_spanish_query_gets_the_spanish_answer_and_an_english_one_the_main_answer(served):
    client = served[0]
    spanish = ask(client, REFUND_ASKED_ES)
    assert spanish["language"] == "es" and "answers" not in spanish
    assert spanish["answer"]["faq_id"] == "refund" and spanish["answer"]["answer"] == REFUND_ES
    assert spanish["matches"][0]["answer"] == REFUND_ES
    assert_in_language(spanish)
    # the FAQs without a Spanish answer keep their main one in the same response
    others = [m for m in spanish["matches"] if m["faq_id"] not in ANSWERS]
    assert others and all(m["answer"] == KB[m["faq_id"]][0] for m in others)

    english = ask(client, "How do I get a refund?")
    assert english["language"] == "en" and english["answer"]["faq_id"] == "refund"
    assert english["answer"]["answer"] == KB["refund"][0] and english["matches"][0]["answer"] == KB["refund"][0]
    assert_in_language(english)

    again = ask(client, REFUND_ASKED_ES)  # from the query cache: still in the query's language
    assert again["cached"] is True and again["answer"]["answer"] == REFUND_ES
    shipping = ask(client, SHIPPING_ASKED_ES)
    assert shipping["answer"]["faq_id"] == "shipping_time" and shipping["answer"]["answer"] == SHIPPING_ES
    # a language the FAQ has no answer in, whichever FAQs rank: the main answers (German: refund's own)
    for query in ("Où en est le remboursement de ma commande ?", "Wie bekomme ich mein Geld zurück, bitte?"):
        body = ask(client, query)
        assert body["language"] in ("fr", "de") and body["matches"]
        assert_in_language(body)


def test_batches_choose_per_query(served):
    client = served[0]
    r = client.post("/match/batch", json={"queries": [{"query": REFUND_ASKED_ES, "threshold": 0.0},
                                                      {"query": "How do I get a refund?", "threshold": 0.0}]})
    assert r.status_code == 200, r.text
    spanish, english = r.json()["results"]
    assert (spanish["language"], english["language"]) == ("es", "en")
    assert spanish["matches"][0]["answer"] == REFUND_ES and english["matches"][0]["answer"] == KB["refund"][0]


def test_compat_routes_answer_in_the_questions_language(served):
    client, store = served[0], served[1]
    key = store.catalog.issue_token("default", "read")[1]
    qna = "/qnamaker/knowledgebases/default/generateAnswer"
    spanish = client.post(qna, json={"question": REFUND_ASKED_ES}, headers={"Authorization": f"EndpointKey {key}"})
    assert spanish.status_code == 200, spanish.text
    assert spanish.json()["answers"][0]["answer"] == REFUND_ES
    english = client.post(qna, json={"question": "How do I get a refund?"},
                          headers={"Authorization": f"EndpointKey {key}"}).json()
    assert english["answers"][0]["answer"] == KB["refund"][0]
    azure = client.post("/language/:query-knowledgebases", json={"question": SHIPPING_ASKED_ES},
                        params={"projectName": "default", "deploymentName": "production", "api-version": "2021-10-01"},
                        headers={"Ocp-Apim-Subscription-Key": key})
    assert azure.status_code == 200, azure.text
    assert azure.json()["answers"][0]["answer"] == SHIPPING_ES


def test_admin_crud_writes_answers_and_match_serves_them_at_once(served):
    client, store = served[0], served[1]
    assert client.get("/admin/faqs/refund", headers=AUTH).json()["answers"] == ANSWERS["refund"]
    before = store.revision()
    r = client.patch("/admin/faqs/refund", headers=AUTH, json={"answers": {"es": "Nuevo: 5 días.", "de": REFUND_DE}})
    assert r.status_code == 200 and r.json()["answers"] == {"es": "Nuevo: 5 días.", "de": REFUND_DE}, r.text
    assert store.revision() == before + 1
    assert client.patch("/admin/faqs/refund", headers=AUTH, json={"answers": {"de": REFUND_DE, "es": "Nuevo: 5 días."}}
                        ).status_code == 200 and store.revision() == before + 1, "the same answers change nothing"
    r = client.patch("/admin/faqs/refund", headers=AUTH, json={"answer": KB["refund"][0]})
    assert r.json()["answers"] == {"es": "Nuevo: 5 días.", "de": REFUND_DE}, "left out of a PATCH: kept"
    body = ask(client, REFUND_ASKED_ES)
    assert body["answer"]["faq_id"] == "refund" and body["answer"]["answer"] == "Nuevo: 5 días."

    new = {"faq_id": "gift_cards", "answer": "Gift cards never expire.", "questions": ["Do gift cards expire?"],
           "answers": {" IT ": "Le carte regalo non scadono mai.", "fr": "Les cartes cadeaux n'expirent jamais."}}
    r = client.post("/admin/faqs", headers=AUTH, json=new)
    assert r.status_code == 201, r.text
    assert r.json()["answers"] == {"it": "Le carte regalo non scadono mai.", "fr": "Les cartes cadeaux n'expirent jamais."}
    assert client.get("/admin/faqs/gift_cards", headers=AUTH).json()["answers"]["it"] == "Le carte regalo non scadono mai."
    r = client.put("/admin/faqs/gift_cards", headers=AUTH, json={"answer": "Never.", "questions": ["Expiry?"]})
    assert r.json()["answers"] == {}, "PUT resets what it leaves out"
    r = client.patch("/admin/faqs/refund", headers=AUTH, json={"answers": ANSWERS["refund"]})
    assert r.json()["answers"] == ANSWERS["refund"] and client.delete("/admin/faqs/gift_cards", headers=AUTH).status_code == 204


@pytest.mark.parametrize("answers, field", [
    ({"xx": "?"}, "answers.xx"),
    ({"es": ""}, "answers.es"),
    ({"es": "   "}, "answers.es"),
    ({"de": "x" * 20001}, "answers.de"),
    ({"fr": 3}, "answers.fr"),
    ({"es": "nul \u0000"}, "answers.es"),
    ({"ES": "uno", "es": "dos"}, "answers"),
    ({c: "x" for c in ("en", "es", "de", "fr", "it", "pt", "nl", "xx")}, "answers"),
    (["es"], "answers"),
])
def test_bad_answers_are_a_422_naming_the_field(served, answers, field):
    client, store = served[0], served[1]
    before = store.revision()
    for method, path, body in [("POST", "/admin/faqs", {"faq_id": "x", "answer": "a", "questions": ["q"], "answers": answers}),
                               ("PATCH", "/admin/faqs/refund", {"answers": answers}),
                               ("PUT", "/admin/faqs/refund", {"answer": "a", "questions": ["q"], "answers": answers})]:
        r = client.request(method, path, headers=AUTH, json=body)
        assert r.status_code == 422, (method, r.text)
        assert field in r.text, r.text
    assert client.get("/admin/faqs/x", headers=AUTH).status_code == 404 and store.revision() == before
    assert client.get("/admin/faqs/refund", headers=AUTH).json()["answers"] == ANSWERS["refund"]
