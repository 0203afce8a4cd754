"""Microsoft's own clients against the QnA Maker and Azure routes of a real server (uvicorn on a port, as
`faq serve` runs it): `azure-ai-language-questionanswering`'s QuestionAnsweringClient and `botbuilder-ai`'s
QnAMaker and QnAMakerDialog, pinned in the `test` extra. A bot moving here changes only its endpoint and key."""
from __future__ import annotations

import asyncio
import pytest

from app.api.main import create_app
from cli.serve import uvicorn_options
from tests.helpers.compat import imported_kbs
from tests.helpers.server import LiveServer

qa = pytest.importorskip("azure.ai.language.questionanswering", reason="pip install -e '.[test]'")
pytest.importorskip("botbuilder.ai.qna", reason="pip install -e '.[test]'")

from azure.core.credentials import AzureKeyCredential  # noqa: E402
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError  # noqa: E402

ADMIN = "clients-admin-token-0123456789abcdef01"


@pytest.fixture(scope="module")
def server(tmp_path_factory, encoder):
    """(url, keys): KB `gym` from the Azure project export, KB `bikes` from the QnA Maker TSV, served live."""
    settings, store, keys = imported_kbs(tmp_path_factory.mktemp("clients"), encoder, ADMIN)
    with LiveServer(create_app(settings, store=store, encoder=encoder), **uvicorn_options(settings)) as live:
        yield live.url, keys


def _client(url, key, version="2021-10-01"):
    from azure.ai.language.questionanswering import QuestionAnsweringClient

    return QuestionAnsweringClient(url, AzureKeyCredential(key), api_version=version, retry_total=0)


@pytest.mark.parametrize("version", ["2021-10-01", "2023-04-01"])
def test_question_answering_client_gets_answers(server, version):
    from azure.ai.language.questionanswering import models

    url, keys = server
    with _client(url, keys["gym"], version) as client:
        out = client.get_answers(question="can I pause my plan while I'm abroad", top=3,
                                 project_name="gym", deployment_name="production")
        best = out.answers[0]
        assert best.qna_id == 101 and best.confidence > 0.5 and best.source == "member-handbook.pdf"
        assert best.metadata == {"topic": "membership", "site": "all"}
        assert [(p.qna_id, p.display_text) for p in best.dialog.prompts] == [
            (102, "Freezing for medical reasons"), (104, "Cancel instead")]
        # the follow-up, chosen by context as Azure does it
        follow = client.get_answers(question="Freezing for medical reasons", project_name="gym",
                                    deployment_name="production",
                                    answer_context=models.KnowledgeBaseAnswerContext(previous_qna_id=101))
        assert follow.answers[0].qna_id == 102 and follow.answers[0].dialog.is_context_only
        # filters: metadata and source
        filters = models.QueryFilters(
            metadata_filter=models.MetadataFilter(metadata=[("topic", "classes")]),
            source_filter=["https://harbourgym.example/classes"], logical_operation="AND")
        filtered = client.get_answers(question="how do I book a spin class", filters=filters, project_name="gym",
                                      deployment_name="production")
        assert [a.qna_id for a in filtered.answers] == [108]
        # a qnaId lookup, and a question nothing in the KB answers
        looked_up = client.get_answers(qna_id=106, project_name="gym", deployment_name="production")
        assert looked_up.answers[0].answer.startswith("Dockside is open")
        none = client.get_answers(question="what's the capital of Peru", project_name="gym",
                                  deployment_name="production")
        assert [(a.qna_id, a.confidence) for a in none.answers] == [(-1, 0.0)]
        assert none.answers[0].answer.startswith("Sorry, I don't know that one yet")


def test_question_answering_client_raises_its_own_errors(server):
    url, keys = server
    with _client(url, "wrong-key") as client, pytest.raises(ClientAuthenticationError):
        client.get_answers(question="hours", project_name="gym", deployment_name="production")
    # a KB's key never learns whether another project exists (403); the deployment's admin token does
    with _client(url, ADMIN) as client, pytest.raises(ResourceNotFoundError):
        client.get_answers(question="hours", project_name="no-such", deployment_name="production")
    with _client(url, keys["bikes"]) as client, pytest.raises(HttpResponseError) as err:
        client.get_answers(question="hours", project_name="gym", deployment_name="production")
    assert err.value.status_code == 403
    with _client(url, keys["gym"]) as client, pytest.raises(HttpResponseError) as err:
        client.get_answers(question="hours", top=0, project_name="gym", deployment_name="production")
    assert err.value.status_code == 400 and err.value.error.code == "InvalidArgument"


