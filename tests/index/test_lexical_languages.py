"""The lexical arm in other languages: each phrasing analysed in its KB's language (Snowball stemmer,
accents folded, so "contrasena" finds "contraseña"), a KB of several languages reads each query with every
language's analyzer, an English KB is analysed as always, and tantivy and the Elasticsearch-API emulator
agree on rankings and BM25 scores in every language."""
from __future__ import annotations

import uuid

import pytest

from index.elasticsearch.lexical import ElasticsearchLexicalIndex
from index.lexical import LexicalDoc, TantivyLexicalIndex, build_lexical, doc_languages, open_lexical

SPANISH = [
    LexicalDoc(1, "reset-password", "¿Cómo restablezco mi contraseña?", "es"),
    LexicalDoc(2, "reset-password", "Olvidé la contraseña de mi cuenta", "es"),
    LexicalDoc(3, "refund", "¿Cómo pido el reembolso de un pedido?", "es"),
    LexicalDoc(4, "shipping", "¿Cuánto tardan los envíos?", "es"),
]
GERMAN = [
    LexicalDoc(11, "reset-password", "Wie setze ich mein Passwort zurück?", "de"),
    LexicalDoc(12, "cancel", "Kündigung meines Vertrags", "de"),
    LexicalDoc(13, "refund", "Rückerstattung einer Bestellung", "de"),
]
ENGLISH = [
    LexicalDoc(21, "reset-password", "How do I reset my password?"),
    LexicalDoc(22, "refund", "Can I get a refund for my order?"),
]
QUERIES = ["como restablezco la contrasena", "reembolso pedidos", "envio", "kundigung vertrag", "ruckerstattung",
           "passwort zurucksetzen", "reset password", "refunds for orders"]


def ids(hits):
    return [h.variant_id for h in hits]


def test_accents_folded_and_stems_shared_in_spanish_and_german(tmp_path):
    index = TantivyLexicalIndex(tmp_path / "lex", ("en", "es", "de"))
    index.build(SPANISH + GERMAN + ENGLISH)
    assert ids(index.search_variants("como restablezco la contrasena", 10))[0] == 1
    assert ids(index.search_variants("reembolsos", 10)) == [3]
    assert ids(index.search_variants("kundigung", 10)) == [12]
    assert ids(index.search_variants("refunds", 10)) == [22]  # the English field keeps its analyzer
    assert index.analyze("Rückerstattungen", "de") == index.analyze("ruckerstattung", "de")


def test_a_kb_of_one_language_is_read_in_it_and_an_english_kb_as_always():
    spanish = ["¿Cómo restablezco mi contraseña?", "¿Cuánto tardan los envíos a Canarias?", "Quiero devolver un pedido"]
    assert doc_languages(spanish, None) == ["es"] * 3
    assert doc_languages(["How do I reset my password?", "Moving home", "Exit fees"], None) == ["en"] * 3
    assert doc_languages(["Moving home"], ["de"]) == ["de"]
    assert doc_languages(["Wie setze ich mein Passwort zurück?", "How do I reset my password?"], ["en", "de"]) == ["de", "en"]


def test_the_build_records_its_languages_and_opens_with_them(tmp_path):
    docs = [LexicalDoc(d.variant_id, d.faq_id, d.question) for d in SPANISH]  # as a store hands them over
    block = build_lexical(tmp_path, "v1", docs)
    assert block["languages"] == {"es": 4} and "spanish" in block["analyzer"]
    index = open_lexical(tmp_path, {"version": "v1", "lexical": block}, "tantivy")
    assert ids(index.search_variants("contrasena", 10)) == [1, 2]
    english = build_lexical(tmp_path / "en", "v2", [LexicalDoc(d.variant_id, d.faq_id, d.question) for d in ENGLISH])
    assert english["languages"] == {"en": 2} and english["analyzer"] == "english (Porter2 stemmer)"


@pytest.mark.parametrize("languages, docs", [(("es",), SPANISH), (("de",), GERMAN), (("en", "es", "de"), SPANISH + GERMAN + ENGLISH)])
def test_engines_agree_in_every_language(tmp_path, es_emulator_url, languages, docs):
    tantivy_index = TantivyLexicalIndex(tmp_path / "lex", languages)
    es_index = ElasticsearchLexicalIndex(es_emulator_url, f"faq-test-{uuid.uuid4().hex[:10]}", languages=languages)
    tantivy_index.build(docs)
    es_index.build(docs)
    try:
        matched = 0
        for query in QUERIES:
            t_hits, e_hits = tantivy_index.search_variants(query, 50), es_index.search_variants(query, 50)
            assert ids(t_hits) == ids(e_hits), query
            assert [h.bm25 for h in t_hits] == pytest.approx([h.bm25 for h in e_hits], rel=1e-4), query
            assert [h.question for h in t_hits] == [h.question for h in e_hits]
            matched += bool(t_hits)
        assert matched >= 3
    finally:
        es_index.delete()
