"""Training of the Siamese matcher (training/siamese.py): a toy set learned and resumed, dev queries paired
with a KB's phrasings as a re-ranking stage sees them, a KB's phrasings as training pairs, the command
training several encoders on one word cache."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from kb.records import kb_groups
from kb.files import read_kb
from models.matchers.siamese import SiameseConfig, load_siamese
from training.loop import CHECKPOINT_FILE, TrainError
from training.siamese import TrainConfig, query_pairs, train_siamese
from tests.helpers.siamese import ToyWords, toy_kb

torch.set_num_threads(1)


def _toy_files(tmp_path):
    """Paraphrases share their topic word; non-paraphrases do not."""
    topics = ["password", "email", "money", "price", "recipe", "cafe"]
    rows = []
    for i, t in enumerate(topics):
        other = topics[(i + 1) % len(topics)]
        rows += [f"1\thow do i {t}\twhat is the {t}", f"0\thow do i {t}\twhat is the {other}",
                 f"1\tthe {t} is\ti {t}", f"0\tthe {t} is\ti {other}"]
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(rows * 4) + "\n", encoding="utf-8")
    dev = tmp_path / "dev.tsv"
    dev.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return train, dev


def test_training_lowers_the_loss_and_resumes(tmp_path):
    train, dev = _toy_files(tmp_path)
    config = SiameseConfig(encoder="conv", filters=8, hidden=4, mlp_hidden=16, dropout=0.0)
    summary = train_siamese(tmp_path / "m", [train], dev, config, TrainConfig(epochs=6, batch_size=16, lr=3e-3,
                                                                                 patience=6), words=ToyWords())
    history = summary["history"]
    assert history[-1]["train_log_loss"] < history[0]["train_log_loss"]
    assert summary["best_dev_log_loss"] < 0.69
    assert (tmp_path / "m" / CHECKPOINT_FILE).exists()
    scorer = load_siamese(tmp_path / "m", words=ToyWords())
    assert scorer.calibration.n_pairs == 24
    more = train_siamese(tmp_path / "m", [train], dev, config, TrainConfig(epochs=8, batch_size=16, lr=3e-3, patience=6),
                         resume=True, words=ToyWords())
    assert len(more["history"]) == 8
    with pytest.raises(TrainError):
        train_siamese(tmp_path / "m", [train], dev, SiameseConfig(encoder="lstm"), TrainConfig(epochs=9),
                      resume=True, words=ToyWords())


class ToyEncoder:
    """Bag of words hashed into 64 dimensions, L2-normalised: enough to rank phrasings sharing words."""

    def encode(self, texts, batch_size=None):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, zlib.crc32(w.encode()) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_query_pairs_pair_each_query_with_its_faqs_and_the_nearest_others_best_phrasing(tmp_path):
    kb, path, _ = toy_kb(tmp_path)
    groups = kb_groups(read_kb(path))
    assert groups == kb
    pairs, labels = query_pairs([("reset the password", "reset"), ("the weather", None)], groups, ToyEncoder().encode,
                                negatives=2)
    assert labels.tolist() == [1, 0, 0, 0, 0]
    assert pairs[0] == ("reset the password", "how do i reset the password")  # the gold FAQ's best phrasing
    negatives = [b for a, b in pairs[1:3]]
    assert not set(negatives) & set(kb["reset"]) and len({next(f for f, qs in kb.items() if q in qs)
                                                          for q in negatives}) == 2  # one per other FAQ
    assert all(a == "the weather" for a, _ in pairs[3:])  # out of scope: negatives only
    with pytest.raises(TrainError, match="lacks: shipping"):
        query_pairs([("where is my parcel", "shipping")], groups, ToyEncoder().encode)


def test_training_on_a_kb_with_dev_queries(tmp_path):
    _, path, queries = toy_kb(tmp_path)
    config = SiameseConfig(encoder="conv", filters=8, mlp_hidden=16, dropout=0.0)
    summary = train_siamese(tmp_path / "m", dev_queries=queries, config=config,
                            cfg=TrainConfig(epochs=3, batch_size=8, lr=3e-3), words=ToyWords(), kb=path,
                            negatives_encoder=ToyEncoder())
    assert summary["kb_phrasings"] == 9 and summary["train_pairs"] == 0
    assert summary["history"][0]["pairs"] == 27  # per phrasing: a positive, a random and a hard negative
    assert load_siamese(tmp_path / "m", words=ToyWords()).calibration.n_pairs == 3 * (1 + 2) + 3  # 2 other FAQs per in-scope query, 3 for the OOS one
    with pytest.raises(TrainError, match="exactly one"):
        train_siamese(tmp_path / "m2", kb=path, words=ToyWords(), negatives_encoder=ToyEncoder())
    with pytest.raises(TrainError, match="KB"):
        train_siamese(tmp_path / "m2", dev_queries=queries, words=ToyWords())


def test_cli_trains_several_encoders_sharing_a_word_cache(tmp_path, capsys):
    from cli.main import main

    train, dev = _toy_files(tmp_path)
    cache = tmp_path / "words.pt"
    args = ["train", "siamese", "--pairs", str(train), "--dev", str(dev), "--out", str(tmp_path / "m"),
            "--encoder", "conv", "--encoder", "lstm", "--epochs", "1", "--batch-size", "8",
            "--config", '{"filters": 4, "hidden": 4, "mlp_hidden": 8}', "--word-cache", str(cache)]
    assert main(args) == 0
    assert (tmp_path / "m" / "conv" / "config.json").is_file() and (tmp_path / "m" / "lstm" / "config.json").is_file()
    saved = torch.load(cache, weights_only=True)
    assert saved["words"] == "glove" and saved["max_len"] == 60 and "how do i password" in saved["states"]
    assert main(args[:-1] + [str(cache)]) == 0  # read back
    assert main(args + ["--words", "minilm"]) == 2  # another word representation: refused, named
    assert "glove" in capsys.readouterr().err
