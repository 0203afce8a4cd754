"""`faq eval match --reranker`: the ann+rerank arm through the product path, with the fusion weight tuned
on dev (a tiny random MSEM and a tiny real re-ranker: the numbers are meaningless, the plumbing is not)."""
from __future__ import annotations

import json

from evaluation.rerank_tuning import WEIGHT_GRID
from tests.helpers.reranker import make_tiny_reranker
from tests.helpers.evaluation import write_tiny_kb_and_queries


def test_eval_match_with_a_reranker_tunes_the_weight_on_dev(tmp_path, tiny_msem_dir):  # noqa: F811
    from cli.main import main

    kb, queries = write_tiny_kb_and_queries(tmp_path)
    rr = make_tiny_reranker(tmp_path / "rr", onnx=False)
    out = tmp_path / "r.json"
    base = ["eval", "match", "--kb", str(kb), "--queries", str(queries), "--dev", str(queries),
            "--model", str(tiny_msem_dir), "--json", str(out), "--reranker", str(rr)]
    assert main(base + ["--tune-rerank-weight"]) == 0
    report = json.loads(out.read_text())
    assert report["arm"] == "ann+rerank" and report["reranker"]["rerank_k"] == 20
    tuning = report["reranker"]["weight_tuning"]
    assert len(tuning["dev_f1_by_weight"]) == len(WEIGHT_GRID) and report["reranker"]["weight"] == tuning["chosen"]
    # dev == test: the real matcher run at the chosen weight reproduces the grid's dev F1
    assert abs(report["dev_metrics"]["tuned_f1"] - tuning["dev_f1_by_weight"][str(tuning["chosen"])]) < 1e-9
    assert main(base + ["--rerank-weight", "1.5"]) == 2
