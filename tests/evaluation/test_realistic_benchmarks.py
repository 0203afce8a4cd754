"""Well-formedness of the realistic FAQ benchmarks (evaluation/data/*): KB and dev/test queries."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.helpers.data_files import read_jsonl

DATA = Path(__file__).resolve().parents[2] / "evaluation/data"
SPLITS = ("dev", "test")
#: folder -> (fewest FAQs, most FAQs, fewest queries in all)
SETS = {"energy": (85, 95, 250), "council": (60, 70, 220), "grocery": (60, 70, 220), "campus_it": (60, 70, 220)}


@pytest.fixture(scope="module", params=sorted(SETS))
def name(request) -> str:
    return request.param




@pytest.fixture(scope="module")
def kb(name) -> list[dict]:
    return read_jsonl(DATA / name / "faq.jsonl")


@pytest.fixture(scope="module")
def faqs(kb) -> dict[str, list[dict]]:
    by_id: dict[str, list[dict]] = defaultdict(list)
    for row in kb:
        by_id[row["faq_id"]].append(row)
    return dict(by_id)


@pytest.fixture(scope="module")
def queries(name) -> dict[str, list[dict]]:
    return {split: read_jsonl(DATA / name / f"{split}.jsonl") for split in SPLITS}


def test_kb_rows_have_the_right_keys_and_types(kb):
    for n, row in enumerate(kb, 1):
        assert set(row) == {"faq_id", "question", "answer", "tags"}, f"faq.jsonl:{n}: keys {sorted(row)}"
        assert isinstance(row["faq_id"], str) and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", row["faq_id"]), n
        assert isinstance(row["question"], str) and row["question"].strip(), n
        assert isinstance(row["answer"], str) and row["answer"].strip(), n
        assert isinstance(row["tags"], list) and row["tags"], n
        assert all(isinstance(t, str) and t for t in row["tags"]), n


def test_kb_size_and_phrasings(faqs, name):
    fewest, most, _ = SETS[name]
    assert fewest <= len(faqs) <= most
    for faq_id, rows in faqs.items():
        assert 1 <= len(rows) <= 3, f"{faq_id}: {len(rows)} phrasings"
        questions = [r["question"].strip().lower() for r in rows]
        assert len(set(questions)) == len(questions), f"{faq_id}: repeated phrasing"
        assert len({r["answer"] for r in rows}) == 1, f"{faq_id}: phrasings disagree on the answer"
        assert len({tuple(r["tags"]) for r in rows}) == 1, f"{faq_id}: phrasings disagree on the tags"


def test_kb_rows_of_one_faq_are_contiguous(kb):
    seen: list[str] = []
    for row in kb:
        if not seen or seen[-1] != row["faq_id"]:
            assert row["faq_id"] not in seen, f"{row['faq_id']}: phrasings are not on consecutive lines"
            seen.append(row["faq_id"])


def test_answers_have_at_least_two_sentences(faqs):
    for faq_id, rows in faqs.items():
        sentences = re.findall(r"[.!?](?:\s|$)", rows[0]["answer"])
        assert len(sentences) >= 2, f"{faq_id}: answer has {len(sentences)} sentence(s)"


def test_query_rows_have_the_right_keys_and_types(queries, faqs):
    for split, rows in queries.items():
        assert rows, f"{split}.jsonl is empty"
        for n, row in enumerate(rows, 1):
            assert set(row) == {"query", "faq_id"}, f"{split}.jsonl:{n}: keys {sorted(row)}"
            assert isinstance(row["query"], str) and row["query"].strip(), f"{split}.jsonl:{n}"
            assert row["faq_id"] is None or row["faq_id"] in faqs, f"{split}.jsonl:{n}: unknown {row['faq_id']!r}"


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def test_no_duplicate_queries_within_or_across_splits(queries):
    seen: dict[str, str] = {}
    for split, rows in queries.items():
        for row in rows:
            key = _norm(row["query"])
            assert key not in seen, f"{row['query']!r} is in {seen[key]} and {split}"
            seen[key] = split


def test_query_counts_and_out_of_scope_share(queries, name):
    assert sum(len(rows) for rows in queries.values()) >= SETS[name][2]
    for split, rows in queries.items():
        oos = sum(row["faq_id"] is None for row in rows) / len(rows)
        assert 0.15 <= oos <= 0.25, f"{split}: out-of-scope share {oos:.3f}"


def test_every_faq_has_a_query(queries, faqs):
    covered = {row["faq_id"] for rows in queries.values() for row in rows if row["faq_id"]}
    assert set(faqs) - covered == set()


def test_no_query_is_a_copy_of_a_phrasing(queries, kb):
    phrasings = [set(_norm(row["question"]).split()) for row in kb]
    for split, rows in queries.items():
        for row in rows:
            words = set(_norm(row["query"]).split())
            for p in phrasings:
                assert len(words & p) / len(words) < 0.75, f"{split}: {row['query']!r} copies {' '.join(sorted(p))!r}"
