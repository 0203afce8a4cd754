"""`faq train mmaicm` and `faq eval answer-selection` end to end on tiny fixture files."""
from __future__ import annotations

import json

import torch

from cli.main import main
from tests.helpers.answer_selection import TREC_ROWS, WIKIQA_ROWS, write_trecqa, write_wikiqa

torch.set_num_threads(1)

TINY = '{"max_q_len": 10, "max_a_len": 14, "filters": 4, "fc_hidden": 8}'


def test_train_then_evaluate_on_wikiqa_files(tmp_path, capsys, monkeypatch, minilm_encoder):
    import models.encoders.load

    # the session's all-MiniLM-L6-v2, loaded once for every test that needs it
    monkeypatch.setattr(models.encoders.load, "load_encoder", lambda spec="minilm", **_: minilm_encoder)
    src = write_wikiqa(tmp_path / "wikiqa", WIKIQA_ROWS * 2)
    model = tmp_path / "model"
    assert main(["train", "mmaicm", "--data", "wikiqa", "--src", str(src), "--out", str(model), "--epochs", "2",
                 "--config", TINY, "--threads", "1"]) == 0
    assert "model saved in" in capsys.readouterr().out
    for name in ("config.json", "model.safetensors", "text.json", "calibration.json", "training.json", "checkpoint.pt"):
        assert (model / name).exists(), name
    training = json.loads((model / "training.json").read_text())
    assert training["epochs_done"] == 2 and training["metric"] == "dev_map"
    # a cut run continues where it stopped
    assert main(["train", "mmaicm", "--data", "wikiqa", "--src", str(src), "--out", str(model), "--epochs", "3",
                 "--resume", "--threads", "1"]) == 0
    assert json.loads((model / "training.json").read_text())["epochs_done"] == 3

    out = tmp_path / "report"
    assert main(["eval", "answer-selection", "--data", "wikiqa", "--src", str(src), "--model", str(model),
                 "--out", str(out), "--threads", "1"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert [r["kind"] for r in report["rows"]] == ["cosine", "mmaicm", "fused"]
    fused = report["rows"][2]
    assert 0 <= fused["lambda"] <= 1 and fused["fusion"]["model"]["kind"] == "zscore"
    assert report["rows"][1]["config"]["word_repr"] == "glove" and report["rows"][1]["config"]["use_attention"]
    assert "| model + cosine |" in (out / "report.md").read_text()


def test_train_from_a_kb_and_the_ablation_flag(tmp_path, capsys):
    kb = tmp_path / "kb.jsonl"
    with open(kb, "w") as fh:
        for i in range(5):
            for k in range(3):
                fh.write(json.dumps({"faq_id": f"f{i}", "question": f"question {i} number {k}",
                                     "answer": f"the answer to question {i}", "tags": ["t"]}) + "\n")
    model = tmp_path / "kb-model"
    assert main(["train", "mmaicm", "--kb", str(kb), "--out", str(model), "--epochs", "1", "--no-attention",
                 "--config", TINY, "--threads", "1"]) == 0
    config = json.loads((model / "config.json").read_text())
    assert config["use_attention"] is False and config["architecture"] == "mmaicm"
    assert json.loads((model / "training.json").read_text())["data"]["kb"] == str(kb)


def test_bad_arguments_exit_2(tmp_path, capsys):
    src = write_trecqa(tmp_path / "trecqa", TREC_ROWS)
    assert main(["train", "mmaicm", "--out", str(tmp_path / "m")]) == 2
    assert "--data" in capsys.readouterr().err
    assert main(["train", "mmaicm", "--data", "trecqa", "--out", str(tmp_path / "m")]) == 2
    assert main(["train", "mmaicm", "--data", "trecqa", "--src", str(src), "--out", str(tmp_path / "m"),
                 "--config", '{"use_attention": true}', "--no-attention"]) == 2
    assert "use_attention" in capsys.readouterr().err
    assert main(["train", "mmaicm", "--data", "wikiqa", "--src", str(src), "--out", str(tmp_path / "m")]) == 2
    assert "WikiQA-train.txt" in capsys.readouterr().err
