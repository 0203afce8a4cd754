"""The language identifier on what it used to get wrong: text in a script no supported language uses is never
labelled a supported language and every `languages` gate refuses it; English with foreign names (umlauts,
accents) is not refused by an English KB; a mixed message goes to the language most of its words are in.
The inputs are generated: random words of each script, random names, random mixes."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings, strategies as st

from models.language import LATIN, SUPPORTED, UNDETERMINED, LanguageDetector, detect, script_of

#: letters of a script (first, last code point of a run of its letters) -> the languages it may be named
SCRIPTS = {
    "Cyrl": ((0x0430, 0x044F), ("ru", "uk", "bg", "sr", "mk", "be", "kk", "ky", "mn", "tg", "tt", "ba")),
    "Grek": ((0x03B1, 0x03C9), ("el",)),
    "Hebr": ((0x05D0, 0x05EA), ("he",)),
    "Arab": ((0x0627, 0x064A), ("ar", "fa", "ur", "ps", "ug", "ku")),
    "Hani": ((0x4E00, 0x9FA5), ("zh", "ja")),
    "Jpan": ((0x3041, 0x3093), ("ja",)),
    "Kore": ((0xAC00, 0xD7A3), ("ko",)),
    "Deva": ((0x0905, 0x0939), ("hi", "mr", "ne", "sa")),
    "Thai": ((0x0E01, 0x0E2E), ("th",)),
    "Geor": ((0x10D0, 0x10F0), ("ka",)),
    "Armn": ((0x0561, 0x0586), ("hy",)),
    "Zzzz": ((0x13A0, 0x13F4), (UNDETERMINED,)),  # Cherokee: a script no language here is named in
}
GATES = st.lists(st.sampled_from(SUPPORTED), min_size=1, unique=True)
NOISE = st.sampled_from(["", " ", "?", "!", ", ", " 123 ", " 🙂 ", "...", " VPN ", " wifi ", " ok ", " iPhone "])


@st.composite
def script_text(draw) -> tuple[str, str, tuple[str, ...]]:
    """(text, script, its languages): words of random letters of one script, with punctuation, digits, emoji
    and a few Latin words among them, but more letters of the script than Latin ones."""
    script = draw(st.sampled_from(sorted(SCRIPTS)))
    (lo, hi), languages = SCRIPTS[script]
    letters = st.characters(min_codepoint=lo, max_codepoint=hi, categories=("Lo", "Ll", "Lu"))
    words = draw(st.lists(st.text(letters, min_size=1, max_size=8), min_size=1, max_size=8))
    parts = []
    for word in words:
        parts += [word, draw(NOISE)]
    text = " ".join(parts)
    latin = sum(ch.isalpha() and ch.isascii() for ch in text)
    other = sum(ch.isalpha() and not ch.isascii() for ch in text)
    if other <= latin or other < 2:
        text = " ".join(words) + "".join(words)  # the script's letters then outnumber the noise's
    return text, script, languages


@settings(max_examples=300, deadline=None)
@given(sample=script_text(), gate=GATES)
def test_text_in_another_script_is_no_supported_language_and_every_gate_refuses_it(sample, gate):
    text, script, languages = sample
    found = detect(text)
    assert found.language not in SUPPORTED, (text, found)
    assert found.language in languages, (text, found)
    assert found.script == script and not found.supported
    assert found.is_foreign(gate) and not found.is_foreign([])


@functools.lru_cache(maxsize=None)
def _detector_of(languages: tuple[str, ...]) -> LanguageDetector:
    return LanguageDetector(languages)  # a second to load: once per KB's languages


@settings(max_examples=100, deadline=None)
@given(sample=script_text(), gate=st.sampled_from([("en", "de"), ("es", "fr", "it"), ("pt", "nl"), SUPPORTED]))
def test_a_detector_of_a_kbs_languages_still_names_one_of_them(sample, gate):
    # what the lexical arm reads each phrasing with (index/lexical.py): always one of its analyzers' languages
    text, script, _ = sample
    found = _detector_of(gate).detect(text)
    assert found.language in gate and found.script == script and found.is_foreign(gate)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_is_a_supported_language_in_latin_letters_or_none_and_refused(text):
    found = detect(text)
    assert 0.0 <= found.confidence <= 1.0
    if found.language in SUPPORTED:
        assert found.script in (LATIN, None), (text, found)
    else:
        assert found.script not in (LATIN, None) and found.is_foreign(["en"]), (text, found)


def test_the_held_out_queries_of_other_scripts_are_named():
    assert [detect(q).language for q in ["パスワードを忘れました。どうすればいいですか？", "我忘记密码了怎么办",
                                         "שכחתי את הסיסמה מה עושים", "забыл пароль что делать",
                                         "نسيت كلمة المرور ماذا أفعل", "비밀번호를 잊어버렸어요",
                                         "ξέχασα τον κωδικό μου τι κάνω"]] == ["ja", "zh", "he", "ru", "ar", "ko", "el"]
    one_word = detect("ログインできない")
    assert one_word.words == 1 and one_word.is_foreign(["en"])  # Japanese needs no spaces between its words
    assert script_of("Ω resistor")[0] == LATIN and script_of("π")[0] == LATIN  # a stray letter is no script
    assert script_of("１２３ ＡＢＣ")[0] == LATIN and detect("𝐡𝐨𝐰 𝐝𝐨 𝐢 𝐫𝐞𝐬𝐞𝐭 𝐦𝐲 𝐩𝐚𝐬𝐬𝐰𝐨𝐫𝐝").language == "en"


# ---------------------------------------------------------------- English with foreign names

_ACCENTED = "äöüßéèêëáíóúñçåøæœłšžčřãõâîôûï"


@st.composite
def foreign_name(draw) -> str:
    """A capitalised name with at least one letter outside ASCII: Müller, Çelik, Øyvind."""
    body = draw(st.text(st.sampled_from("abcdefghijklmnoprstuvwz" + _ACCENTED), min_size=2, max_size=9))
    at = draw(st.integers(0, len(body)))
    return (body[:at] + draw(st.sampled_from(_ACCENTED)) + body[at:]).capitalize()


LONG = ["can {a} still log in to the account", "why was the order for {a} cancelled",
        "please send the invoice to {a} by email", "my landlord {a} wants a copy of the bill",
        "{a} {b} cannot log in to the portal", "is the {a} branch open on sunday",
        "refund for the order placed by {a}", "can I pick up my parcel at the {a} store tomorrow"]
SHORT = ["{a} {b} refund status", "{a}'s wifi password", "refund for {a} please", "bill for {a} household",
         "invoice for {a} {b}", "{a} {b} login issue", "the {a} account is locked", "{a} & {b} invoice copy"]


@settings(max_examples=300, deadline=None)
@given(template=st.sampled_from(LONG + SHORT), a=foreign_name(), b=foreign_name())
def test_english_with_foreign_names_is_never_refused_by_an_english_kb(template, a, b):
    text = template.format(a=a, b=b)
    found = detect(text)
    assert not found.is_foreign(["en"]), (text, found)
    if template in LONG:  # enough English words around the names to tell
        assert found.language == "en", (text, found)


@pytest.mark.parametrize("text", ["Does the Müller account get the discount?", "Jürgen Müller refund status",
                                  "Müller & Söhne invoice copy", "Jörg Schäfer login issue", "Renée's café order",
                                  "Frau Böhm wants a refund", "is Müller's tariff fixed"])
def test_the_held_out_name_queries_are_answered(text):
    assert not detect(text).is_foreign(["en"])


def test_a_foreign_text_with_capitals_is_still_refused():
    for text in ["Wie hoch sind die Gebühren für die Übergabe", "WO IST MEINE RECHNUNG FÜR MÄRZ",
                 "Où est ma facture du mois dernier", "¿Cómo puedo cambiar la fecha de pago de mi factura?",
                 "Cuéntame un chiste de gatos"]:
        found = detect(text)
        assert found.language in ("de", "fr", "es") and found.is_foreign(["en"]), (text, found)


# ---------------------------------------------------------------- mixed messages

MAJORITY = {
    "en": ["how do i reset my password for the student portal", "why is my electricity bill so high this month"],
    "es": ["como puedo cambiar la fecha de pago de mi factura", "mi pedido todavia no ha llegado despues de dos semanas"],
    "de": ["wie kann ich mein passwort fuer das portal zuruecksetzen", "warum ist meine stromrechnung so hoch"],
    "fr": ["comment je peux changer la date de paiement de ma facture", "ma commande n'est toujours pas arrivee"],
}
TAILS = {"en": ["thanks", "please", "help", "thank you"], "es": ["gracias", "por favor"], "de": ["danke", "bitte"],
         "fr": ["merci", "svp"], "ja": ["ありがとう"], "ru": ["спасибо"], "zh": ["谢谢"], "el": ["ευχαριστώ"]}


@settings(max_examples=200, deadline=None)
@given(majority=st.sampled_from(sorted(MAJORITY)), data=st.data())
def test_a_mixed_message_goes_to_the_language_of_most_of_its_words(majority, data):
    sentence = data.draw(st.sampled_from(MAJORITY[majority]))
    other = data.draw(st.sampled_from([code for code in sorted(TAILS) if code != majority]))
    tail = data.draw(st.sampled_from(TAILS[other]))
    text = data.draw(st.sampled_from([f"{sentence}, {tail}", f"{tail}, {sentence}", f"{sentence} {tail}!"]))
    found = detect(text)
    assert found.language == majority and not found.is_foreign([majority]), (text, found)


@settings(max_examples=100, deadline=None)
@given(script=st.sampled_from(["Cyrl", "Hani", "Kore", "Hebr", "Grek"]), data=st.data())
def test_a_message_mostly_in_another_script_with_an_english_word_is_refused(script, data):
    sentence = {"Cyrl": "я забыл пароль от личного кабинета", "Hani": "我的订单到现在还没有到",
                "Kore": "비밀번호를 잊어버렸어요 어떻게 하나요", "Hebr": "ההזמנה שלי עדיין לא הגיעה אליי",
                "Grek": "η παραγγελία μου δεν έχει έρθει ακόμα"}[script]
    tail = data.draw(st.sampled_from(["help", "please", "thanks", "wifi", "ok"]))
    found = detect(f"{sentence} {tail}")
    assert found.language not in SUPPORTED and found.script == script and found.is_foreign(["en"])
