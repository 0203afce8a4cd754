"""The offline language identifier: chat-style queries in the supported languages, without accents or
capitals, are told apart; short or mixed messages are never refused for their language."""
from __future__ import annotations

import pytest

from app.settings import LANGUAGE_CODES
from models.language import SUPPORTED, Detection, detect


def test_settings_list_the_languages_the_identifier_knows():
    assert LANGUAGE_CODES == SUPPORTED


@pytest.mark.parametrize("text, code", [
    ("como puedo cambiar la fecha de pago de mi factura", "es"),
    ("wie kann ich meinen vertrag kundigen", "de"),
    ("ou est ma facture du mois dernier", "fr"),
    ("how do i change the date my bill is paid", "en"),
    ("posso pagare con la carta di credito", "it"),
    ("quanto tempo demora a entrega da minha encomenda", "pt"),
    ("hoe kan ik mijn wachtwoord opnieuw instellen", "nl"),
])
def test_a_query_of_a_few_words_is_recognised(text, code):
    found = detect(text)
    assert found.language == code and 0 < found.confidence <= 1 and found.words == len(text.split())


def test_text_without_letters_is_english_with_no_confidence():
    assert detect("12345 ?!").language == "en" and detect("   ").confidence == 0.0


def test_only_a_clear_long_enough_other_language_is_foreign():
    german = detect("wie kann ich meinen vertrag kundigen")
    assert german.is_foreign(["en", "es"]) and not german.is_foreign(["de"]) and not german.is_foreign([])
    assert not detect("wifi passwort").is_foreign(["en"])  # two words: too short to refuse
    mixed = Detection("it", 0.6, 4, {"it": 0.6, "en": 0.3})
    assert not mixed.is_foreign(["en"])  # English stays a plausible reading
