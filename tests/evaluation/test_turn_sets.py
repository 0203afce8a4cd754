"""Well-formedness of the two-turn sets (evaluation/data/*/turns.jsonl) and the editors' follow-up prompts
(evaluation/data/*/follow_ups.jsonl) written for the four realistic FAQ benchmarks."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.data_files import read_jsonl

DATA = Path(__file__).resolve().parents[2] / "evaluation/data"
SETS = ("campus_it", "council", "energy", "grocery")
KINDS = {"same_topic", "clarify", "switch"}
SPLITS = {"dev", "test"}
FEWEST_EXCHANGES = 80




@pytest.fixture(scope="module", params=SETS)
def name(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def faq_ids(name) -> set[str]:
    return {row["faq_id"] for row in read_jsonl(DATA / name / "faq.jsonl")}


@pytest.fixture(scope="module")
def turns(name) -> list[dict]:
    return read_jsonl(DATA / name / "turns.jsonl")


@pytest.fixture(scope="module")
def follow_ups(name) -> list[dict]:
    return read_jsonl(DATA / name / "follow_ups.jsonl")


def test_turn_rows_have_the_right_shape(turns, faq_ids, name):
    ids = [row["id"] for row in turns]
    assert len(set(ids)) == len(ids), "repeated id"
    for row in turns:
        where = row.get("id")
        assert set(row) == {"id", "first", "second", "kind", "split"}, f"{where}: keys {sorted(row)}"
        assert row["id"].startswith(f"{name}-t"), where
        assert row["kind"] in KINDS, where
        assert row["split"] in SPLITS, where
        for turn in ("first", "second"):
            assert set(row[turn]) == {"query", "faq_id"}, f"{where}: {turn} keys"
            assert isinstance(row[turn]["query"], str) and row[turn]["query"].strip(), f"{where}: {turn} query"
        assert row["first"]["faq_id"] in faq_ids, f"{where}: unknown first faq_id {row['first']['faq_id']}"
        second = row["second"]["faq_id"]
        assert second is None or second in faq_ids, f"{where}: unknown second faq_id {second}"


def test_kinds_agree_with_their_labels(turns):
    for row in turns:
        first, second = row["first"]["faq_id"], row["second"]["faq_id"]
        if row["kind"] == "clarify":
            assert second == first, f"{row['id']}: a clarification stays on the first FAQ"
        else:
            assert second != first, f"{row['id']}: a {row['kind']} turn moves to another FAQ"
        if row["kind"] == "same_topic":
            assert second is not None, f"{row['id']}: a same-topic turn has an answer"


def test_counts_mix_and_splits(turns):
    assert len(turns) >= FEWEST_EXCHANGES
    kinds = Counter(row["kind"] for row in turns)
    # Roughly 45% same topic, 20% clarify, 35% switch; the bounds leave room for hand-written sets.
    assert 0.35 <= kinds["same_topic"] / len(turns) <= 0.55, kinds
    assert 0.15 <= kinds["clarify"] / len(turns) <= 0.30, kinds
    assert 0.25 <= kinds["switch"] / len(turns) <= 0.45, kinds
    dev = sum(row["split"] == "dev" for row in turns)
    assert 0.25 <= dev / len(turns) <= 0.4, dev
    for kind in KINDS:
        assert {row["split"] for row in turns if row["kind"] == kind} == SPLITS, f"{kind}: both splits"
    unanswered = sum(row["second"]["faq_id"] is None for row in turns)
    assert unanswered < 0.1 * len(turns)


def test_second_turns_are_not_repeated(turns):
    texts = Counter(row["second"]["query"].strip().lower() for row in turns)
    assert [t for t, n in texts.items() if n > 1] == []


def test_follow_ups_are_well_formed(follow_ups, faq_ids):
    sources = [row["faq_id"] for row in follow_ups]
    assert len(set(sources)) == len(sources), "an FAQ listed twice"
    assert len(sources) * 3 >= len(faq_ids), "prompts for at least a third of the FAQs"
    for row in follow_ups:
        src = row["faq_id"]
        assert set(row) <= {"faq_id", "follow_ups", "context_only"} and "follow_ups" in row, f"{src}: keys"
        assert src in faq_ids, f"unknown faq_id {src}"
        assert row.get("context_only", True) is True, f"{src}: context_only is only ever true"
        prompts = row["follow_ups"]
        assert 1 <= len(prompts) <= 4, f"{src}: {len(prompts)} prompts"
        targets = [p["faq_id"] for p in prompts]
        assert len(set(targets)) == len(targets), f"{src}: repeated target"
        for prompt in prompts:
            assert set(prompt) == {"faq_id", "text"}, f"{src}: prompt keys"
            assert prompt["faq_id"] in faq_ids, f"{src}: unknown target {prompt['faq_id']}"
            assert prompt["faq_id"] != src, f"{src}: prompts to itself"
            assert isinstance(prompt["text"], str) and 0 < len(prompt["text"]) <= 60, f"{src}: label"


def test_some_same_topic_turns_go_outside_the_prompts(turns, follow_ups):
    """Most same-topic turns follow a prompt, but not all, so matching cannot rely on prompts alone."""
    prompted = {row["faq_id"]: {p["faq_id"] for p in row["follow_ups"]} for row in follow_ups}
    same = [row for row in turns if row["kind"] == "same_topic"]
    inside = sum(row["second"]["faq_id"] in prompted.get(row["first"]["faq_id"], set()) for row in same)
    assert 0.5 <= inside / len(same) <= 0.9, (inside, len(same))
