"""The hand-written small-talk sets in evaluation/data/smalltalk/: they parse, name only the contract's kinds,
meet their sizes, keep train and test apart, and point at FAQs that exist in the KBs they name."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from app.conversation.small_talk.answers import KINDS

DATA = Path(__file__).resolve().parents[2] / "evaluation" / "data"
SETS = DATA / "smalltalk"
MINIMUM_PER_KIND = {"train.jsonl": 40, "test.jsonl": 25}


def rows(name: str) -> list[dict]:
    lines = (SETS / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower())


@pytest.mark.parametrize("name", sorted(MINIMUM_PER_KIND))
def test_labelled_sets_parse_and_cover_every_kind(name):
    found = rows(name)
    for row in found:
        assert set(row) == {"text", "kind"}, row
        assert row["kind"] in KINDS, row
        assert row["text"].strip() == row["text"] and row["text"], row
    counts = Counter(row["kind"] for row in found)
    short = {kind: counts[kind] for kind in KINDS if counts[kind] < MINIMUM_PER_KIND[name]}
    assert not short, f"{name}: fewer than {MINIMUM_PER_KIND[name]} messages for {short}"
    texts = [normalised(row["text"]) for row in found]
    assert len(set(texts)) == len(texts), [t for t, n in Counter(texts).items() if n > 1]


def test_train_and_test_share_no_text():
    train = {normalised(row["text"]) for row in rows("train.jsonl")}
    shared = sorted(normalised(row["text"]) for row in rows("test.jsonl") if normalised(row["text"]) in train)
    assert not shared, shared


def test_not_smalltalk_set_is_large_says_why_and_is_no_labelled_small_talk():
    found = rows("not_smalltalk.jsonl")
    assert len(found) >= 300
    for row in found:
        assert set(row) == {"text", "why"} and row["text"] and row["why"], row
    small_talk = {normalised(row["text"]) for name in MINIMUM_PER_KIND for row in rows(name)}
    texts = [normalised(row["text"]) for row in found]
    assert len(set(texts)) == len(texts)
    assert not set(texts) & small_talk, sorted(set(texts) & small_talk)


def test_greeting_prefixed_questions_name_faqs_of_their_kb():
    found = rows("greeting_prefixed.jsonl")
    assert len(found) >= 200
    kbs = {row["kb"] for row in found}
    assert kbs == {"campus_it", "council", "energy", "grocery"}
    faq_ids = {kb: {json.loads(line)["faq_id"] for line in (DATA / kb / "faq.jsonl").read_text(encoding="utf-8").splitlines()
                    if line.strip()} for kb in kbs}
    for row in found:
        assert set(row) == {"kb", "text", "faq_id"}, row
        assert row["faq_id"] in faq_ids[row["kb"]], row
    texts = [normalised(row["text"]) for row in found]
    assert len(set(texts)) == len(texts)


def test_readme_counts_match_the_files():
    readme = (SETS / "README.md").read_text(encoding="utf-8")
    for name in ("train.jsonl", "test.jsonl", "not_smalltalk.jsonl", "greeting_prefixed.jsonl"):
        assert f"| `{name}` |" in readme and f"| {len(rows(name))} |" in readme, name
