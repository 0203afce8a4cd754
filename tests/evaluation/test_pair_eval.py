"""`faq eval pairs`: threshold search, AUC, and the command on a tiny pair file with the real MiniLM."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cli.main import main
from evaluation.pairs import accuracy_at, roc_auc
from models.scoring import best_threshold


def test_best_threshold_separates_when_possible():
    cos = np.array([0.1, 0.2, 0.8, 0.9, 0.3])
    labels = np.array([0, 0, 1, 1, 0])
    thr, acc = best_threshold(cos, labels)
    assert acc == 1.0 and 0.3 < thr < 0.8
    assert accuracy_at(cos, labels, thr) == 1.0
    assert roc_auc(cos, labels) == 1.0


def test_best_threshold_edge_cases():
    thr, acc = best_threshold(np.array([0.5, 0.6]), np.array([1, 1]))
    assert acc == 1.0 and thr <= 0.5  # everything called a paraphrase (score >= thr)
    thr, acc = best_threshold(np.array([0.5, 0.6]), np.array([0, 0]))
    assert acc == 1.0 and thr > 0.6
    assert roc_auc(np.array([0.5, 0.6]), np.array([0, 0])) is None
    # ties and an inverted scorer: AUC 0, accuracy still the best achievable by one threshold
    assert roc_auc(np.array([0.9, 0.1]), np.array([0, 1])) == 0.0


def test_eval_pairs_command(tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(
        "1\thow do I reset my password\thow can I change my password\n"
        "0\thow do I reset my password\twhat is the weather in Paris\n"
        "1\twhere is my parcel\ttrack my package\n"
        "0\twhere is my parcel\thow do I cook rice\n",
        encoding="utf-8",
    )
    out = tmp_path / "report.json"
    assert main(["eval", "pairs", "--pairs", str(pairs), "--dev-pairs", str(pairs), "--model", "minilm",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["n"] == 4 and report["roc_auc"] == 1.0
    assert report["accuracy"]["dev_tuned"]["accuracy"] == 1.0
    assert "matching_layer" not in report["accuracy"]  # MiniLM has no matching layer
    assert "ROC AUC 1.0000" in capsys.readouterr().out
    # every scorer in one Table-2: another encoder's cosine, a (tiny, real) cross-encoder, the char n-grams
    from tests.helpers.reranker import make_tiny_reranker

    import shutil

    tiny = make_tiny_reranker(tmp_path / "cross")
    same_name = shutil.copytree(tiny, tmp_path / "other" / "cross")  # two folders of one name: two rows
    assert main(["eval", "pairs", "--pairs", str(pairs), "--dev-pairs", str(pairs), "--model", "minilm",
                 "--cosine", "minilm", "--reranker", str(tiny), "--reranker", str(same_name), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["classifiers"]
    assert set(rows) == {"cosine", "cosine:minilm", "char_ngram", "cross-encoder:cross", f"cross-encoder:{same_name}"}
    assert rows["cosine:minilm"]["log_loss"] == pytest.approx(rows["cosine"]["log_loss"], abs=1e-6)
    assert 0.0 <= rows["cross-encoder:cross"]["roc_auc"] <= 1.0
    assert main(["eval", "pairs", "--pairs", str(pairs), "--model", "minilm", "--cosine", "mpnet",
                 "--json", str(out)]) == 2  # the classifier table needs dev pairs
    bad = tmp_path / "bad.tsv"
    bad.write_text("maybe\tq1\tq2\n", encoding="utf-8")
    assert main(["eval", "pairs", "--pairs", str(bad), "--model", "minilm", "--json", str(out)]) == 2


def test_char_ngram_baseline_and_classifier_metrics():
    from evaluation.pairs import CharNgramBaseline, classifier_metrics

    q1 = ["reset my password", "reset my password", "track my parcel", "track my parcel", "cook rice", "cook rice"]
    q2 = ["reset the password", "weather in paris", "track a parcel", "buy a car", "cooking rice", "my password"]
    labels = np.array([1, 0, 1, 0, 1, 0])
    baseline = CharNgramBaseline().fit(q1, q2, labels)
    p = baseline.score_pairs(q1, q2)
    assert ((p >= 0.5) == (labels == 1)).all() and baseline.a > 0
    assert baseline.cosines(["Reset my password"], ["reset my password"])[0] == pytest.approx(1.0)
    m = classifier_metrics(np.array([0.9, 0.2, 0.6, 0.4]), np.array([1, 0, 0, 1]))
    assert m["accuracy"] == 0.5 and m["precision"] == 0.5 and m["recall"] == 0.5 and m["f1"] == 0.5
    assert m["log_loss"] == pytest.approx(-np.mean(np.log([0.9, 0.8, 0.4, 0.4])))
    assert m["roc_auc"] == 0.75
