"""The Siamese short-text matcher (models/matchers/siamese.py): normalisation rules, each encoder's shape and
padding, the head's symmetry, the model folder round trip (its training: tests/training/test_train_siamese.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.matchers.siamese import (
    ENCODERS,
    SiameseConfig,
    SiameseEncoder,
    SiameseMatcher,
    SiameseScorer,
    load_siamese,
    log_loss,
    normalise_tokens,
    pair_features,
    repair_oov,
)
from tests.helpers.siamese import VOCAB, ToyWords

torch.set_num_threads(1)


def test_normalise_case_accents_punctuation_numbers_and_length():
    assert normalise_tokens("What is the CAFÉ price?!") == ["what", "is", "the", "cafe", "price"]
    assert normalise_tokens("It costs 10,000 ... (really)") == ["it", "costs", "10000", "really"]
    assert normalise_tokens("?!. ,") == []
    assert len(normalise_tokens(" ".join(["word"] * 100))) == 60
    assert normalise_tokens("a b c d", max_len=2) == ["a", "b"]


def test_oov_repair_rules():
    assert repair_oov("recieve", VOCAB) == ["receive"]  # one transposition
    assert repair_oov("recipee", VOCAB) == ["recipe"]  # one deletion
    assert repair_oov("e-mail", VOCAB) == ["e", "mail"]  # compound of known parts
    assert repair_oov("teh", VOCAB) == ["teh"]  # too short to edit
    assert repair_oov("zzzzqq", VOCAB) == ["zzzzqq"]  # nothing near: kept for its own vector
    assert repair_oov("the", VOCAB) == ["the"]
    # ties go to the more frequent spelling (lower rank)
    assert repair_oov("recipve", {"recipe": 5, "receive": 3}) in (["recipe"], ["receive"])
    assert normalise_tokens("How do I recieve my passwrd", VOCAB) == ["how", "do", "i", "receive", "my", "password"]


@pytest.mark.parametrize("encoder", ENCODERS)
def test_encoder_shape_and_padding_invariance(encoder):
    torch.manual_seed(0)
    config = SiameseConfig(encoder=encoder, filters=4, hidden=5, mlp_hidden=6)
    net = SiameseEncoder(config).eval()
    x = torch.randn(3, 7, 50)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5], dtype=torch.bool)
    out = net(x, mask)
    assert out.shape == (3, config.dim)
    # the same sentence with more padding (and garbage in the padded steps) gives the same vector
    x2 = torch.cat([x, torch.randn(3, 5, 50)], dim=1)
    x2[1, 4:] = torch.randn(8, 50)
    mask2 = torch.cat([mask, torch.zeros(3, 5, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(net(x2, mask2), out)
    alone = net(x[2:3, :2], mask[2:3, :2])
    torch.testing.assert_close(alone, out[2:3], atol=1e-6, rtol=1e-5)


def test_dims_per_encoder():
    dims = {e: SiameseConfig(encoder=e, filters=4, hidden=5).dim for e in ENCODERS}
    assert dims == {"lstm": 5, "conv": 12, "conv_lstm": 17, "conv_lstm_bilstm": 27}
    with pytest.raises(ValueError):
        SiameseConfig(encoder="gru")


def test_head_features_and_symmetry():
    u, v = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 5.0]])
    torch.testing.assert_close(pair_features(u, v), torch.tensor([[-2.0, -3.0, 3.0, 10.0]]))
    torch.manual_seed(0)
    model = SiameseMatcher(SiameseConfig(encoder="conv_lstm", filters=4, hidden=5, mlp_hidden=6)).eval()
    a, b = torch.randn(4, 6, 50), torch.randn(4, 3, 50)
    am, bm = torch.ones(4, 6, dtype=torch.bool), torch.ones(4, 3, dtype=torch.bool)
    torch.testing.assert_close(model(a, am, b, bm), model(b, bm, a, am))


def test_log_loss_by_hand():
    logits, labels = torch.tensor([0.0, 2.0]), torch.tensor([1, 0])
    expected = -(np.log(0.5) + np.log(1 - 1 / (1 + np.exp(-2.0)))) / 2
    assert float(log_loss(logits, labels)) == pytest.approx(expected, rel=1e-6)


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    scorer = SiameseScorer(SiameseMatcher(SiameseConfig(encoder="conv_lstm_bilstm", filters=4, hidden=5,
                                                        mlp_hidden=6)), ToyWords())
    scorer.calibration.a, scorer.calibration.b = 2.0, -0.5
    pairs = [("how do i reset the password", "reset password"), ("what is the price", "how do i receive money")]
    before = scorer.score_pairs(pairs)
    scorer.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["architecture"] == "siamese"
    loaded = load_siamese(tmp_path / "m", words=ToyWords())
    np.testing.assert_allclose(loaded.score_pairs(pairs), before, rtol=1e-6)
    assert loaded.calibration.a == 2.0 and loaded.config.encoder == "conv_lstm_bilstm"
    assert ((before > 0) & (before < 1)).all()


def test_mean_pool_appends_the_normalised_mean_and_vectors_score_like_pairs():
    torch.manual_seed(0)
    config = SiameseConfig(encoder="conv", filters=4, mlp_hidden=6, mean_pool=True)
    assert config.dim == 3 * 4 + 50
    scorer = SiameseScorer(SiameseMatcher(config), ToyWords())
    u = scorer.sentence_vectors(["how do i reset the password", "?!"])
    assert u.shape == (2, config.dim)
    assert np.linalg.norm(u[0, 12:]) == pytest.approx(1.0, abs=1e-5) and not u[1].any()  # empty text: zeros
    pairs = [("how do i reset the password", "reset password"), ("how do i reset the password", "the price")]
    by_vectors = scorer.compare_vectors(u[0], scorer.sentence_vectors([p[1] for p in pairs]))
    np.testing.assert_allclose(by_vectors, scorer.score_pairs(pairs), rtol=1e-5)
    assert scorer.compare_vectors(u[0], np.zeros((0, config.dim))).shape == (0,)
    with pytest.raises(ValueError, match="mean_pool"):
        SiameseConfig(mean_pool="yes")
