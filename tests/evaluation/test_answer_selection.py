"""`faq eval answer-selection` (evaluation/answer_selection.py): the ranking metrics on hand-computed
lists, the WikiQA / TrecQA readers on tiny fixture files, the protocols' filters and draws, the fusion."""
from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.answer_selection import (
    Normaliser,
    choose_lambda,
    format_markdown,
    fuse,
    list_metrics,
    paper_lists,
    run_answer_selection,
    write_report,
    zscore,
)
from evaluation.measures import ndcg, precision_at_1, reciprocal_rank
from training.mmaicm import QaList, TrainError, average_precision, evaluable, load_split, read_trecqa, read_wikiqa
from tests.helpers.answer_selection import write_trecqa, write_wikiqa

# ---------------------------------------------------------------- metrics by hand


def test_average_precision_by_hand():
    # ranking by score: c (1), a (0), d (1), b (0) -> precisions at the hits 1/1 and 2/3
    assert average_precision([0.5, 0.1, 0.9, 0.3], [0, 0, 1, 1]) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision([0.9, 0.8, 0.7], [0, 0, 1]) == pytest.approx(1 / 3)
    assert average_precision([0.1, 0.2], [0, 0]) == 0.0
    # ties keep the file order
    assert average_precision([0.5, 0.5, 0.5], [0, 1, 0]) == pytest.approx(0.5)


def test_reciprocal_rank_ndcg_and_p_at_1_by_hand():
    scores, labels = [0.2, 0.9, 0.4, 0.1], [0, 0, 1, 1]  # order: 0.9 (0), 0.4 (1), 0.2 (0), 0.1 (1)
    assert reciprocal_rank(scores, labels) == pytest.approx(0.5)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 / math.log2(2) + 1 / math.log2(3)
    assert ndcg(scores, labels) == pytest.approx(dcg / ideal)
    assert precision_at_1(scores, labels) == 0.0
    assert precision_at_1([0.2, 0.9], [0, 1]) == 1.0
    # the paper's lists: one relevant answer among 6, at rank 3 -> nDCG = 1 / log2(4) = 0.5
    assert ndcg([0.9, 0.8, 0.7, 0.1, 0.0, -1], [0, 0, 1, 0, 0, 0]) == pytest.approx(0.5)
    assert reciprocal_rank([0.1, 0.2], [0, 0]) == 0.0 and ndcg([0.1], [0]) == 0.0


