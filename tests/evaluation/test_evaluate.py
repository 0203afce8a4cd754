"""Metric functions on hand-computed examples, threshold tuning, and the eval-match runner."""
from __future__ import annotations

import pytest

from evaluation.measures import (
    QueryOutcome,
    all_metrics,
    answer_metrics,
    apply_threshold,
    mean_reciprocal_rank,
    rank_of,
    recall_at_k,
    top1_accuracy,
    tune_threshold,
)
from tests.helpers.evaluation import write_tiny_kb_and_queries


def Q(gold, ranked, score, answer="top"):
    ranked = tuple(ranked)
    if answer == "top":
        answer = ranked[0] if ranked else None
    return QueryOutcome(gold, ranked, score, answer)


# 4 in-scope + 2 out-of-scope queries
OUTCOMES = [
    Q("a", ["a", "b", "c"], 0.9),  # rank 1, answered correctly
    Q("b", ["a", "b", "c"], 0.8),  # rank 2, answered wrongly (a)
    Q("c", ["a", "b", "d", "e", "f", "c"], 0.4, None),  # rank 6, unanswered
    Q("d", ["x", "y"], 0.3, None),  # not retrieved, unanswered
    Q(None, ["a"], 0.7),  # out of scope, answered (wrong)
    Q(None, ["b"], 0.2, None),  # out of scope, unanswered (right)
]


def test_rank_of():
    assert rank_of("c", ["a", "b", "c"]) == 3
    assert rank_of("z", ["a"]) is None


def test_ranking_metrics_hand_computed():
    assert top1_accuracy(OUTCOMES) == pytest.approx(1 / 4)
    assert mean_reciprocal_rank(OUTCOMES) == pytest.approx((1 + 1 / 2 + 1 / 6 + 0) / 4)
    assert recall_at_k(OUTCOMES, 5) == pytest.approx(2 / 4)
    assert recall_at_k(OUTCOMES, 6) == pytest.approx(3 / 4)


def test_answer_metrics_hand_computed():
    m = answer_metrics(OUTCOMES)
    # answered: q1 (right), q2 (wrong), oos q5 (wrong) -> precision 1/3; recall 1/4 answerable
    assert m["n_answered"] == 3 and m["n_correct"] == 1
    assert m["answer_precision"] == pytest.approx(1 / 3)
    assert m["answer_recall"] == pytest.approx(1 / 4)
    assert m["answer_f1"] == pytest.approx(2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4))
    assert m["oos_recall"] == pytest.approx(1 / 2)
    everything = all_metrics(OUTCOMES)
    assert everything["n_queries"] == 6 and everything["n_in_scope"] == 4 and everything["recall_at_5"] == 0.5


def test_empty_and_degenerate_inputs():
    assert top1_accuracy([]) == 0.0 and mean_reciprocal_rank([]) == 0.0
    m = answer_metrics([Q(None, [], None, None)])
    assert m["answer_precision"] == 0.0 and m["oos_recall"] == 1.0 and m["answer_f1"] == 0.0


def test_apply_threshold_matches_matcher_rule():
    applied = apply_threshold(OUTCOMES, 0.75)
    assert [o.answer for o in applied] == ["a", "a", None, None, None, None]
    # a score equal to the threshold is answered (the Pipeline uses >=)
    assert apply_threshold([Q("a", ["a"], 0.5, None)], 0.5)[0].answer == "a"


def test_tune_threshold_maximises_f1():
    outcomes = [
        Q("a", ["a"], 0.95),
        Q("b", ["b"], 0.90),
        Q(None, ["a"], 0.85),  # out-of-scope, scores high
        Q("c", ["c"], 0.80),
        Q("d", ["x"], 0.60),  # wrong top-1
        Q(None, ["b"], 0.30),
    ]
    # answering the top m: m=1 P1 R1/4; m=2 P1 R2/4 (F1 .667); m=3 P2/3 R2/4 (.571);
    # m=4 P3/4 R3/4 (F1 .75); m=5 P3/5 R3/4 (.667); m=6 P1/2 (.6)
    threshold, f1 = tune_threshold(outcomes)
    assert f1 == pytest.approx(0.75)
    assert threshold == pytest.approx((0.80 + 0.60) / 2)
    assert answer_metrics(apply_threshold(outcomes, threshold))["answer_f1"] == pytest.approx(0.75)


def test_tune_threshold_ties_and_nothing_to_gain():
    # two queries with the same score cannot be separated: both or none are answered
    outcomes = [Q("a", ["a"], 0.7), Q(None, ["b"], 0.7), Q("c", ["c"], 0.4)]
    threshold, f1 = tune_threshold(outcomes)
    assert f1 == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))  # answer all three: P 2/3, R 1
    assert threshold == pytest.approx(0.4)
    # only wrong answers possible -> answer nothing (threshold above every score)
    threshold, f1 = tune_threshold([Q("a", ["b"], 0.9), Q(None, ["b"], 0.8)])
    assert f1 == 0.0 and threshold > 0.9


