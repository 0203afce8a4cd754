"""The fusion study (evaluation/query_encoder_fusion.py) on the demo, with the shipped MSEM as the teacher
(cheap on a CPU; mpnet in the published run)."""
from __future__ import annotations

import pytest

from evaluation.query_encoder_fusion import markdown, run


def test_fusion_study_ranks_every_mode_and_refuses_a_fine_tuned_base(tmp_path, query_encoder_work):
    from training.query_encoder import QueryEncoderConfig, train_query_encoder

    ridge = tmp_path / "ridge"
    train_query_encoder(ridge, data_dir=None, kb_files=["app/demo/faq.jsonl"], work=query_encoder_work,
                        config=QueryEncoderConfig(teacher="msem", base="minilm"), runtime="torch", device="cpu")
    report = run(str(ridge), ["demo"], [0.5], teacher="msem", runtime="torch")
    row = report["rows"][0]
    assert row["queries"] > 100 and set(row) >= {"accurate", "fast", "balanced", "fused 0.5"}
    assert all(0.5 < row[m] <= 1.0 for m in ("accurate", "fast", "balanced", "fused 0.5"))
    assert "| demo |" in markdown(report)
    (ridge / "top_layers.safetensors").write_bytes(b"")
    import json

    config = json.loads((ridge / "config.json").read_text())
    (ridge / "config.json").write_text(json.dumps({**config, "train_layers": 1}))
    with pytest.raises(SystemExit, match="ridge-only"):
        run(str(ridge), ["demo"], [0.5], teacher="msem", runtime="torch")


def test_modes_report_shows_the_default_decision_and_calibration():
    """evaluation/query_encoder.py's Markdown: quality per mode, then how honest each mode's score is."""
    from evaluation.query_encoder import markdown as modes_markdown

    mode = {"top1_accuracy": 0.6, "mrr": 0.7, "answer_f1": 0.5, "ece_top1": 0.08, "default_precision": 0.8,
            "default_f1": 0.52}
    report = {"query_encoder": "qe", "machine": {"processor": "cpu"}, "rows": [
        {"set": "energy", "accurate": mode, "balanced": {**mode, "ece_top1": None}, "fast": mode,
         "balanced_minus_accurate_pts": {"top1_accuracy": 0.0, "answer_f1": 0.0},
         "balanced_minus_fast_pts": {"top1_accuracy": 0.0, "answer_f1": 0.0}}]}
    text = modes_markdown(report)
    assert "| energy | 0.800 / 0.520, ECE 0.080 | 0.800 / 0.520, ECE - |" in text
