"""Pair construction, pair files, BM25 neighbours and the paraphrase graph -> intent classes."""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from kb.records import kb_groups
from training.pairs import (
    KbPairSampler,
    Bm25Neighbours,
    Pair,
    PairFileError,
    ParaphraseGraph,
    build_intent_classes,
    intent_classes,
    nearest_from_vectors,
    read_pair_file,
    split_pairs,
)


def test_graph_components_to_intents_exact():
    graph = ParaphraseGraph()
    # component A: a-b-c-d-e (5 questions, built through a chain and a merge of two trees)
    graph.add_pairs([Pair("a", "b", 1), Pair("c", "d", 1), Pair("b", "c", 1), Pair("e", "a", 1)])
    # component B: exactly 3 questions -> NOT a class (must be MORE than 3)
    graph.add_pairs([Pair("x", "y", 1), Pair("y", "z", 1)])
    # component C: exactly 4 questions -> a class
    graph.add_pairs([Pair("p", "q", 1), Pair("r", "s", 1), Pair("q", "r", 1)])
    # negatives add vertices but no edges: "n1", "n2" are singletons; "a"-"p" stay separate
    graph.add_pairs([Pair("n1", "n2", 0), Pair("a", "p", 0)])
    classes = intent_classes(graph)
    assert classes.names[0] == "other"
    assert classes.n_classes == 3
    assert classes.of_question == {
        "a": 1, "b": 1, "c": 1, "d": 1, "e": 1,
        "x": 0, "y": 0, "z": 0,
        "p": 2, "q": 2, "r": 2, "s": 2,
        "n1": 0, "n2": 0,
    }
    assert classes.sizes() == [5, 5, 4]
    assert classes.class_of("never seen") == 0


def test_graph_components_order_and_duplicates():
    graph = ParaphraseGraph()
    graph.add_edge("a", "a")  # self loop: one vertex
    graph.add_edge("b", "c")
    graph.add_edge("c", "b")  # duplicate edge
    assert len(graph) == 3
    assert graph.components() == [["a"], ["b", "c"]]


def test_build_intent_classes_from_kb_groups_and_pairs():
    groups = {"f1": ["q1", "q2", "q3", "q4"], "f2": ["r1", "r2"], "f3": ["s1", "s2", "s3"]}
    # a labelled pair joins f2 and f3 into one component of 5 -> a class; f1 is a class of 4
    classes = build_intent_classes(groups, [Pair("r1", "s1", 1)])
    assert classes.n_classes == 3
    assert {classes.class_of(q) for q in groups["f1"]} == {1}
    assert {classes.class_of(q) for q in groups["f2"] + groups["f3"]} == {2}
    only_kb = build_intent_classes(groups)
    assert only_kb.n_classes == 2
    assert {only_kb.class_of(q) for q in groups["f2"] + groups["f3"]} == {0}


def test_read_pair_file(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("label\tq1\tq2\n1\tHow are you ?\tHow do you do ?\t42\n0\ta\tb\n\n", encoding="utf-8")
    assert read_pair_file(path) == [Pair("How are you ?", "How do you do ?", 1), Pair("a", "b", 0)]
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\ta\tb\n2\ta\tb\n1\tonly two\n", encoding="utf-8")
    with pytest.raises(PairFileError) as err:
        read_pair_file(bad)
    assert f"{bad}:2: label must be 0 or 1" in str(err.value)
    assert f"{bad}:3: expected label<TAB>q1<TAB>q2" in str(err.value)


@dataclass
class Rec:
    faq_id: str
    question: str


def test_kb_groups_dedupes_and_keeps_order():
    recs = [Rec("a", "x"), Rec("b", "y"), Rec("a", " x "), Rec("a", "z")]
    assert kb_groups(recs) == {"a": ["x", "z"], "b": ["y"]}


def test_sampler_labels_are_consistent_with_faqs():
    groups = {f"f{i}": [f"f{i} question {j}" for j in range(3)] for i in range(5)}
    faq_of = {q: f for f, qs in groups.items() for q in qs}
    sampler = KbPairSampler(groups, positives=1, random_negatives=1, hard_negatives=1)
    pairs = sampler.sample(random.Random(0))
    assert len(pairs) == 15 * 3
    for p in pairs:
        assert p.q1 != p.q2
        assert p.label == int(faq_of[p.q1] == faq_of[p.q2])
    # resampling with another seed gives other pairs (negatives are resampled per epoch)
    assert sampler.sample(random.Random(1)) != pairs


def test_sampler_hard_negatives_come_from_the_neighbour_function():
    groups = {"a": ["a1", "a2"], "b": ["b1", "b2"], "c": ["c1", "c2"]}
    sampler = KbPairSampler(groups, positives=0, random_negatives=0, hard_negatives=1, hard_pool=1)
    # neighbours: a's and b's nearest is c1 (index 4); c's nearest is its own c2, then a1
    sampler.set_neighbours(lambda qs: (lambda i: [4, 1] if i < 4 else [5, 0]))
    pairs = sampler.sample(random.Random(0))
    by_anchor = {p.q1: p.q2 for p in pairs}
    assert by_anchor["a1"] == "c1" and by_anchor["b2"] == "c1"
    assert by_anchor["c1"] == "a1" and by_anchor["c2"] == "a1"  # same-FAQ neighbour c2 skipped


def test_lexical_index_finds_word_overlap():
    texts = ["how do i reset my password", "reset password please", "what is the weather", "weather today"]
    nearest = Bm25Neighbours(texts).nearest(2)
    assert nearest.shape == (4, 2)
    assert nearest[0, 0] == 1 and nearest[1, 0] == 0
    assert nearest[2, 0] == 3 and nearest[3, 0] == 2
    assert all(nearest[i, 0] != i for i in range(4))


def test_nearest_from_vectors_excludes_self():
    vecs = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    assert nearest_from_vectors(vecs, 1, chunk=3).ravel().tolist() == [1, 0, 3, 2]


def test_split_pairs_is_seeded():
    pairs = [Pair(str(i), str(i + 1), i % 2) for i in range(20)]
    train, hold = split_pairs(pairs, 0.1, seed=3)
    assert len(hold) == 2 and len(train) == 18
    assert split_pairs(pairs, 0.1, seed=3) == (train, hold)
    assert set(train).isdisjoint(hold)
