"""The console's Small talk page: a KB turns small talk on or off, picks a persona and writes its own answers;
/match follows from the next request on, the settings are the ones `faq kb settings` shows, bad input is a
422 naming the field that changes nothing, and another KB's token cannot reach the page."""
from __future__ import annotations

import pytest
from app.conversation.small_talk.answers import load_answers
from tests.helpers.console import assert_headers, csrf_of, served_kbs, sign_in

ROOT = "console-smalltalk-token-of-32-characters"
PAGE = "/console/kbs/shop/smalltalk"
SHIPPED = load_answers()["personas"]


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    with served_kbs(tmp_path_factory.mktemp("console_smalltalk"), encoder, ROOT, "default") as served:
        yield served


def reply(client, text: str) -> dict:
    body = client.post("/kbs/shop/match", json={"query": text}).json()
    return {"decision": body["decision"], **(body["chitchat"] or {})}


def test_persona_own_answers_and_off_apply_to_match(served):
    _, store, _, client = served
    page, _ = sign_in(served, ROOT)
    shown = page.get(PAGE)
    assert shown.status_code == 200 and 'id="enabled" name="enabled" checked' in shown.text
    assert_headers(shown)
    assert 'href="/console/kbs/shop/smalltalk">Small talk</a>' in shown.text, "the nav links the page"
    form = {"csrf": csrf_of(shown.text), "enabled": "on", "persona": "witty", "answers_thanks": "Any time!\n\nCheers!\n"}
    saved = page.post(PAGE, data=form, follow_redirects=True)
    assert saved.status_code == 200 and "Small talk saved" in saved.text and "Any time!\nCheers!" in saved.text
    assert store.catalog.settings("shop") == {"small_talk": True, "small_talk_persona": "witty",
                                              "small_talk_answers": {"thanks": ["Any time!", "Cheers!"]}}
    assert reply(client, "thank you so much")["answer"] in ("Any time!", "Cheers!")
    assert reply(client, "hello there")["answer"] in SHIPPED["witty"]["greeting"]
    assert client.post("/match", json={"query": "hello there"}).json()["chitchat"]["answer"] in \
        SHIPPED["professional"]["greeting"], "the other KB keeps its own"
    off = page.post(PAGE, data={"csrf": form["csrf"], "persona": "witty"}, follow_redirects=True)
    assert off.status_code == 200 and 'name="enabled" checked' not in off.text
    assert reply(client, "hello there")["decision"] != "chitchat"
    assert store.catalog.settings("shop") == {"small_talk": False, "small_talk_persona": "witty"}


def test_bad_input_names_the_field_and_changes_nothing(served):
    _, store, tokens, _ = served
    page, _ = sign_in(served, ROOT)
    csrf = csrf_of(page.get(PAGE).text)
    before = store.catalog.settings("shop")
    bad = page.post(PAGE, data={"csrf": csrf, "enabled": "on", "persona": "pirate"})
    assert bad.status_code == 422 and 'id="persona-error"' in bad.text and "professional" in bad.text
    long = page.post(PAGE, data={"csrf": csrf, "enabled": "on", "persona": "friendly", "answers_help": "x" * 1001})
    assert long.status_code == 422 and 'id="answers-error"' in long.text and "1000" in long.text
    assert page.post(PAGE, data={"persona": "friendly"}).status_code == 403  # no CSRF token
    assert store.catalog.settings("shop") == before
    other, _ = sign_in(served, tokens["admin"])  # the default KB's
    assert other.get(PAGE).status_code == 403