def _turn(text: str):
    from botbuilder.core import TurnContext
    from botbuilder.core.adapters import TestAdapter
    from botbuilder.schema import Activity, ActivityTypes, ChannelAccount

    return TurnContext(TestAdapter(), Activity(type=ActivityTypes.message, text=text, channel_id="test",
                                               from_property=ChannelAccount(id="user-1", name="Rider")))


def test_botbuilder_qnamaker_gets_answers_from_a_turn(server):
    from botbuilder.ai.qna import QnAMaker, QnAMakerEndpoint, QnAMakerOptions
    from botbuilder.ai.qna.models import Metadata, QnARequestContext

    url, keys = server

    async def ask():
        qna = QnAMaker(QnAMakerEndpoint("bikes", keys["bikes"], f"{url}/qnamaker"), QnAMakerOptions(top=3))
        try:
            first = await qna.get_answers(_turn("my bike won't unlock"))
            filtered = await qna.get_answers(_turn("how much does it cost"), QnAMakerOptions(
                top=3, strict_filters=[Metadata(name="plan", value="monthly")]))
            prompt = await qna.get_answers(_turn("No phone with me"), QnAMakerOptions(
                context=QnARequestContext(previous_qna_id=1, previous_user_query="my bike won't unlock")))
            # 9 is context-only: a lookup reaches it as a question would, after the pair that prompts to it
            by_id = await qna.get_answers(_turn("anything"), QnAMakerOptions(
                qna_id=9, context=QnARequestContext(previous_qna_id=8)))
            out_of_context = await qna.get_answers(_turn("anything"), QnAMakerOptions(qna_id=9))
            none = await qna.get_answers_raw(_turn("what's the capital of Peru"))
            return first, filtered, prompt, by_id, out_of_context, none
        finally:
            await qna.close()

    first, filtered, prompt, by_id, out_of_context, none = asyncio.run(ask())
    assert first[0].id == 1 and 0.3 < first[0].score <= 1.0  # botbuilder divides our 0-100 score by 100
    assert [p.display_text for p in first[0].context.prompts] == ["It still won't open", "No phone with me"]
    assert {a.id for a in filtered} <= {5, 6} and filtered
    assert prompt[0].id == 3 and prompt[0].context.is_context_only
    assert by_id[0].id == 9 and by_id[0].answer.startswith("Open *History*")
    assert out_of_context == []  # the no-match answer, under the client's threshold
    assert none.answers == []  # the no-match answer (score 0) is under any threshold the client applies


def test_botbuilder_sees_a_wrong_key_fail(server):
    from botbuilder.ai.qna import QnAMaker, QnAMakerEndpoint

    url, _ = server

    async def ask():
        qna = QnAMaker(QnAMakerEndpoint("bikes", "wrong-key", f"{url}/qnamaker"))
        try:
            await qna.get_answers(_turn("hours"))
        finally:
            await qna.close()

    # botbuilder-ai reads "answers" without looking at the status: against QnA Maker's 401 it raises this too
    with pytest.raises(KeyError, match="answers"):
        asyncio.run(ask())


def test_botbuilder_qnamaker_dialog_follows_prompts_over_turns(server):
    from botbuilder.ai.qna.dialogs import QnAMakerDialog
    from botbuilder.core import ConversationState, MemoryStorage
    from botbuilder.core.adapters import TestAdapter
    from botbuilder.dialogs import DialogSet, DialogTurnStatus

    url, keys = server

    async def converse() -> list[tuple[str, str, list[str]]]:
        conversation = ConversationState(MemoryStorage())
        dialogs = DialogSet(conversation.create_property("DialogState"))
        dialogs.add(QnAMakerDialog("bikes", keys["bikes"], f"{url}/qnamaker"))

        async def logic(turn):
            dc = await dialogs.create_context(turn)
            if (await dc.continue_dialog()).status == DialogTurnStatus.Empty:
                await dc.begin_dialog("QnAMakerDialog")
            await conversation.save_changes(turn)

        adapter = TestAdapter(logic)
        said = []
        for text in ["how much is a ride", "Tell me about the monthly pass", "How do I cancel it?"]:
            await adapter.send(text)
            while adapter.activity_buffer:
                reply = adapter.activity_buffer.pop(0)
                cards = [a.content for a in reply.attachments or []]
                buttons = [b.title for c in cards for b in (getattr(c, "buttons", None) or [])]
                said.append((text, reply.text or (cards[0].text if cards else ""), buttons))
        return said

    said = asyncio.run(converse())
    assert said[0][0] == "how much is a ride" and said[0][1].startswith("A single ride costs")
    assert said[0][2] == ["Tell me about the monthly pass"]  # the prompt, shown as a button
    assert said[1][1].startswith("The monthly pass (€14.90)") and said[1][2] == ["How do I cancel it?"]
    assert said[2][1].startswith("Go to *Account › Passes* and tap **Cancel renewal**")
