"""`filter` on /match and /match/batch: only the FAQs it keeps are candidates, on every arm and for FAQs
added since the build; search inside it is exact (the Annoy path too); a malformed filter is a 422 naming
the part at fault, and changes nothing."""
from __future__ import annotations

import json

import numpy as np
import pytest

from app.store import KbRecord
from index.artifacts import BuildRegistry
from index.retriever import Retriever
from kb.filters import parse_filter
from tests.helpers.api import KB, build, make_settings, make_store, serving

TOKEN = "s3cret-admin-token-of-32-characters"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TEAM = {"reset_password": "account", "change_email": "account", "delete_account": "account",
        "cancel_order": "orders", "shipping_time": "orders", "refund": "orders"}
ORDERS = {f for f, t in TEAM.items() if t == "orders"}


def records() -> list[KbRecord]:
    out = []
    for faq_id, (answer, questions) in KB.items():
        for i, q in enumerate(questions):
            first = i == 0
            out.append(KbRecord(
                faq_id, q, answer if first else None, (["store"] if faq_id == "opening_hours" else []) if first else None,
                metadata=({"Team": TEAM[faq_id].title()} if faq_id in TEAM else {}) if first else None,
                source=("payments.pdf" if faq_id == "payment_methods" else None) if first else None))
    return out


@pytest.fixture
def served(tmp_path, encoder):  # noqa: F811
    with serving(tmp_path, encoder, records(), TOKEN) as (client, store, settings):
        yield client, store, settings


def ids(body: dict) -> list[str]:
    return [m["faq_id"] for m in body["matches"]]


@pytest.mark.parametrize("arm", ["ann", "lexical"])
def test_only_the_filtered_faqs_are_candidates_and_decided_on(served, arm):
    client, _, _ = served
    flt = {"all": [{"key": " TEAM ", "value": "orders"}]}
    body = client.post("/match", json={"query": "How do I reset my password?", "top_k": 10, "arm": arm,
                                       "filter": flt}).json()
    assert set(ids(body)) <= ORDERS and body["decision"] != "answer" or body["answer"]["faq_id"] in ORDERS
    assert body["matches"] and all(m["metadata"] == {"team": "Orders"} for m in body["matches"])
    right = client.post("/match", json={"query": "how long until my parcel arrives", "arm": arm, "filter": flt}).json()
    assert ids(right)[0] == "shipping_time"
    unfiltered = client.post("/match", json={"query": "How do I reset my password?", "arm": arm}).json()
    assert ids(unfiltered)[0] == "reset_password"


def test_any_none_tags_and_source(served):
    client, _, _ = served
    flt = {"any": [{"tag": "STORE"}, {"source": "payments.pdf"}], "none": [{"key": "team", "value": "account"}]}
    body = client.post("/match", json={"query": "Can I pay with PayPal?", "top_k": 10, "filter": flt}).json()
    assert set(ids(body)) == {"opening_hours", "payment_methods"} and ids(body)[0] == "payment_methods"
    assert body["matches"][0]["source"] == "payments.pdf"
    nothing = client.post("/match", json={"query": "Can I pay with PayPal?", "filter": {"all": [{"tag": "none"}]}})
    assert nothing.status_code == 200 and nothing.json()["matches"] == [] and nothing.json()["decision"] == "abstain"
    everything = client.post("/match", json={"query": "Can I pay with PayPal?", "filter": {}}).json()
    assert ids(everything)[0] == "payment_methods"


def test_a_batch_mixes_filters_and_a_new_faq_is_filtered_too(served):
    client, store, _ = served
    new = {"faq_id": "return_label", "answer": "Print the label from Orders > Returns.",
           "questions": ["Where do I get a return label?"], "metadata": {"team": "orders"}}
    assert client.post("/admin/faqs", headers=AUTH, json=new).status_code == 201
    queries = [{"query": "I need a label to send the parcel back", "filter": {"all": [{"key": "team", "value": "orders"}]}},
               {"query": "I need a label to send the parcel back", "filter": {"none": [{"key": "team", "value": "orders"}]}},
               {"query": "I need a label to send the parcel back"}]
    results = client.post("/match/batch", json={"queries": queries}).json()["results"]
    assert ids(results[0])[0] == "return_label" and set(ids(results[0])) <= ORDERS | {"return_label"}
    assert not set(ids(results[1])) & (ORDERS | {"return_label"})
    assert "return_label" in ids(results[2])


