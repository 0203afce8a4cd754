"""The language-identification measurement (evaluation/language_id.py) and the numbers docs/results.md reports
for it: the held-out set is well formed, and the identifier keeps what it reached there and on the realistic
sets."""
from __future__ import annotations

from collections import Counter

from evaluation.language_id import HELD_OUT, SETS, measure_held_out, measure_realistic, read_jsonl, realistic_queries
from models.language import SUPPORTED, detector


def test_the_held_out_set_is_well_formed():
    rows = read_jsonl(HELD_OUT)
    assert len(rows) == 280 and len({r["query"] for r in rows}) == 280
    kinds = Counter(r["kind"] for r in rows)
    assert kinds == {"script": 175, "names": 68, "mixed": 37}
    assert Counter(r["language"] for r in rows if r["kind"] == "script") == {c: 25 for c in
                                                                            ("ja", "zh", "he", "ru", "ar", "ko", "el")}
    assert {r["language"] for r in rows if r["kind"] == "names"} == {"en"}


def test_the_identifier_keeps_its_held_out_and_realistic_numbers():
    detect = detector().detect
    held = measure_held_out(detect, read_jsonl(HELD_OUT), SUPPORTED)
    assert held["script"]["right"] == 1.0 and held["script"]["refused by languages=all seven"] == "175 of 175"
    assert held["mixed"]["right"] == 1.0
    assert int(held["names"]["refused by languages=en"].split()[0]) <= 5
    realistic = measure_realistic(detect, realistic_queries(list(SETS)))
    assert realistic["accuracy 3+ words"] >= 0.993 and realistic["English refused by languages=en"] == 0
    assert realistic["refused by languages=en, es/de/fr"] >= 0.993
