"""The cross-encoder re-ranker (models/matchers/cross_encoder.py): pair formatting, batching that does not change a
pair's score, calibration, save/load/export round trips (its training: tests/training/test_train_reranker.py).
Uses a tiny real model (tests/helpers/reranker.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from models.matchers.cross_encoder import (
    RerankerError, encode_pairs, format_pair, load_reranker, load_tokenizer, read_config,
)
from tests.helpers.reranker import make_tiny_reranker

CANDIDATES = [
    "I forgot my password",
    "How do I close my account?",
    "Why was my card declined at the shop yesterday even though I have enough money on it?",
    "refund",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_reranker(tmp_path_factory.mktemp("reranker") / "tiny")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def test_pair_format_is_cls_query_sep_candidate_sep(tokenizer):
    assert format_pair(tokenizer, "How do I reset my password?", "I forgot my password") == \
        "[CLS] how do i reset my password? [SEP] i forgot my password [SEP]"
    enc = encode_pairs(tokenizer, ["reset password"], ["forgot password"], 64)
    ids, types = enc["input_ids"][0].tolist(), enc["token_type_ids"][0].tolist()
    first_sep = ids.index(tokenizer.sep_token_id)
    assert types[: first_sep + 1] == [0] * (first_sep + 1)  # [CLS] query [SEP] is segment A
    assert set(types[first_sep + 1:]) == {1}  # candidate [SEP] is segment B


def test_dynamic_padding_and_truncation(tokenizer):
    enc = encode_pairs(tokenizer, ["a b", "a b"], ["c", "c d e f g h"], 64)
    assert enc["input_ids"].shape[1] == int(enc["attention_mask"].sum(1).max())  # padded to the longest pair only
    long = " ".join(["word"] * 200)
    enc = encode_pairs(tokenizer, [long], [long], 32)
    assert enc["input_ids"].shape == (1, 32)
    assert enc["input_ids"][0, -1] == tokenizer.sep_token_id
    with pytest.raises(ValueError, match="2 queries but 1 candidates"):
        encode_pairs(tokenizer, ["a", "b"], ["c"], 32)


# fp32 runtimes: exact up to float rounding. Dynamic int8 quantises each activation matrix with ONE scale
# taken from the whole batch, so batch-mates move a pair's score by quantisation noise (measured <= 0.005
# here); that bound is what the int8 runtime promises.
@pytest.mark.parametrize("runtime,atol", [("torch", 1e-5), ("onnx", 1e-5), ("onnx-int8", 0.02)])
def test_scores_do_not_depend_on_batch_composition(tiny, runtime, atol):
    model = load_reranker(tiny, runtime=runtime)
    query = "how do I reset my password"
    together = model.score(query, CANDIDATES)
    alone = np.array([model.score(query, [c])[0] for c in CANDIDATES])
    reordered = model.score(query, CANDIDATES[::-1])[::-1]
    np.testing.assert_allclose(together, alone, atol=atol)
    np.testing.assert_allclose(together, reordered, atol=atol)
    assert together.dtype == np.float32 and together.shape == (len(CANDIDATES),)
    assert np.all((together > 0) & (together < 1))
    assert np.ptp(together) > 1e-3  # different candidates, different scores
    assert model.score(query, []).shape == (0,)


def test_score_is_the_calibrated_logit(tiny):
    model = load_reranker(tiny, runtime="torch")
    logits = model.logits(["q"] * 2, ["a question", "another one"])
    expected = 1 / (1 + np.exp(-(2.0 * logits.astype(np.float64) + 0.25)))  # the folder's calibration
    np.testing.assert_allclose(model.score("q", ["a question", "another one"]), expected, atol=1e-6)
    np.testing.assert_allclose(model.similarity([("q", "a question"), ("q", "another one")]),
                               1 / (1 + np.exp(-logits)), atol=1e-6)
    # many pairs: batched by length, order preserved
    pairs = [("q", c) for c in CANDIDATES] * 3
    np.testing.assert_allclose(model.score_pairs(pairs, batch_size=5), np.tile(model.score("q", CANDIDATES), 3), atol=1e-5)


def test_save_load_and_onnx_exports_agree(tiny):
    torch_scores = load_reranker(tiny, runtime="torch").score("where is my parcel", CANDIDATES)
    onnx_scores = load_reranker(tiny, runtime="onnx").score("where is my parcel", CANDIDATES)
    int8_scores = load_reranker(tiny, runtime="onnx-int8").score("where is my parcel", CANDIDATES)
    np.testing.assert_allclose(onnx_scores, torch_scores, atol=1e-5)
    np.testing.assert_allclose(int8_scores, torch_scores, atol=0.05)  # quantised weights: close, not equal
    assert load_reranker(tiny).runtime.name == "onnx-int8"  # auto picks the fastest export the folder has
    assert read_config(tiny).calibration["a"] == 2.0


def test_folder_errors_are_clear(tmp_path, tiny):
    with pytest.raises(RerankerError, match="faq train reranker"):
        load_reranker(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(RerankerError, match="format"):
        load_reranker(bad)
    with pytest.raises(RerankerError, match="runtime"):
        load_reranker(tiny, runtime="tensorrt")
    no_onnx = make_tiny_reranker(tmp_path / "no_onnx", onnx=False)
    assert load_reranker(no_onnx).runtime.name == "torch"
    with pytest.raises(RerankerError, match="model.int8.onnx missing"):
        load_reranker(no_onnx, runtime="onnx-int8")




def test_platt_fit_and_threshold():
    from models.scoring import best_threshold, fit_platt

    rng = np.random.default_rng(0)
    logits = np.concatenate([rng.normal(2, 1, 400), rng.normal(-2, 1, 400)])
    labels = np.concatenate([np.ones(400), np.zeros(400)])
    a, b = fit_platt(logits, labels)
    assert a > 0.5 and abs(b) < 0.5  # symmetric classes around 0: no offset, a positive slope
    t, acc = best_threshold(logits, labels)
    assert -1 < t < 1 and acc > 0.9


def test_eval_reranker_command_reports_stsb_and_qqp(tmp_path, tiny):
    from cli.main import main

    stsb = tmp_path / "stsb"
    stsb.mkdir()
    (stsb / "sts-test.csv").write_text("".join(
        f"main-news\theadlines\t2015\t{i:04d}\t{i % 6}.000\tPrices rose by {i} percent.\tPrices fell {i} points.\n"
        for i in range(20)))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{i % 2}\tHow do I reset my password {i}?\tI forgot password {i}\n" for i in range(20)))
    out = tmp_path / "eval.json"
    assert main(["eval", "reranker", "--reranker", str(tiny), "--stsb", str(stsb), "--qqp-test", str(pairs),
                 "--tune-pairs", str(pairs), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["stsb_test"]["n"] == 20 and -1 <= report["stsb_test"]["pearson"] <= 1
    assert report["qqp_test"]["n"] == 20 and report["qqp_test"]["accuracy"] >= report["qqp_test"]["tune_accuracy"] - 1e-9
    # no held-out file in the folder and no --tune-pairs: a clear error, not a traceback
    assert main(["eval", "reranker", "--reranker", str(tiny), "--qqp-test", str(pairs), "--json", str(out)]) == 2


def test_pool_is_a_weighted_mean_of_log_odds(tiny):
    from models.matchers.cross_encoder import pool

    a, b = np.array([0.9, 0.2, 0.5]), np.array([0.6, 0.7, 0.5])
    np.testing.assert_allclose(pool(a, b, 1.0), a, atol=1e-6)
    np.testing.assert_allclose(pool(a, b, 0.0), b, atol=1e-6)
    mid = pool(a, b, 0.5)
    assert np.all((mid >= np.minimum(a, b) - 1e-6) & (mid <= np.maximum(a, b) + 1e-6))
    with pytest.raises(ValueError, match="0..1"):
        pool(a, b, 1.5)
    model = load_reranker(tiny, runtime="torch")
    alone = model.score("q", ["a", "b"])
    np.testing.assert_allclose(model.score("q", ["a", "b"], prior=[0.3, 0.8], weight=0.25),
                               pool(alone, np.array([0.3, 0.8]), 0.25), atol=1e-6)
    np.testing.assert_allclose(model.score("q", ["a", "b"], prior=[0.3, 0.8]), alone, atol=1e-6)  # fusion_weight 1


def test_weight_tuning_prefers_the_stage_that_ranks_the_gold_first():
    from app.match import FaqMatch, MatchResult
    from index.calibration import Calibration
    from evaluation.rerank_tuning import tune_weight

    def result(cross: list[float], cosines: list[float]) -> MatchResult:
        matches = [FaqMatch(f, f, "", s, c) for f, s, c in zip(["a", "b"], cross, cosines)]
        matches.sort(key=lambda m: -m.score)
        return MatchResult("q", matches, None, "v1")

    calibration = Calibration(10.0, -5.0)
    # the cross-encoder is wrong, the cosine right: log-odds a: 4 (cos) / -1.4 (cross), b: -2 / 2.2, so "a"
    # stays first while w < 6 / 9.6; ties go to the largest such weight
    results = [result([0.2, 0.9], [0.9, 0.3])] * 5
    best, f1s = tune_weight(results, ["a"] * 5, calibration, top_k=2)
    assert f1s[0.0] == 1.0 and f1s[1.0] == 0.0 and best == 0.6
    # the other way round: weight 1 wins
    results = [result([0.9, 0.2], [0.3, 0.9])] * 5
    best, _ = tune_weight(results, ["a"] * 5, calibration, top_k=2)
    assert best > 0.5


def test_an_mpnet_body_saves_exports_and_ignores_token_types(tmp_path, real_mpnet_cache, monkeypatch):
    """all-mpnet-base-v2 as the body: its own pair format (<s> q </s></s> c </s>), no segment embeddings, and
    the same folder contract (torch = ONNX fp32, int8 close, the id names the base)."""
    monkeypatch.setenv("FAQ_MODEL_CACHE", str(real_mpnet_cache))
    folder = make_tiny_reranker(tmp_path / "tiny-mpnet", base="mpnet")
    torch_model = load_reranker(folder, runtime="torch")
    assert torch_model.id == "cross-encoder-mpnet-L1:torch"
    assert format_pair(torch_model.tokenizer, "reset password", "forgot password") == "<s> reset password </s> </s> forgot password </s>"
    scores = torch_model.score("where is my parcel", CANDIDATES)
    np.testing.assert_allclose(load_reranker(folder, runtime="onnx").score("where is my parcel", CANDIDATES), scores, atol=1e-5)
    np.testing.assert_allclose(load_reranker(folder, runtime="onnx-int8").score("where is my parcel", CANDIDATES), scores, atol=0.05)
    batch = encode_pairs(torch_model.tokenizer, ["a", "b"], ["c d", "e"], 48)
    flipped = dict(batch, token_type_ids=1 - batch["token_type_ids"])
    np.testing.assert_array_equal(torch_model.runtime.logits(batch), torch_model.runtime.logits(flipped))
