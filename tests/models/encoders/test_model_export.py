"""`faq model export`: fp16 without the intent head, same vectors up to fp16 rounding, training record kept."""
from __future__ import annotations

import json

import numpy as np
import torch

from cli.main import main
from models.glove import GloVe
from models.encoders.msem.encoder import MsemEncoder


def test_export_fp16_drops_intent_head_and_keeps_vectors(tmp_path, capsys):
    torch.set_num_threads(1)
    words = ["password", "reset", "open", "hours", "refund", "money"]
    glove = GloVe(words, np.random.default_rng(0).normal(0, 0.5, (len(words), 8)).astype(np.float32))
    cfg = {"hidden": 8, "heads": 2, "ffn_dim": 16, "pool_da": 8, "pool_heads_r": 2, "char_dim": 8,
           "char_filters": 8, "max_len": 12, "word_dim": 8, "n_intents": 5}
    src = MsemEncoder.create(cfg, ["how do i reset my password", "refund money"], device="cpu", glove=glove, seed=0)
    src_dir = src.save(tmp_path / "trained", readme="# trained by a test\n")
    (src_dir / "training.json").write_text(json.dumps({"command": "faq train msem ..."}))
    out = tmp_path / "shipped"
    assert main(["model", "export", str(src_dir), "--out", str(out)]) == 0
    assert "max vector drift" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    assert config["weights_dtype"] == "float16" and config["n_intents"] == 0
    assert (out / "README.md").read_text() == "# trained by a test\n" and (out / "training.json").is_file()
    assert (out / "model.safetensors").stat().st_size < (src_dir / "model.safetensors").stat().st_size / 1.9
    texts = ["reset my password", "opening hours", "an unseen wordy sentence"]
    np.testing.assert_allclose(MsemEncoder.load(out).encode(texts), src.encode(texts), atol=5e-3)
    assert not list(tmp_path.glob("*.tmp-export"))
    assert all(f.stat().st_mode & 0o044 == 0o044 for f in out.iterdir())  # readable by a non-root service user
    # fusion needs the MiniLM word representation
    assert main(["model", "export", str(src_dir), "--out", str(tmp_path / "f"), "--minilm-fusion", "0.5"]) == 2
    assert "needs word_repr 'minilm' or 'mpnet'" in capsys.readouterr().err
    # bad input: not a model folder; exporting onto itself
    assert main(["model", "export", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
    assert main(["model", "export", str(out), "--out", str(out)]) == 2
