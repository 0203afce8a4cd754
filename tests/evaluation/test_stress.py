"""The packaged stress suite (evaluation/stress/pairs.tsv) and `faq eval stress`."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from evaluation.stress import TYPES, evaluate_scorer, load_stress


def test_suite_covers_every_type_with_both_labels_and_a_dev_test_split():
    pairs = load_stress()
    per_type = Counter(p.type for p in pairs)
    assert set(per_type) == set(TYPES) and min(per_type.values()) >= 10
    for kind in TYPES:
        labels = {p.label for p in pairs if p.type == kind}
        assert labels == {0, 1}, kind
        assert {p.split for p in pairs if p.type == kind} == {"dev", "test"}, kind
    assert len({(p.q1, p.q2) for p in pairs}) == len(pairs)  # no duplicate pair


def test_threshold_comes_from_dev_and_accuracy_from_test():
    pairs = load_stress()
    labels = np.array([p.label for p in pairs], dtype=float)
    perfect = evaluate_scorer(pairs, labels * 0.5 + 0.25)  # 0.25 for label 0, 0.75 for label 1
    assert perfect["test_accuracy"] == 1.0 and 0.25 < perfect["threshold"] < 0.75
    assert all(v["accuracy"] == 1.0 for v in perfect["per_type"].values())
    constant = evaluate_scorer(pairs, np.ones(len(pairs)))  # no signal: the majority label at best
    test_labels = labels[[p.split == "test" for p in pairs]]
    assert constant["test_accuracy"] == pytest.approx(max(test_labels.mean(), 1 - test_labels.mean()))


def test_bad_suite_lines_name_the_line(tmp_path):
    bad = tmp_path / "suite.tsv"
    bad.write_text("split\ttype\tlabel\tquestion1\tquestion2\ndev\tnegation\t2\ta\tb\n")
    with pytest.raises(ValueError, match=":2:"):
        load_stress(bad)


def test_eval_stress_command(tmp_path, monkeypatch):
    from cli.main import main
    from tests.helpers.reranker import make_tiny_reranker

    monkeypatch.setenv("FAQ_DATA_DIR", str(tmp_path / "var"))
    rr = make_tiny_reranker(tmp_path / "rr", onnx=False)
    out = tmp_path / "stress.json"
    assert main(["eval", "stress", "--reranker", f"tiny={rr}", "--json", str(out), "--md", str(tmp_path / "s.md")]) == 0
    report = json.loads(out.read_text())
    assert set(report["models"]) >= {"all-MiniLM-L6-v2 cosine", "tiny"}
    for name in ("all-MiniLM-L6-v2 cosine", "tiny"):
        result = report["models"][name]
        assert set(result["per_type"]) == set(TYPES) and 0 <= result["test_accuracy"] <= 1
        assert len(result["scores"]) == report["n_pairs"]
    assert "| **overall (test)** |" in (tmp_path / "s.md").read_text()
