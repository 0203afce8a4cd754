"""The `LexicalIndex` contract, run on every engine: tantivy (embedded), the noida-db Elasticsearch-API
emulator over real HTTP on loopback, and a real Elasticsearch when FAQ_ES_URL is set (`-m elasticsearch`).

Both engines must behave the same: English analysis (stop words, stemming, possessives), BM25 over
question variants, FAQ-level grouping with K candidates, and clear `LexicalUnavailable` errors.
"""
from __future__ import annotations

import uuid

import pytest

from index.elasticsearch.lexical import ElasticsearchLexicalIndex
from index.lexical import (
    LexicalDoc,
    LexicalUnavailable,
    TantivyLexicalIndex,
    normalise_text,
    top_faqs,
)

DOCS = [
    LexicalDoc(1, "reset-password", "How do I reset my password?"),
    LexicalDoc(2, "reset-password", "I forgot my password"),
    LexicalDoc(3, "opening-hours", "When are the stores opening?"),
    LexicalDoc(4, "refund", "Refunds and getting my money back"),
    LexicalDoc(5, "refund", "Can I get a refund for my order?"),
    LexicalDoc(6, "cancel-order", "How do I cancel an order?"),
    LexicalDoc(7, "shipping", "How long does shipping take for an order?"),
    LexicalDoc(8, "owner", "Who is the company's owner?"),
]


