"""The QnA Maker and Azure question answering routes (app/api/routes/qnamaker.py, azure.py) over HTTP: every
request field mapped, answers as each service writes them, context and context-only pairs, the no-match
answer, and every refusal in the service's own error shape."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.api.main import create_app
from tests.helpers.compat import imported_kbs

ADMIN = "compat-admin-token-0123456789abcdef0123"
QNA = "/qnamaker/knowledgebases/{kb}/generateAnswer"
AZURE = "/language/:query-knowledgebases"


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):
    """(client, read key of `gym`, read key of `bikes`): the Azure fixture as KB `gym`, with its synonyms and
    default answer, and the QnA Maker fixture as KB `bikes`."""
    settings, store, keys = imported_kbs(tmp_path_factory.mktemp("compat"), encoder, ADMIN)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        yield client, keys["gym"], keys["bikes"]


def qna(client, key, body, kb="bikes"):
    return client.post(QNA.format(kb=kb), json=body, headers={"Authorization": f"EndpointKey {key}"})


def azure(client, key, body, project="gym", version="2021-10-01", deployment="production"):
    params = {"projectName": project, "deploymentName": deployment, "api-version": version}
    return client.post(AZURE, params={k: v for k, v in params.items() if v is not None}, json=body,
                       headers={"Ocp-Apim-Subscription-Key": key})


def test_generate_answer_writes_qnamaker_fields_on_its_scale(served):
    client, _, bikes = served
    r = qna(client, bikes, {"question": "how do i unlock one of your bikes", "top": 3})
    assert r.status_code == 200
    body = r.json()
    first = body["answers"][0]
    assert first["id"] == 1 and first["questions"][0] == "How do I unlock a bike?"
    assert 50 <= first["score"] <= 100  # our probability, on QnA Maker's 0-100 scale
    assert first["metadata"] == [{"name": "topic", "value": "riding"}, {"name": "channel", "value": "app"}]
    assert first["source"] == "Editorial"
    assert first["context"] == {"isContextOnly": False, "prompts": [
        {"displayOrder": 0, "qnaId": 2, "displayText": "It still won't open", "qna": None},
        {"displayOrder": 1, "qnaId": 3, "displayText": "No phone with me", "qna": None}]}
    assert body["faqMatch"]["decision"] == "answer" and body["faqMatch"]["faqId"] == "1"
    assert all(a["score"] > 0 for a in body["answers"]) and len(body["answers"]) <= 3


def test_a_prompt_followed_with_its_context_lands_on_its_target_and_context_only_needs_it(served):
    client, _, bikes = served
    follow = qna(client, bikes, {"question": "No phone with me", "context": {"previousQnAId": 1}}).json()
    assert follow["answers"][0]["id"] == 3 and follow["answers"][0]["context"]["isContextOnly"] is True
    assert follow["faqMatch"]["context"] == "follow_up"
    alone = qna(client, bikes, {"question": "No phone with me", "top": 5}).json()
    assert 3 not in [a["id"] for a in alone["answers"]]  # a context-only pair is never answered without it
    # botbuilder's dialog sends the prompt's qnaId as well; qnaId 0 means none
    by_id = qna(client, bikes, {"question": "No phone with me", "qnaId": 3, "context": {"previousQnAId": 1}}).json()
    assert by_id["answers"][0]["id"] == 3 and by_id["answers"][0]["score"] == 100.0
    zero = qna(client, bikes, {"question": "how much is a ride", "qnaId": 0, "context": {}}).json()
    assert zero["answers"][0]["id"] == 4


def test_strict_filters_and_their_compound_operation(served):
    client, _, bikes = served
    only_billing = qna(client, bikes, {"question": "how much does it cost", "top": 5,
                                       "strictFilters": [{"name": "topic", "value": "billing"}]}).json()
    assert {a["id"] for a in only_billing["answers"]} <= {8, -1}
    either = qna(client, bikes, {"question": "how much does it cost", "top": 5, "strictFiltersCompoundOperationType": "OR",
                                 "strictFilters": [{"name": "topic", "value": "billing"},
                                                   {"name": "topic", "value": "pricing"}]}).json()
    assert either["answers"][0]["id"] == 4
    both = qna(client, bikes, {"question": "how much does it cost", "top": 5,
                               "strictFilters": [{"name": "topic", "value": "pricing"},
                                                 {"name": "plan", "value": "monthly"}]}).json()
    assert {a["id"] for a in both["answers"]} <= {5, 6, -1}


def test_no_good_match_is_each_services_default_answer(served):
    client, gym, bikes = served
    none = qna(client, bikes, {"question": "what is the capital of peru"}).json()
    assert none["answers"] == [{"questions": [], "answer": "No good match found in KB.", "score": 0.0, "id": -1,
                                "source": None, "metadata": []}]
    assert none["faqMatch"]["decision"] == "abstain"
    project = azure(client, gym, {"question": "what is the capital of peru"}).json()
    assert project["answers"] == [{"questions": [], "answer": "Sorry, I don't know that one yet. Ask at reception or "
                                   "call 020 7946 0321.", "confidenceScore": 0.0, "id": -1, "metadata": {}}]


def test_query_knowledgebases_writes_azure_fields_for_both_versions(served):
    client, gym, _ = served
    for version in ("2021-10-01", "2023-04-01"):
        body = azure(client, gym, {"question": "can i freeze my membership", "top": 2}, version=version).json()
        first = body["answers"][0]
        assert first["id"] == 101 and 0.5 <= first["confidenceScore"] <= 1.0
        assert first["metadata"] == {"topic": "membership", "site": "all"} and first["source"] == "member-handbook.pdf"
        assert first["dialog"]["prompts"] == [
            {"displayOrder": 0, "qnaId": 102, "displayText": "Freezing for medical reasons"},
            {"displayOrder": 1, "qnaId": 104, "displayText": "Cancel instead"}]
    medical = azure(client, gym, {"question": "Freezing for medical reasons", "context": {"previousQnaId": 101}}).json()
    assert medical["answers"][0]["id"] == 102 and medical["answers"][0]["dialog"]["isContextOnly"] is True
    lookup = azure(client, gym, {"qnaId": 107}).json()
    assert lookup["answers"][0]["questions"] == ["Can I bring a friend?", "guest pass price"]
    assert lookup["answers"][0]["confidenceScore"] == 1.0


def test_azure_filters_metadata_and_sources(served):
    client, gym, _ = served
    by_source = azure(client, gym, {"question": "how much", "top": 5,
                                    "filters": {"sourceFilter": ["https://harbourgym.example/prices"]}}).json()
    assert {a["id"] for a in by_source["answers"]} <= {103, -1}
    meta_or_source = azure(client, gym, {"question": "opening hours", "top": 8, "filters": {
        "metadataFilter": {"metadata": [{"key": "site", "value": "dockside"}], "logicalOperation": "AND"},
        "sourceFilter": ["https://harbourgym.example/clubs"], "logicalOperation": "OR"}}).json()
    assert {a["id"] for a in meta_or_source["answers"]} <= {105, 106, -1}
    assert meta_or_source["answers"][0]["id"] == 106


def test_synonyms_bring_the_kbs_own_word(served):
    client, gym, _ = served
    state = client.app.state.resident_kbs.get("gym")
    rewrite = state.rewrites.for_retriever(state.settings.synonyms, state.require_retriever())
    assert rewrite("can I Put On Hold my subscription?") == "can I freeze my membership?"
    assert rewrite("my plan's wi-fi") == "my membership's wifi"
    body = azure(client, gym, {"question": "is there wireless internet"}).json()
    assert body["answers"][0]["id"] == 105


@pytest.mark.parametrize("body,target", [({"question": "x", "top": 0}, "top"), ({"question": "x", "top": "many"}, "top"),
                                         ({"question": "x", "scoreThreshold": 101}, "scoreThreshold"),
                                         ({"top": 1}, "question"), ({"question": "x\u0000"}, "question"),
                                         ({"question": "x", "strictFilters": [{"name": ""}]}, "strictFilters.0.name")])
def test_qnamaker_refuses_bad_input_as_badargument(served, body, target):
    client, _, bikes = served
    r = qna(client, bikes, body)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "BadArgument" and r.json()["error"]["target"] == target


def test_qnamaker_keys_and_knowledge_bases(served):
    client, gym, bikes = served
    wrong = qna(client, "not-a-key", {"question": "x"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "Unauthorized"
    missing = client.post(QNA.format(kb="bikes"), json={"question": "x"})
    assert missing.status_code == 401
    other = qna(client, gym, {"question": "x"})  # the gym's key on the bikes KB
    assert other.status_code == 403 and other.json()["error"]["code"] == "Forbidden"
    unknown = qna(client, ADMIN, {"question": "x"}, kb="nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "KbNotFound"
    raw = client.post(QNA.format(kb="bikes"), content=b"{not json", headers={"Authorization": f"EndpointKey {bikes}",
                                                                          "content-type": "application/json"})
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "BadArgument"


def test_azure_refusals_in_azures_shape(served):
    client, gym, bikes = served
    version = azure(client, gym, {"question": "x"}, version="2020-01-01")
    assert version.status_code == 404 and version.json()["error"]["code"] == "404"
    wrong = azure(client, "nope", {"question": "x"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "401"
    other = azure(client, bikes, {"question": "x"})
    assert other.status_code == 403
    unknown = azure(client, ADMIN, {"question": "x"}, project="nowhere")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "ProjectNotFound"
    assert unknown.json()["error"]["innererror"]["code"] == "KnowledgeBaseNotFound"
    both = azure(client, gym, {"question": "x", "qnaId": 101}, version="2023-04-01")
    assert both.status_code == 400 and both.headers["x-ms-error-code"] == "InvalidArgument"
    assert both.json()["error"]["details"][0]["target"] == "qnaId"
    empty = azure(client, gym, {})
    assert empty.status_code == 400 and "'Question' must not be empty" in empty.json()["error"]["message"]
    no_deployment = azure(client, gym, {"question": "x"}, deployment=None)
    assert no_deployment.status_code == 400 and no_deployment.json()["error"]["details"][0]["target"] == "deploymentName"
    threshold = azure(client, gym, {"question": "x", "confidenceScoreThreshold": 2})
    assert threshold.status_code == 400 and threshold.json()["error"]["details"][0]["target"] == "confidenceScoreThreshold"


def test_the_deployment_wide_settings_serve_every_kb(tmp_path, encoder):
    """FAQ_SYNONYMS and FAQ_DEFAULT_ANSWER, set for the deployment rather than per KB."""
    from tests.helpers.api import kb_records, serving

    with serving(tmp_path, encoder, kb_records(), ADMIN, synonyms=[["password", "passcode", "pin"]],
                 default_answer="Please ask at the front desk.") as (client, _, _):
        none = client.post(QNA.format(kb="default"), json={"question": "what is the capital of peru"},
                           headers={"Authorization": f"EndpointKey {ADMIN}"}).json()
        assert none["answers"][0]["answer"] == "Please ask at the front desk." and none["answers"][0]["id"] == -1
        state = client.app.state.resident_kbs.default
        rewrite = state.rewrites.for_retriever(state.settings.synonyms, state.require_retriever())
        assert rewrite("I forgot my PIN") == "I forgot my password"
        matched = client.post("/match", json={"query": "I forgot my PIN"}).json()
        assert matched["query"] == "I forgot my PIN" and matched["answer"]["faq_id"] == "reset_password"
