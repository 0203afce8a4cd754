"""Microsoft's own clients reach a reviewed KB's draft the way they reach a test index or deployment:
botbuilder-ai's QnAMaker with `is_test`, and the QuestionAnsweringClient with `deployment_name="test"`, against a
real server (uvicorn on a port, as `faq serve` runs it). Production keeps answering the published KB."""
from __future__ import annotations

import asyncio

import pytest

from app.api.main import create_app
from app.release.publishing import start_reviewing
from cli.serve import uvicorn_options
from tests.helpers.compat import imported_kbs
from tests.helpers.server import LiveServer

pytest.importorskip("azure.ai.language.questionanswering", reason="pip install -e '.[test]'")
pytest.importorskip("botbuilder.ai.qna", reason="pip install -e '.[test]'")

from azure.core.credentials import AzureKeyCredential  # noqa: E402

ADMIN = "clients-draft-admin-token-0123456789abcd"
LOCKER = ("Lockers cost 2 euros a day; bring your own padlock.", ["Can I rent a locker?", "locker price per day"])


@pytest.fixture(scope="module")
def server(tmp_path_factory, encoder):
    """(url, keys): KBs `gym` and `bikes` turned reviewed, each with a draft FAQ `locker` not yet published."""
    settings, store, keys = imported_kbs(tmp_path_factory.mktemp("clients-draft"), encoder, ADMIN)
    for kb in ("gym", "bikes"):
        store.catalog.set_settings(kb, {**store.catalog.settings(kb), "publishing": "reviewed"})
        scoped = store.for_kb(kb)
        assert start_reviewing(scoped) is not None
        scoped.create_faq("locker", LOCKER[0], LOCKER[1])
    with LiveServer(create_app(settings, store=store, encoder=encoder), **uvicorn_options(settings)) as live:
        yield live.url, keys


def test_question_answering_client_reads_the_draft_on_the_test_deployment(server):
    from azure.ai.language.questionanswering import QuestionAnsweringClient

    url, keys = server
    with QuestionAnsweringClient(url, AzureKeyCredential(keys["gym"]), api_version="2023-04-01",
                                 retry_total=0) as client:
        test = client.get_answers(question="how much is a locker per day", project_name="gym", deployment_name="test")
        production = client.get_answers(question="how much is a locker per day", project_name="gym",
                                        deployment_name="production")
    assert test.answers[0].answer == LOCKER[0] and test.answers[0].confidence > 0.5
    assert all(a.answer != LOCKER[0] for a in production.answers)


def test_botbuilder_qnamaker_reads_the_draft_with_is_test(server):
    from botbuilder.ai.qna import QnAMaker, QnAMakerEndpoint, QnAMakerOptions
    from botbuilder.core import TurnContext
    from botbuilder.core.adapters import TestAdapter
    from botbuilder.schema import Activity, ActivityTypes, ChannelAccount

    url, keys = server

    def turn(text: str) -> TurnContext:
        return TurnContext(TestAdapter(), Activity(type=ActivityTypes.message, text=text, channel_id="test",
                                                   from_property=ChannelAccount(id="user-1", name="Rider")))

    async def ask():
        qna = QnAMaker(QnAMakerEndpoint("bikes", keys["bikes"], f"{url}/qnamaker"), QnAMakerOptions(top=3))
        try:
            test = await qna.get_answers(turn("can I rent a locker"), QnAMakerOptions(top=3, is_test=True))
            production = await qna.get_answers(turn("can I rent a locker"), QnAMakerOptions(top=3))
            return test, production
        finally:
            await qna.close()

    test, production = asyncio.run(ask())
    assert test and test[0].answer == LOCKER[0]
    assert all(a.answer != LOCKER[0] for a in production)