@pytest.mark.parametrize("flt, field, words", [
    ({"all": [{"key": "team"}]}, "filter.all[0].value", "required"),
    ({"all": [{"key": "team", "value": "orders"}], "any": [{"tag": ""}]}, "filter.any[0].tag", "empty"),
    ({"some": []}, "filter", "some"),
    ({"none": [{"tag": "a", "source": "b"}]}, "filter.none[0]", "exactly one of"),
    ({"all": [{"tag": f"t{i}"} for i in range(51)]}, "filter", "50"),
    ({"all": "team"}, "filter.all", "list"),
    ({"all": [{"tag": "a\x00b"}]}, "filter.all[0].tag", "NUL"),
    ({"any": [{"key": "team", "value": "x\ud800"}]}, "filter.any[0].value", "surrogate"),
    ({"all": [{"tag\ud800": "x"}]}, "filter.all[0]", "tag"),
])
def test_a_malformed_filter_is_a_422_naming_the_part(served, flt, field, words):
    client, store, _ = served
    before = store.revision()
    def post(path, body):  # json.dumps escapes a lone surrogate as \ud800, as a client's JSON would carry it
        return client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})

    r = post("/match", {"query": "refund?", "filter": flt})
    assert r.status_code == 422, r.text
    [err] = r.json()["detail"]
    assert err["field"] == field and words in err["message"], err
    r = post("/match/batch", {"queries": [{"query": "refund?"}, {"query": "refund?", "filter": flt}]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == field.replace("filter", "queries[1].filter", 1)
    assert client.post("/match", json={"query": "refund?", "filter": "team=orders"}).status_code == 422
    assert store.revision() == before


def test_filtered_search_is_exact_on_every_path(tmp_path, encoder, monkeypatch):  # noqa: F811
    """The matrix product, an Annoy build scoring the selected vectors, and an Annoy build asked deeper all
    return the exact top k inside the filter."""
    import index.retriever as retriever_module

    settings = make_settings(tmp_path)
    store = make_store(settings, records())
    build(store, encoder, settings)
    registry = BuildRegistry(settings.index_dir)
    flt = parse_filter({"none": [{"key": "team", "value": "account"}]})
    queries = encoder.encode(["How do I reset my password?", "parcel late", "open on sunday?", "pay by card"])

    def top(retriever):
        sel = retriever.select(flt)
        return [[(h.variant_id, round(h.cosine, 5)) for h in row] for row in retriever.search(queries, 6, sel)]

    exact = Retriever.load(registry.current_dir()).with_kb(store.snapshot(), encoder)
    expected = top(exact)
    allowed = exact.select(flt).faq_ids
    assert allowed == set(KB) - {"reset_password", "change_email", "delete_account"}
    monkeypatch.setattr(retriever_module, "EXACT_MAX_CELLS", 0)
    annoy = Retriever.load(registry.current_dir()).with_kb(store.snapshot(), encoder)
    assert annoy._exact is None and top(annoy) == expected
    monkeypatch.setattr(retriever_module, "SELECTED_MAX_CELLS", 0)
    deeper = Retriever.load(registry.current_dir()).with_kb(store.snapshot(), encoder)
    assert top(deeper) == expected
    for row in deeper.search(queries, 6, deeper.select(flt)):
        assert {h.faq_id for h in row} <= allowed and len(row) == 6
    vectors = np.asarray(queries)
    assert len(exact.search(vectors, 100, exact.select(parse_filter({"all": [{"tag": "store"}]})))[0]) == 3


def test_a_filter_hiding_the_questions_own_faq_does_not_make_a_weak_candidate_certain(served, monkeypatch):
    from app.match import candidates

    client, _, _ = served
    body = {"query": "How do I reset my password?", "top_k": 3, "threshold": 0.5,
            "filter": {"all": [{"key": "team", "value": "orders"}]}}
    with_rival = client.post("/match", json=body).json()
    monkeypatch.setattr(candidates, "RIVAL_MARGIN", 10.0)  # no FAQ outside the filter ever competes
    alone = client.post("/match", json={**body, "top_k": 4}).json()  # another top_k: not the cached result
    assert set(ids(with_rival)) <= ORDERS and set(ids(alone)) <= ORDERS
    assert with_rival["matches"][0]["score"] < alone["matches"][0]["score"]
    assert with_rival["decision"] != "answer"
    # a question about an FAQ inside the filter is answered as before
    monkeypatch.setattr(candidates, "RIVAL_MARGIN", 0.1)
    right = client.post("/match", json={**body, "query": "how long until my parcel arrives"}).json()
    assert right["decision"] == "answer" and right["answer"]["faq_id"] == "shipping_time"
