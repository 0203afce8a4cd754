"""Small-talk answers and the default answer are sent to clients as they are stored, so they are held to the
rule every stored text keeps (kb/records.py `text_problem`, as synonyms are): NUL or a lone surrogate anywhere
in one is refused naming the setting, the kind and the answer, for a KB (`faq kb settings`, the console) and
for the deployment (FAQ_SMALL_TALK_ANSWERS, FAQ_DEFAULT_ANSWER) alike."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st
from pydantic import ValidationError

from app.conversation.small_talk.answers import KINDS
from app.settings import KbSettings, Settings, storable_problem
from kb.records import text_problem

clean = st.text(st.characters(exclude_categories=("Cs", "Cc", "Z")), min_size=1, max_size=40)
bad_char = st.sampled_from(["\x00", "\ud800", "\udfff", "\udc80"])


@st.composite
def poisoned(draw) -> tuple[str, str, int, list[str]]:
    """(kind, bad char, index of the poisoned answer, answers): one answer with `bad char` somewhere in it."""
    answers = draw(st.lists(clean, min_size=1, max_size=5))
    at = draw(st.integers(0, len(answers) - 1))
    text, char = answers[at], draw(bad_char)
    cut = draw(st.integers(0, len(text)))
    answers[at] = text[:cut] + char + text[cut:]
    return draw(st.sampled_from(KINDS)), char, at, answers


@pytest.mark.parametrize("model", [KbSettings, Settings], ids=["kb", "deployment"])
@given(case=poisoned())
def test_a_small_talk_answer_that_is_not_storable_text_is_refused_naming_it(model, case):
    kind, char, at, answers = case
    with pytest.raises(ValidationError) as refused:
        model(small_talk_answers={kind: answers})
    message = str(refused.value)
    assert f"small_talk_answers.{kind}[{at}]: " in message
    assert ("NUL" if char == "\x00" else "unpaired surrogate") in message


@pytest.mark.parametrize("model", [KbSettings, Settings], ids=["kb", "deployment"])
@given(kind=st.sampled_from(KINDS), answers=st.lists(clean, min_size=1, max_size=5))
def test_storable_small_talk_answers_are_kept(model, kind, answers):
    kept = model(small_talk_answers={kind: answers}).small_talk_answers
    assert kept == {kind: [a.strip() for a in answers]}


@pytest.mark.parametrize("model", [KbSettings, Settings], ids=["kb", "deployment"])
@given(before=clean, after=st.text(max_size=10))
def test_a_default_answer_with_nul_is_refused(model, before, after):
    with pytest.raises(ValidationError, match="default_answer"):
        model(default_answer=before + "\x00" + after)


@given(text=st.text(st.characters(exclude_categories=()), max_size=30))
def test_the_settings_rule_is_the_stores(text):
    """settings may not import kb/records.py: the rule is written twice and must say the same."""
    assert storable_problem(text) == text_problem(text)
