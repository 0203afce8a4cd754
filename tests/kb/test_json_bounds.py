"""JSON exports bounded before they are parsed, and their line lookups kept linear: a few MB of empty objects is
refused without building them, and items whose ids cannot be found as JSON writes them cost one search, not one
search of the whole text each."""
from __future__ import annotations

import json
import tracemalloc

import pytest

from kb.formats import base, faqpage, qnabot, read_any
from kb.formats.base import MAX_JSON_CONTAINERS
from kb.records import KbFormatError


def peak_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / 2**20


@pytest.mark.parametrize("wrap", [
    lambda items: {"qnaDocuments": items},        # QnA Maker
    lambda items: {"qna": items},                 # QnABot
    lambda items: {"Assets": {"Qnas": items}},    # Azure project
])
def test_an_export_of_millions_of_empty_objects_is_refused_unparsed(tmp_path, wrap):
    items = "[" + ",".join(["{}"] * (MAX_JSON_CONTAINERS + 5)) + "]"
    doc = json.dumps(wrap([])).replace("[]", items)
    path = tmp_path / "bomb.json"
    path.write_text(doc, encoding="utf-8")
    assert path.stat().st_size < 8 * 2**20

    def read():
        with pytest.raises(KbFormatError, match=f"more than the {MAX_JSON_CONTAINERS:,} one import parses"):
            read_any(path, {"qnaDocuments": "qnamaker", "qna": "qnabot", "Assets": "azure"}[next(iter(wrap([])))])

    assert peak_mb(read) < 60  # the text itself, never the parsed objects (about 70 bytes each)


def test_a_json_ld_script_of_millions_of_objects_is_refused_at_its_line(tmp_path):
    bomb = "[" + ",".join(["{}"] * (MAX_JSON_CONTAINERS + 5)) + "]"
    page = ('<html><body>\n<script type="application/ld+json">{"@type": "FAQPage", "mainEntity": ' + bomb
            + "}</script>\n</body></html>\n")
    path = tmp_path / "faq.html"
    path.write_text(page, encoding="utf-8")
    with pytest.raises(KbFormatError, match=r"faq.html:2: .*JSON objects and arrays"):
        faqpage.read(path, "faq.html")


def counting_finder(monkeypatch, module) -> list[int]:
    calls: list[int] = []

    def finder(text):
        find = base.line_finder(text)

        def counted(pattern, start=0):
            calls.append(start)
            return find(pattern, start)
        return counted
    monkeypatch.setattr(module, "line_finder", finder)
    return calls


def test_qnabot_items_without_a_findable_qid_cost_one_search(tmp_path, monkeypatch):
    calls = counting_finder(monkeypatch, qnabot)
    items = [{"qid": f"q{i}", "q": [f"question {i}"], "a": f"answer {i}"} for i in range(2000)]
    items[1]["qid"] = "q\u00e91"  # written escaped below: not found as the pattern spells it
    text = json.dumps({"qna": items}, ensure_ascii=True)
    path = tmp_path / "bot.json"
    path.write_text(text, encoding="utf-8")
    imported = qnabot.read(path, "bot.json")
    assert len(imported.records) == 2000 and len(calls) == 2


def test_faqpage_questions_whose_name_cannot_be_found_cost_one_search(tmp_path, monkeypatch):
    calls = counting_finder(monkeypatch, faqpage)
    entities = [{"@type": "Question", "name": f"Caf\u00e9 question {i}?",
                 "acceptedAnswer": {"@type": "Answer", "text": f"Answer {i}."}} for i in range(500)]
    script = json.dumps({"@context": "https://schema.org", "@type": "FAQPage", "mainEntity": entities},
                        ensure_ascii=True)  # names escaped: never found as json_key_pattern writes them
    path = tmp_path / "faq.html"
    path.write_text(f'<html><body><script type="application/ld+json">{script}</script></body></html>',
                    encoding="utf-8")
    imported = faqpage.read(path, "faq.html")
    assert len({r.faq_id for r in imported.records}) == 500 and len(calls) == 2  # from pos, then from 0, once