# ---------------------------------------------------------------------------------------------
# the runner: the product path (store -> build_index -> Pipeline) with a tiny random MSEM


import json  # noqa: E402

import numpy as np  # noqa: E402


def test_run_eval_match_goes_through_store_index_and_matcher(tmp_path, tiny_msem_dir, capsys):
    from cli.main import main

    kb, queries = write_tiny_kb_and_queries(tmp_path)
    work = tmp_path / "work"
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    args = ["eval", "match", "--kb", str(kb), "--queries", str(queries), "--dev", str(queries),
            "--model", str(tiny_msem_dir), "--json", str(out_json), "--md", str(out_md), "--workdir", str(work)]
    assert main(args) == 0
    assert "answer F1" in capsys.readouterr().out
    report = json.loads(out_json.read_text())
    assert report["encoder_id"].startswith("msem:tiny-msem:")
    assert report["counts"]["faqs"] == 3 and report["counts"]["variants"] == 4
    assert report["counts"]["test_oos"] == 1 and report["threshold"]["source"] == "dev"
    m = report["metrics"]
    assert m["n_queries"] == 4 and m["n_in_scope"] == 3 and m["n_oos"] == 1
    # every in-scope query's FAQ is among the 3 FAQs returned, so recall@5 is 1 whatever the model
    assert m["recall_at_5"] == 1.0
    # dev == test here, so the tuned F1 is what the matcher's own answers achieve on test
    assert m["answer_f1"] == pytest.approx(report["dev_metrics"]["tuned_f1"])
    assert (work / "eval.db").is_file() and (work / "indexes").is_dir()
    assert out_md.read_text().startswith("# Match evaluation")
    # re-running in the same workdir starts from a fresh store
    assert main(args) == 0
    assert json.loads(out_json.read_text())["counts"]["imported"]["faqs_created"] == 3
    # a KB with one phrasing per FAQ: "i forgot my password" is left out
    assert main(args + ["--variants-per-faq", "1"]) == 0
    single = json.loads(out_json.read_text())
    assert single["counts"]["variants"] == 3 and single["variants_per_faq"] == 1
    assert main(args + ["--variants-per-faq", "0"]) == 2
    # several pool sizes are tried on dev and the best dev F1 is used
    assert main(args + ["--pool-variants", "1,2"]) == 0
    pooled = json.loads(out_json.read_text())
    by_pool = pooled["pool_tuning"]["dev_by_pool"]
    assert set(by_pool) == {"1", "2"} and pooled["pool_variants"] in (1, 2)
    assert by_pool[str(pooled["pool_variants"])]["dev_f1"] == max(v["dev_f1"] for v in by_pool.values())
    with pytest.raises(SystemExit):
        main(args + ["--pool-variants", "0"])


def test_run_eval_match_rejects_unknown_faq_ids(tmp_path, tiny_msem_dir, capsys):
    from cli.main import main

    kb = tmp_path / "kb.jsonl"
    kb.write_text(json.dumps({"faq_id": "a", "question": "q", "answer": "x"}) + "\n")
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": "q", "faq_id": "nope"}) + "\n")
    assert main(["eval", "match", "--kb", str(kb), "--queries", str(queries), "--model", str(tiny_msem_dir),
                 "--json", str(tmp_path / "r.json")]) == 2
    assert "faq_id(s) not in the KB" in capsys.readouterr().err


def test_a_shared_encoder_with_memo_encodes_each_text_once():
    from models.encoders.base import SharedEncoder, shared

    class Counting:
        id, dim = "counting", 2
        calls: list[list[str]] = []

        def encode(self, texts, batch_size=64, show_progress_bar=False):
            self.calls.append(list(texts))
            return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    inner = Counting()
    memo = SharedEncoder(inner, memo=True)
    first = memo.encode(["ab", "c", "ab"])
    again = memo.encode(["c", "ab", "def"])
    assert inner.calls == [["ab", "c"], ["def"]] and memo.id == "counting"
    assert first.tolist() == [[2, 1], [1, 1], [2, 1]] and again.tolist() == [[1, 1], [2, 1], [3, 1]]
    assert memo.encode([]).shape == (0, 2)
    assert shared(memo) is memo and shared(None) is None
    plain = shared(inner)
    assert plain.encode(["ab"]).tolist() == [[2, 1]] and inner.calls[-1] == ["ab"]  # no memo: every call encodes


def test_expected_calibration_error_of_the_top_match():
    from evaluation.measures import QueryOutcome, expected_calibration_error

    right = QueryOutcome("a", ("a",), 0.95, "a")
    wrong = QueryOutcome("a", ("b",), 0.95, "b")
    oos = QueryOutcome(None, ("b",), 0.15, None)
    # bin 0.9-1.0: mean 0.95, 1 of 2 right -> |0.95 - 0.5| * 2/3; bin 0.1-0.2: |0.15 - 0| * 1/3
    assert expected_calibration_error([right, wrong, oos]) == pytest.approx(0.45 * 2 / 3 + 0.15 / 3)
    assert expected_calibration_error([QueryOutcome("a", (), None, None)]) is None