def make_index(engine: str, es_url: str | None, tmp_path, name: str | None = None):
    if engine == "tantivy":
        return TantivyLexicalIndex(tmp_path / (name or "lexical"))
    return ElasticsearchLexicalIndex(es_url, name or f"faq-test-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def built(lexical_engine, tmp_path):
    engine, es_url = lexical_engine
    index = make_index(engine, es_url, tmp_path)
    assert index.build(DOCS) == len(DOCS)
    yield index
    if engine == "elasticsearch":
        index.delete()
    index.close()


def ids(hits):
    return [h.variant_id for h in hits]


def test_build_count_and_english_analysis(built):
    assert built.count() == len(DOCS)
    # stemming on both sides: resetting/passwords -> reset/password
    hits = built.search_variants("resetting passwords", 10)
    assert ids(hits) == [1, 2] and all(h.faq_id == "reset-password" for h in hits)
    assert hits[0].bm25 > hits[1].bm25 > 0
    # "stores" and "opening" stem to the terms of variant 3; "the"/"are" are stop words
    assert ids(built.search_variants("the store opens", 10)) == [3]
    # a query of stop words only matches nothing (not every document)
    assert built.search_variants("is it the", 10) == []
    # possessive 's is dropped: "owner's" matches "owner"
    assert ids(built.search_variants("company owners", 10)) == [8]
    assert built.search_variants("xylophone", 10) == []


def test_search_groups_by_faq_and_keeps_k_faqs(built):
    [hits] = built.search(["how do I cancel my order or get a refund"], k=2)
    faqs = [h.faq_id for h in top_faqs(hits, 2)]
    assert len(faqs) == 2 and set(faqs) <= {"cancel-order", "refund", "shipping"}
    # every returned variant belongs to one of the k FAQs, best first
    assert {h.faq_id for h in hits} == set(faqs)
    assert [h.bm25 for h in hits] == sorted((h.bm25 for h in hits), reverse=True)
    # k larger than the matching FAQs: all of them, each once in top_faqs
    [hits] = built.search(["order refund password"], k=30)
    assert sorted({h.faq_id for h in hits}) == ["cancel-order", "refund", "reset-password", "shipping"]
    assert len(top_faqs(hits, 30)) == 4
    with pytest.raises(ValueError, match="k must be"):
        built.search(["x"], k=0)


def test_batch_search_equals_single_searches(built):
    queries = ["forgot password", "refund my order", "opening hours of the store", "the"]
    batch = built.search(queries, k=3)
    assert [ids(h) for h in batch] == [ids(built.search([q], k=3)[0]) for q in queries]


def test_deep_search_covers_k_faqs_when_one_faq_has_many_phrasings(lexical_engine, tmp_path):
    engine, es_url = lexical_engine
    crowd = [LexicalDoc(100 + i, "order-status", f"where is my order number {i}") for i in range(150)]
    others = [LexicalDoc(1000 + i, f"faq-{i}", f"question about an order and topic {i}") for i in range(6)]
    index = make_index(engine, es_url, tmp_path)
    index.build(crowd + others)
    try:
        [hits] = index.search(["order"], k=5)
        faqs = top_faqs(hits, 5)
        # the 150 phrasings fill the first page (100 variants) alone; the search must go deeper
        assert len(faqs) == 5 and len({f.faq_id for f in faqs}) == 5
    finally:
        if engine == "elasticsearch":
            index.delete()


AGREEMENT_QUERIES = [
    "resetting passwords", "how do I get my money back", "order shipping time", "the store opens",
    "why hasn't my refund shown up?", "I've got a 3.5% fee on 1,000 euros", "the company's owner's e-mail_address",
    "can't log in after several attempts", "Where's my package?? It's late.",
]


def test_engines_agree_on_bm25_scores(tmp_path, es_emulator_url):
    """The same documents and queries give the same ranking and BM25 scores on tantivy and the emulator
    (stemming, stop words, apostrophes, numbers and punctuation included)."""
    from tests.helpers.kb import INDEX_TEST_FAQS

    docs = DOCS + [LexicalDoc(100 + i, f, q) for i, (f, q) in enumerate((f, q) for f, _, qs in INDEX_TEST_FAQS for q in qs)]
    docs.append(LexicalDoc(999, "fees", "Why is there a 3.5% fee on orders over 1,000 euros? (e-mail_address in the FAQ's text)"))
    tantivy_index = make_index("tantivy", None, tmp_path)
    es_index = make_index("elasticsearch", es_emulator_url, tmp_path)
    tantivy_index.build(docs)
    es_index.build(docs)
    try:
        for query in AGREEMENT_QUERIES:
            t_hits, e_hits = tantivy_index.search_variants(query, 200), es_index.search_variants(query, 200)
            assert t_hits and ids(t_hits) == ids(e_hits), query
            assert [h.bm25 for h in t_hits] == pytest.approx([h.bm25 for h in e_hits], rel=1e-4), query
    finally:
        es_index.delete()


def test_normalise_text():
    assert normalise_text("John's order, don't ship") == "John order, dont ship"
    assert normalise_text("the owners\u2019s cars") == "the owners cars"
    assert normalise_text("3.5% of 1,000 on progress.i, foo_bar; a.b.c") == "35% of 1000 on progressi, foobar; ab.c"


def test_tantivy_missing_index_is_unavailable(tmp_path):
    index = TantivyLexicalIndex(tmp_path / "nothing-here")
    with pytest.raises(LexicalUnavailable, match="faq index build"):
        index.search(["x"])
    assert "faq index build" in index.health()


def test_tantivy_refuses_to_build_over_an_existing_index(tmp_path):
    TantivyLexicalIndex(tmp_path / "lex").build(DOCS)
    with pytest.raises(FileExistsError):
        TantivyLexicalIndex(tmp_path / "lex").build(DOCS)


def test_elasticsearch_unreachable_and_missing_index(es_emulator_url):
    # nothing listens on port 9 of loopback (discard): connection refused at once
    down = ElasticsearchLexicalIndex("http://127.0.0.1:9", "faq-x", timeout_s=2)
    with pytest.raises(LexicalUnavailable, match="unreachable"):
        down.search(["password"])
    assert "unreachable" in down.health() and "127.0.0.1:9" in down.health()
    missing = ElasticsearchLexicalIndex(es_emulator_url, f"faq-missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(LexicalUnavailable, match="no index .*faq index build"):
        missing.search(["password"])
    assert missing.health() is not None and missing.check_version().startswith("8.")


def test_credentials_are_not_shown_in_messages():
    down = ElasticsearchLexicalIndex("http://elastic:s3cret@127.0.0.1:9", "faq-x", timeout_s=2)
    message = down.health()
    assert "s3cret" not in message and "***@127.0.0.1:9" in message