def test_list_metrics_average_over_questions():
    lists = [QaList("q1", ["a", "b"], [1, 0]), QaList("q2", ["c", "d", "e"], [0, 0, 1])]
    m = list_metrics(lists, [np.array([0.9, 0.1]), np.array([0.9, 0.5, 0.1])])
    assert m["map"] == pytest.approx((1 + 1 / 3) / 2) and m["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    assert m["p_at_1"] == pytest.approx(0.5) and m["questions"] == 2


# ---------------------------------------------------------------- readers and filters


def test_read_wikiqa_groups_consecutive_rows(tmp_path):
    lists = read_wikiqa(write_wikiqa(tmp_path / "wikiqa") / "WikiQA-test.txt")
    assert [l.question for l in lists] == ["how are glacier caves formed ?", "how much is 1 tablespoon of water",
                                           "who wrote the odyssey", "who is the author of hamlet"]
    assert lists[1].labels == [0, 1, 1] and lists[1].candidates[2] == "In Australia one tablespoon is 20 mL ."
    # WikiQA's filtered setting keeps the questions with a correct answer
    assert [l.question for l in evaluable(lists, "wikiqa")] == [lists[0].question, lists[1].question, lists[3].question]
    bad = tmp_path / "bad.txt"
    bad.write_text("q\tonly two fields\n", encoding="utf-8")
    with pytest.raises(TrainError, match="bad.txt:1"):
        read_wikiqa(bad)
    bad.write_text("q\ta\tyes\n", encoding="utf-8")
    with pytest.raises(TrainError, match="label"):
        read_wikiqa(bad)


def test_read_trecqa_csv_quoting_and_clean_setting(tmp_path):
    lists = load_split("trecqa", write_trecqa(tmp_path / "trecqa"), "test")
    assert len(lists) == 3 and lists[0].candidates[1] == 'The handbook, "a primer", describes Wicca .'
    assert lists[1].question == "Who is the author of the book , `` The Iron Lady '' ?"
    # clean: a correct and a wrong answer; the Iron Lady question has no wrong one
    assert [l.question for l in evaluable(lists, "trecqa")] == [lists[0].question, lists[2].question]
    (tmp_path / "x.csv").write_text("question,label,answer\nq,1,a\n", encoding="utf-8")
    with pytest.raises(TrainError, match="qtext"):
        read_trecqa(tmp_path / "x.csv")
    with pytest.raises(FileNotFoundError, match="WikiQA-test.txt"):
        load_split("wikiqa", tmp_path, "test")


# ---------------------------------------------------------------- the paper's protocol and the fusion


def test_paper_lists_draw_other_questions_answers_seeded():
    lists = [QaList(f"q{i}", [f"a{i}-{k}" for k in range(4)], [1, 0, 1, 0]) for i in range(8)]
    drawn = paper_lists(lists, fakes=5, seed=3)
    assert drawn == paper_lists(lists, fakes=5, seed=3) and drawn != paper_lists(lists, fakes=5, seed=4)
    for l, p in zip(lists, drawn):
        assert p.question == l.question and p.labels == [0] * 5 + [1]
        assert p.candidates[-1] in {l.candidates[0], l.candidates[2]}
        assert not set(p.candidates[:5]) & set(l.candidates) and len(set(p.candidates)) == 6
    # ties rank the true answer last: a constant scorer gets P@1 = 0
    assert list_metrics(drawn, [np.zeros(6)] * len(drawn))["p_at_1"] == 0.0


def test_zscore_fusion_and_lambda_on_dev():
    assert np.allclose(zscore(np.array([1.0, 2.0, 3.0])), [-1.2247449, 0, 1.2247449])
    assert np.allclose(zscore(np.array([2.0, 2.0])), [0, 0])
    lists = [QaList("q1", ["a", "b", "c"], [1, 0, 0]), QaList("q2", ["d", "e", "f"], [0, 1, 0])]
    cosine = [np.array([0.5, 0.6, 0.1]), np.array([0.9, 0.8, 0.1])]  # wrong on both
    model = [np.array([0.9, 0.0, 0.1]), np.array([0.0, 0.9, 0.1])]  # right on both
    z = Normaliser("zscore")
    lam, by_lambda = choose_lambda(lists, cosine, model, z, z)
    assert by_lambda[0.0] == pytest.approx(0.5) and by_lambda[1.0] == pytest.approx(1.0)
    assert 0 < lam < 1 and by_lambda[lam] == pytest.approx(1.0)  # the smallest λ that gets both right
    assert all(by_lambda[l] < 1.0 for l in by_lambda if l < lam)
    fused = fuse(cosine, model, 0.5, z, z)
    assert np.allclose(fused[0], 0.5 * zscore(cosine[0]) + 0.5 * zscore(model[0]))
    logistic = Normaliser("logistic").fit(lists, model)
    assert logistic.a > 0 and np.allclose(logistic(np.array([0.0, 1.0])), [logistic.b, logistic.a + logistic.b])
    with pytest.raises(ValueError):
        Normaliser("rank")


def test_run_answer_selection_cosine_row(tmp_path, minilm_encoder):
    src = write_trecqa(tmp_path / "trecqa")
    report = run_answer_selection("trecqa", src, encoder_obj=minilm_encoder, command="faq eval answer-selection")
    (row,) = report["rows"]
    assert row["kind"] == "cosine" and report["questions"]["test_evaluated"] == 2 and report["questions"]["test_raw"] == 3
    assert 0 < row["map"] <= 1 and 0 < row["paper_ndcg"] <= 1 and row["raw_map"] >= row["map"] - 1e-9
    json_path, md_path = write_report(report, tmp_path / "out")
    assert json_path.exists() and "| cosine (all-MiniLM-L6-v2) |" in md_path.read_text()
    assert "raw MAP" in format_markdown(report)
    with pytest.raises(ValueError, match="fusion"):
        run_answer_selection("trecqa", src, encoder_obj=minilm_encoder, fusion="max")


# ---------------------------------------------------------------- the analogy paper's protocol

ANALOGY_ROWS = [
    ("who wrote hamlet ?", "Hamlet was written by William Shakespeare .", 1),
    ("who wrote hamlet ?", "Hamlet is a tragedy .", 0),
    ("Who painted the Mona Lisa", "The Mona Lisa is in Paris .", 0),  # no correct answer: dropped
    ("when was the eiffel tower built ?", "The Eiffel Tower was built in 1889 .", 1),
    ("when was the eiffel tower built ?", "The Eiffel Tower is in Paris .", 0),
    ("where is the eiffel tower ?", "The Eiffel Tower is in Paris .", 1),
    ("where is the eiffel tower ?", "The Eiffel Tower was built in 1889 .", 0),
    ("what is the eiffel tower ?", "The Eiffel Tower is a tower .", 1),  # not who / when / where
    ("in 1990 who won ?", "Somebody won .", 1),  # the wh-word is not first
]


def test_typed_subsets_and_bootstrap():
    from evaluation.answer_selection import bootstrap_interval, typed_subsets

    lists = read_wikiqa(write_wikiqa_rows(ANALOGY_ROWS))
    subsets = typed_subsets(lists)
    assert {t: len(v) for t, v in subsets.items()} == {"who": 1, "when": 1, "where": 1}
    assert bootstrap_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    low, high = bootstrap_interval([0.0, 1.0] * 20, reps=500)
    assert low < 0.5 < high and high - low < 0.4


def write_wikiqa_rows(rows, folder=None):
    import tempfile
    from pathlib import Path

    folder = Path(folder or tempfile.mkdtemp())
    return write_wikiqa(folder, rows) / "WikiQA-test.txt"


def test_run_analogy_selection_counts_and_rows(tmp_path, minilm_encoder):
    from evaluation.answer_selection import format_analogy_markdown, run_analogy_selection
    from models.matchers.analogy import AnalogyConfig, AnalogyScorer, BiGruEncoder, select_prototypes
    from models.encoders.words import GloveWords

    src = write_wikiqa(tmp_path / "wikiqa", ANALOGY_ROWS)
    words = GloveWords()
    lists = read_wikiqa(src / "WikiQA-train.txt")
    AnalogyScorer(BiGruEncoder(AnalogyConfig(hidden=8)), words, select_prototypes(lists, 2), device="cpu").save(
        tmp_path / "model")
    report = run_analogy_selection("wikiqa", src, [tmp_path / "model"], encoders=["glove", "minilm"], prototypes=2,
                                   bootstrap=200, encoder_objs={"minilm": minilm_encoder})
    assert report["questions"]["test"] == {"who": 1, "when": 1, "where": 1}
    names = [r["name"] for r in report["rows"]]
    assert names[:2] == ["GloVe average cosine", "GloVe average analogy (best of k)"] and len(names) == 6
    assert "analogy (glove)" in names[4] and names[5].endswith("+ MiniLM cosine")
    assert 0.0 <= report["rows"][5]["lambda"] <= 1.0
    for r in report["rows"]:
        assert r["combined"]["questions"] == 3 and r["who"]["questions"] == 1
        assert r["combined"]["map_ci95"][0] <= r["combined"]["map"] <= r["combined"]["map_ci95"][1]
    # one prototype per type (the fixture has one typed question of each), drawn from train
    assert report["rows"][1]["prototypes"] == 3
    md = format_analogy_markdown(report)
    assert "| test | 1 | 1 | 1 | 3 | 34 / 16 / 22 = 72 |" in md
    json_path, md_path = write_report(report, tmp_path / "out")
    assert "combined MAP" in md_path.read_text()
