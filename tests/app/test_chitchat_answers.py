"""The shipped small-talk answers and their loader: every kind answered in every persona, a KB's own answers
winning over the shipped ones, unknown names refused, and answers short and free of any product's name."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.conversation.small_talk.answers import KINDS, PERSONAS, answer, load_answers

REPO = Path(__file__).resolve().parents[2]


def product_names() -> set[str]:
    """The made-up names of the demo KB and the realistic KBs, from their READMEs' headings."""
    names = set()
    for readme in [REPO / "app/demo/README.md", *sorted((REPO / "evaluation/data").glob("*/README.md"))]:
        heading = readme.read_text(encoding="utf-8").splitlines()[0]
        for quoted in re.findall(r'"([^"]+)"', heading):
            names.update(word.lower() for word in quoted.split() if word[0].isupper())
    return names


def all_answers():
    for persona, kinds in load_answers()["personas"].items():
        for kind, texts in kinds.items():
            for text in texts:
                yield persona, kind, text


def test_kinds_are_the_contract_names_in_order():
    assert KINDS == ("greeting", "thanks", "goodbye", "bot_identity", "how_are_you", "praise", "complaint",
                     "acknowledgement", "help")


def test_every_kind_has_three_to_five_answers_in_every_persona():
    personas = load_answers()["personas"]
    assert set(personas) == set(PERSONAS) >= {"professional", "friendly"}
    for persona in PERSONAS:
        assert set(personas[persona]) == set(KINDS), persona
        for kind in KINDS:
            texts = personas[persona][kind]
            assert 3 <= len(texts) <= 5, (persona, kind)
            assert len(set(texts)) == len(texts), (persona, kind)


def test_answer_picks_a_shipped_variant_and_wraps_around():
    shipped = load_answers()["personas"]["friendly"]["thanks"]
    assert answer("thanks", "friendly") == shipped[0]
    assert answer("thanks", "friendly", pick=1) == shipped[1]
    assert answer("thanks", "friendly", pick=len(shipped)) == shipped[0]


def test_a_kbs_own_answers_win_over_the_shipped_ones():
    overrides = {"greeting": ["Welcome to the parish help desk.", "Hello from the parish."]}
    assert answer("greeting", "professional", overrides) == "Welcome to the parish help desk."
    assert answer("greeting", "witty", overrides, pick=1) == "Hello from the parish."
    # a kind the KB left alone, or emptied, keeps the shipped answer
    assert answer("thanks", "professional", overrides) == load_answers()["personas"]["professional"]["thanks"][0]
    assert answer("greeting", "friendly", {"greeting": []}) == load_answers()["personas"]["friendly"]["greeting"][0]


def test_load_answers_returns_a_copy():
    load_answers()["personas"]["friendly"]["greeting"].clear()
    assert load_answers()["personas"]["friendly"]["greeting"]


@pytest.mark.parametrize("call, named", [
    (lambda: answer("weather", "friendly"), "weather"),
    (lambda: answer("greeting", "pirate"), "pirate"),
    (lambda: answer("greeting", "friendly", {"smalltalk": ["hi"]}), "smalltalk"),
])
def test_unknown_kind_or_persona_raises_naming_it(call, named):
    with pytest.raises(ValueError, match=named):
        call()


def test_answers_are_short():
    for persona, kind, text in all_answers():
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]
        assert 1 <= len(sentences) <= 2 and len(text) <= 160, (persona, kind, text)


def test_answers_name_no_product_and_no_address():
    names = product_names()
    assert {"nimbus", "brightwater", "basketful"} <= names
    for persona, kind, text in all_answers():
        words = set(re.findall(r"[a-z]+", text.lower()))
        assert not words & names, (persona, kind, text)
        assert not re.search(r"https?://|www\.|\.example|@|\d{4}", text), (persona, kind, text)


def test_help_and_identity_answers_say_it_is_an_automated_help_centre_assistant():
    for persona, kind, text in all_answers():
        lowered = text.lower()
        if kind in ("help", "bot_identity"):
            assert "help centre" in lowered or "faq" in lowered, (persona, kind, text)
        if kind == "bot_identity":
            assert re.search(r"\b(bot|automated|robot|program|not a person|not human)\b", lowered), (persona, text)
