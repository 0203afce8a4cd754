"""/match on text in a script no supported language uses: the response names the text's own language (never one
of the supported ones), a KB answering only some languages refuses it with `abstain` and reason "language",
however short it is, and a KB without `languages` still matches it. English with foreign names stays answered."""
from __future__ import annotations

import pytest
from hypothesis import given, settings as hyp_settings, strategies as st

from models.language import SUPPORTED
from tests.helpers.api import kb_records, serving

TOKEN = "s3cret-admin-token-of-32-characters"
OTHER_SCRIPTS = {"ja": "パスワードを忘れました", "zh": "我忘记密码了怎么办", "he": "שכחתי את הסיסמה מה עושים",
                 "ru": "забыл пароль что делать", "ar": "نسيت كلمة المرور ماذا أفعل", "ko": "비밀번호를 잊어버렸어요",
                 "el": "ξέχασα τον κωδικό μου τι κάνω"}


def ask(client, query):
    r = client.post("/match", json={"query": query})
    assert r.status_code == 200, r.text
    return r.json()


def test_other_scripts_are_named_and_refused_by_a_kb_with_languages(tmp_path, encoder):
    with serving(tmp_path, encoder, kb_records(), TOKEN, languages="en,de") as (client, *_):
        for code, query in OTHER_SCRIPTS.items():
            body = ask(client, query)
            assert body["language"] == code, (query, body["language"])
            assert (body["decision"], body["reason"], body["answer"], body["options"]) == (
                "abstain", "language", None, []), query
        names = ask(client, "Jürgen Müller password reset")
        assert names["reason"] is None and names["language"] not in OTHER_SCRIPTS
        batch = client.post("/match/batch", json={"queries": [{"query": "how do i reset my パスワード"},
                                                             {"query": "パスワードを忘れました help"}]}).json()
        assert [(r["language"], r["reason"]) for r in batch["results"]] == [("en", None), ("ja", "language")]


def test_a_kb_without_languages_still_matches_other_scripts(tmp_path, encoder):
    with serving(tmp_path, encoder, kb_records(), TOKEN) as (client, *_):
        body = ask(client, OTHER_SCRIPTS["ru"])
        assert body["language"] == "ru" and body["reason"] is None and body["matches"]


_scripts = st.sampled_from([(0x0430, 0x044F), (0x4E00, 0x9FA5), (0x05D0, 0x05EA), (0xAC00, 0xD7A3), (0x0627, 0x064A)])


@pytest.fixture(scope="module")
def gated(tmp_path_factory, encoder):
    """One served KB answering English only, for every generated example (a build takes seconds)."""
    with serving(tmp_path_factory.mktemp("gated"), encoder, kb_records(), TOKEN, languages="en") as (client, *_):
        yield client


@hyp_settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_generated_text_in_another_script_is_refused_by_a_gated_kb(gated, data):
    lo, hi = data.draw(_scripts)
    words = data.draw(st.lists(st.text(st.characters(min_codepoint=lo, max_codepoint=hi, categories=("Lo", "Ll")),
                                       min_size=2, max_size=7), min_size=1, max_size=6))
    body = ask(gated, " ".join(words))
    assert body["language"] not in SUPPORTED and (body["decision"], body["reason"]) == ("abstain", "language"), body
