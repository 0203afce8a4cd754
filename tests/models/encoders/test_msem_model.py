"""MSEM model, text pipeline and MsemEncoder: shapes per ablation, padding invariance, tokeniser,
save/load round trips, encode contract. Tiny configs and a tiny hand-made GloVe keep it to seconds."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.glove import GloVe
from models.encoders.msem.model import MsemConfig, dynamic_average_pooling
from models.encoders.msem.encoder import MsemEncoder
from models.text import PAD_ID, UNK_ID, TextEncoder, normalise, tokenize

torch.set_num_threads(1)

TINY = dict(word_dim=8, char_dim=6, char_filters=5, hidden=8, heads=2, max_len=12, ffn_dim=16, pool_da=8, pool_heads_r=2)

CORPUS = [
    "How do I reset my password?",
    "I can't log in to my account.",
    "Where is my refund? I returned the order last week",
    "What's the shipping cost to Canada?",
    "cancel my order please",
    "Does the Café have Wi-Fi?",
    "zorblax zorblax login issue",
]

ABLATIONS = {
    "paper": {},
    "no_char": {"use_char": False},
    "no_aru": {"use_aru": False},
    "aru_as_mha": {"aru_as_mha": True},
    "max_pool": {"pooling": "max"},
    "no_highway": {"use_highway": False},
    "out_dim": {"out_dim": 7},
    "max_pool_out_dim_no_highway": {"pooling": "max", "out_dim": 5, "use_highway": False},
}


@pytest.fixture(scope="module")
def tiny_glove() -> GloVe:
    words = [
        "the", ",", ".", "?", "i", "my", "to", "do", "n't", "how", "reset", "password", "ca", "log", "in",
        "account", "where", "is", "refund", "returned", "order", "last", "week", "what", "'s", "shipping",
        "cost", "canada", "cancel", "please", "does", "cafe", "have", "wi-fi", "login", "issue", "-",
        "hello", "world", "forgot", "e-mail",
    ]
    rng = np.random.default_rng(0)
    return GloVe(words, rng.normal(0, 0.4, size=(len(words), 8)).astype(np.float32))


def make_encoder(tiny_glove: GloVe, seed: int = 0, **overrides) -> MsemEncoder:
    return MsemEncoder.create({**TINY, **overrides}, CORPUS, device="cpu", glove=tiny_glove, min_count=2, seed=seed)


# ---- tokeniser and vocabularies ------------------------------------------------------------------


def test_normalise_casing_accents_quotes():
    assert normalise("  Café ‘Naïve’  FAQ\u00a0ＡＢＣ ") == "cafe 'naive' faq abc"
    assert normalise("Ångström — “x”") == 'angstrom - "x"'


def test_tokenize_glove_style():
    assert tokenize("Don't you LOVE the café's Wi-Fi?!") == ["do", "n't", "you", "love", "the", "cafe", "'s", "wi-fi", "?", "!"]
    assert tokenize("I can’t, won’t; they're I'm we'll") == [
        "i", "ca", "n't", ",", "wo", "n't", ";", "they", "'re", "i", "'m", "we", "'ll"]
    assert tokenize("It costs $3.50 or 1,000 (U.S.)... e.g. 10am") == [
        "it", "costs", "$", "3.50", "or", "1,000", "(", "u.s.", ")", "...", "e.g.", "10am"]
    assert tokenize("students' books") == ["students", "'", "books"]
    assert tokenize("") == [] and tokenize(" \t\n") == []


def test_text_encoder_vocab_and_oov(tiny_glove):
    text = TextEncoder.build(CORPUS, tiny_glove.words, max_words=100, min_count=2, glove_top_n=3)
    assert text.word_vocab[:2] == ["<pad>", "<unk>"]
    # "zorblax" (twice, not in GloVe) learns a vector; "returned"-like singletons not in GloVe do not exist
    assert text.word_vocab[2:text.n_learned_words] == ["zorblax"]
    assert all(w in tiny_glove for w in text.word_vocab[text.n_learned_words:])
    assert "hello" not in text.word_vocab and "the" in text.word_vocab  # top-3 GloVe words added
    # unknown compounds split at the hyphen; known compounds stay whole
    assert text.tokens("reset-password wi-fi") == ["reset", "-", "password", "wi-fi"]
    ids = text.word_ids(text.tokens("reset qwertyuiop"))
    assert ids[0] == text.word_to_id["reset"] and ids[1] == UNK_ID
    # case and accents do not matter
    assert text.word_ids(text.tokens("CAFÉ")) == text.word_ids(text.tokens("cafe"))
    # max_words caps the vocabulary
    small = TextEncoder.build(CORPUS, tiny_glove.words, max_words=5)
    assert len(small.word_vocab) == 5


def test_text_encoder_batch_and_roundtrip(tmp_path, tiny_glove):
    text = TextEncoder.build(CORPUS, tiny_glove.words, max_words=100, max_word_len=4)
    word_ids, char_ids, mask = text.batch(["how do i reset my password", "", "canada"], max_len=3)
    assert word_ids.shape == (3, 3) and char_ids.shape == (3, 3, 4) and mask.dtype == torch.bool
    assert mask.tolist() == [[True, True, True], [False, False, False], [True, False, False]]
    assert (word_ids[~mask] == PAD_ID).all() and (char_ids[~mask] == 0).all()
    text.save(tmp_path)
    again = TextEncoder.load(tmp_path)
    assert again.word_vocab == text.word_vocab and again.char_vocab == text.char_vocab
    assert (again.n_learned_words, again.max_word_len) == (text.n_learned_words, 4)


# ---- model --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ABLATIONS))
def test_shapes_per_ablation(tiny_glove, name):
    enc = make_encoder(tiny_glove, n_intents=3, **ABLATIONS[name])
    cfg = enc.model.config
    word_ids, char_ids, mask = enc.text.batch(CORPUS[:4], cfg.max_len)
    u = enc.model(word_ids, char_ids, mask)
    assert u.shape == (4, cfg.sentence_dim) == (4, enc.dim)
    assert torch.isfinite(u).all()
    assert enc.model.intent_logits(u).shape == (4, 3)
    if name == "max_pool":
        assert cfg.sentence_dim == 2 * cfg.hidden
    if name == "paper":
        assert cfg.sentence_dim == cfg.pool_heads_r * 2 * cfg.hidden


def test_no_multitask_has_no_intent_head(tiny_glove):
    enc = make_encoder(tiny_glove, n_intents=3, use_multitask=False)
    assert enc.model.intent_head is None


@pytest.mark.parametrize("name", ["paper", "no_char", "aru_as_mha", "max_pool", "no_aru"])
def test_vector_independent_of_batch_padding(tiny_glove, name):
    enc = make_encoder(tiny_glove, **ABLATIONS[name])
    model = enc.model.eval()
    short = "cancel it"
    long_ = "Where is my refund? I returned the order last week, supercalifragilistic"
    with torch.no_grad():
        alone = model(*enc.text.batch([short], 12))
        batched = model(*enc.text.batch([long_, short, ""], 12))
        # extra padding columns/characters beyond what the batch needs change nothing either
        w, c, m = enc.text.batch([short], 12)
        w2 = torch.cat([w, torch.zeros(1, 5, dtype=torch.long)], 1)
        c2 = torch.nn.functional.pad(c, (0, 6, 0, 5))
        m2 = torch.cat([m, torch.zeros(1, 5, dtype=torch.bool)], 1)
        padded = model(w2, c2, m2)
    torch.testing.assert_close(batched[1:2], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=0)


def test_dynamic_average_pooling_matches_loop():
    torch.manual_seed(0)
    B, T, d = 3, 13, 4
    f, h_tilde = torch.rand(B, T, d), torch.randn(B, T, d)
    mask = torch.arange(T) < torch.tensor([13, 5, 1]).unsqueeze(1)
    h = torch.zeros(B, d)
    expected = []
    for t in range(T):
        step = (1 - f[:, t]) * h_tilde[:, t] + f[:, t] * h
        h = torch.where(mask[:, t : t + 1], step, h)  # padding carries h_{t-1}
        expected.append(h)
    torch.testing.assert_close(dynamic_average_pooling(f, h_tilde, mask), torch.stack(expected, 1), atol=1e-6, rtol=0)


def test_long_input_truncated_to_max_len(tiny_glove):
    enc = make_encoder(tiny_glove)
    model = enc.model.eval()
    words = " ".join(["order"] * 20)
    with torch.no_grad():
        full = model(*enc.text.batch([words], 30))  # T = 20 > max_len = 12
        cut = model(*enc.text.batch([words], 12))
    torch.testing.assert_close(full, cut)


def test_bad_inputs_and_config_errors(tiny_glove):
    enc = make_encoder(tiny_glove)
    w, c, m = enc.text.batch(["how do i reset", "cancel"], 12)
    with pytest.raises(ValueError, match="left-aligned"):
        enc.model(w, c, m.flip(1))
    with pytest.raises(ValueError, match="mask"):
        enc.model(w, c, m.long())
    with pytest.raises(ValueError, match="word_vocab_size"):
        enc.model(w + 10_000, c, m)
    with pytest.raises(ValueError, match="heads"):
        MsemConfig(word_vocab_size=10, char_vocab_size=5, hidden=5, heads=4)
    with pytest.raises(ValueError, match="pooling"):
        MsemConfig(word_vocab_size=10, char_vocab_size=5, pooling="mean")
    with pytest.raises(ValueError, match="lambda_"):
        MsemConfig(word_vocab_size=10, char_vocab_size=5, lambda_=1.5)
    with pytest.raises(ValueError, match="word_vocab_size"):
        MsemEncoder.create({"word_vocab_size": 3}, CORPUS, glove=tiny_glove)
    with pytest.raises(ValueError, match="unknown"):
        MsemEncoder.create({"hiden": 3}, CORPUS, glove=tiny_glove)


def test_glove_rows_frozen_learned_rows_trained(tiny_glove):
    enc = make_encoder(tiny_glove, n_intents=2)
    model = enc.model.train()
    u = model(*enc.text.batch(["zorblax reset password", "qqq login"], 12))
    model.intent_logits(u).sum().backward()
    assert model.embed.word_pretrained.grad is None
    assert model.embed.word_learned.grad is not None and model.embed.word_learned.grad.abs().sum() > 0
    unfrozen = make_encoder(tiny_glove, freeze_word=False).model.train()
    unfrozen(*enc.text.batch(["reset password"], 12)).sum().backward()
    assert unfrozen.embed.word_pretrained.grad.abs().sum() > 0
    # GloVe rows start as the GloVe vectors
    row = enc.text.word_to_id["password"] - enc.text.n_learned_words
    np.testing.assert_allclose(
        model.embed.word_pretrained[row].detach().numpy(), tiny_glove.vectors[tiny_glove.index["password"]]
    )


def test_match_prob_range_and_calibration(tiny_glove):
    enc = make_encoder(tiny_glove, gamma=10.0, alpha=0.5)
    u = torch.randn(6, enc.dim)
    p = enc.model.match_prob(u, torch.randn(6, enc.dim))
    assert p.shape == (6,) and ((p > 0) & (p < 1)).all()
    same = enc.model.match_prob(u, 3 * u)
    torch.testing.assert_close(same, torch.full((6,), torch.sigmoid(torch.tensor(5.0)).item()))
    assert (enc.model.match_prob(u, -u) < 1e-6).all()
    assert enc.calibration == (10.0, 0.5)


# ---- MsemEncoder --------------------------------------------------------------------------------


def test_encode_contract(tiny_glove):
    enc = make_encoder(tiny_glove)
    enc.model.train()
    texts = ["cancel my order", "", "How do I reset my password? I forgot it", "wi-fi", "cancel my order"]
    vecs = enc.encode(texts, batch_size=2)
    assert vecs.shape == (5, enc.dim) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    singles = np.stack([enc.encode([t])[0] for t in texts])
    np.testing.assert_allclose(vecs, singles, atol=1e-5)  # input order, batch-independent
    np.testing.assert_allclose(vecs[0], vecs[4], atol=1e-6)
    assert enc.model.training  # mode restored
    assert enc.encode([]).shape == (0, enc.dim)
    with pytest.raises(TypeError):
        enc.encode("a single string")


def test_save_load_roundtrip(tmp_path, tiny_glove):
    enc = make_encoder(tiny_glove, n_intents=3)
    texts = ["cancel my order", "Where is my refund?", "zorblax"]
    before = enc.encode(texts)
    enc.save(tmp_path / "m32", readme="# tiny\n")
    loaded = MsemEncoder.load(tmp_path / "m32", device="cpu")
    assert not loaded.model.training  # serving mode; encode then never toggles shared module state
    np.testing.assert_array_equal(loaded.encode(texts), before)
    assert loaded.id == enc.id and loaded.id.startswith("msem:m32:") and len(loaded.id.split(":")[2]) == 12
    assert loaded.model.intent_head is not None and (tmp_path / "m32" / "README.md").exists()
    meta = json.loads((tmp_path / "m32" / "config.json").read_text())
    assert meta["format_version"] == 1 and meta["hidden"] == TINY["hidden"]

    enc.save(tmp_path / "m16", fp16=True, keep_intent_head=False)
    half = MsemEncoder.load(tmp_path / "m16")
    assert all(p.dtype == torch.float32 for p in half.model.parameters())
    assert half.model.intent_head is None and half.id != loaded.id
    after = half.encode(texts)
    np.testing.assert_allclose(after, before, atol=5e-3)
    assert (np.sum(after * before, axis=1) > 0.9999).all()
    assert (tmp_path / "m16" / "model.safetensors").stat().st_size < (tmp_path / "m32" / "model.safetensors").stat().st_size


def test_load_rejects_bad_folder(tmp_path, tiny_glove):
    enc = make_encoder(tiny_glove)
    enc.save(tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["format_version"] = 99
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="format_version"):
        MsemEncoder.load(tmp_path)


def test_packaged_glove_loads():
    pytest.importorskip("pyarrow")
    from models.glove import load_glove

    glove = load_glove()
    assert len(glove) == 400_000 and glove.dim == 50 and glove.words[0] == "the"
    vecs, found = glove.lookup(["the", "n't", "zzzqqqxx"])
    assert found.tolist() == [True, True, False] and vecs.dtype == np.float32
    np.testing.assert_allclose(vecs[0, :3], [0.418, 0.24968, -0.41242], rtol=1e-5)
    assert (vecs[2] == 0).all()
