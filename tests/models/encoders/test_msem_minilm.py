"""MSEM with `word_repr="minilm"`: the frozen packaged all-MiniLM-L6-v2 token states as the word
representation. Shapes, padding invariance, save/load (the folder holds only the MSEM layers), the
training-time state cache, fusion and trainable MiniLM layers (their training:
tests/training/test_train_msem_minilm.py). The real packaged MiniLM is loaded (offline); the MSEM on top of
it is tiny."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.encoders.msem.model import MINILM_DIM, MSEM, MsemConfig, MiniLMTokenStates, WordRepresentation
from models.encoders.msem.encoder import MsemEncoder
from models.encoders.words import MiniLMText, load_text
from models.text import TextEncoder
from tests.helpers.msem_minilm import TINY

torch.set_num_threads(1)


SENTENCES = [
    "How do I reset my password?",
    "cancel my order please",
    "Where is my refund? I returned the order last week and nobody has answered my e-mails since then",
    "hi",
    "",
    "Does the Café have Wi-Fi?",
]


@pytest.fixture(scope="module")
def minilm() -> MiniLMText:
    return MiniLMText()


def make_encoder(minilm: MiniLMText, seed: int = 0, **overrides) -> MsemEncoder:
    encoder = MsemEncoder.create({**TINY, **overrides}, [], device="cpu", seed=seed, minilm=minilm)
    encoder.model.eval()
    return encoder


# ---- config and module choice ----------------------------------------------------------------------


def test_config_picks_the_word_representation(minilm):
    encoder = make_encoder(minilm)
    cfg = encoder.config
    assert cfg.word_repr == "minilm" and cfg.word_dim == MINILM_DIM and cfg.word_vocab_size == minilm.vocab_size
    assert isinstance(encoder.model.embed, MiniLMTokenStates) and encoder.model.embed.project is None
    projected = make_encoder(minilm, word_dim=32)
    assert projected.model.embed.project.weight.shape == (32, MINILM_DIM)
    glove_model = MSEM(MsemConfig(word_vocab_size=10, char_vocab_size=5, **{k: v for k, v in TINY.items()
                                                                           if k != "word_repr"}))
    assert isinstance(glove_model.embed, WordRepresentation)
    with pytest.raises(ValueError, match="word_repr must be one of"):
        MsemConfig(word_vocab_size=10, char_vocab_size=5, word_repr="bert")
    with pytest.raises(ValueError, match="reads at most 512 wordpieces"):
        MsemConfig(word_vocab_size=10, char_vocab_size=5, word_repr="minilm", max_len=600)


def test_forward_reads_token_states_and_rejects_the_wrong_inputs(minilm):
    model = make_encoder(minilm).model
    inputs = minilm.batch_inputs(SENTENCES, minilm.prepare(SENTENCES, 16))
    assert set(inputs) == {"token_states", "mask"}
    assert inputs["token_states"].shape[-1] == MINILM_DIM and inputs["mask"].shape[1] <= 16
    with torch.no_grad():
        assert model(**inputs).shape == (len(SENTENCES), 12)
        with pytest.raises(ValueError, match="reads token_states= and mask="):
            model(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, 4, dtype=torch.long),
                  torch.ones(2, 3, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"token_states must be float \(B, T, 384\)"):
            model(token_states=torch.zeros(2, 3, 10), mask=torch.ones(2, 3, dtype=torch.bool))
        with pytest.raises(ValueError, match="left-aligned"):
            model(token_states=torch.zeros(1, 3, MINILM_DIM), mask=torch.tensor([[False, True, True]]))


def test_wordpieces_keep_cls_and_sep_and_truncate_to_max_len(minilm):
    items = minilm.prepare(SENTENCES, 8)
    cls_id, sep_id = minilm.tokenizer.cls_token_id, minilm.tokenizer.sep_token_id
    assert all(ids[0] == cls_id and ids[-1] == sep_id for ids in items)
    assert max(len(ids) for ids in items) == 8 and items[4] == [cls_id, sep_id]  # the empty text
    with pytest.raises(ValueError, match="max_len must be in"):
        minilm.prepare(["x"], 2)


# ---- encode -------------------------------------------------------------------------------------------


def test_encode_shapes_and_norms(minilm):
    encoder = make_encoder(minilm)
    vecs = encoder.encode(SENTENCES, batch_size=4)
    assert vecs.shape == (len(SENTENCES), 12) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([]).shape == (0, 12)


def test_sentence_vector_does_not_depend_on_batch_mates(minilm):
    encoder = make_encoder(minilm)
    together = encoder.encode(SENTENCES, batch_size=64)  # one padded batch, up to 16 wordpieces
    for i, sentence in enumerate(SENTENCES):
        alone = encoder.encode([sentence])
        np.testing.assert_allclose(alone[0], together[i], atol=1e-4)


def test_training_cache_holds_fp16_states_and_is_used(minilm):
    text = MiniLMText()
    encoder = MsemEncoder.create(TINY, [], device="cpu", seed=0, minilm=text)
    encoder.model.eval()
    before = encoder.encode(SENTENCES)
    assert text.fill_cache(SENTENCES, 16) == len(SENTENCES) and text.fill_cache(SENTENCES, 16) == 0
    assert all(s.dtype == torch.float16 and s.shape[1] == MINILM_DIM for s in text.cache.values())
    assert text.cache_bytes() == sum(s.numel() * 2 for s in text.cache.values())
    # cached states are fp16-rounded: same vectors up to that rounding
    np.testing.assert_allclose(encoder.encode(SENTENCES), before, atol=5e-3)
    # a cached sentence never reaches the transformer again
    text.transformer = None
    encoder.encode(SENTENCES)
    inputs = text.batch_inputs(SENTENCES[:2], None, max_len=16)
    assert inputs["token_states"].dtype == torch.float32


# ---- save / load ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fp16", [False, True])
def test_save_load_round_trip_stores_only_msem_layers(tmp_path, minilm, fp16):
    from safetensors.torch import load_file

    encoder = make_encoder(minilm, word_dim=32)  # with the optional projection
    folder = encoder.save(tmp_path / "m", fp16=fp16)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["config.json", "model.safetensors", "text.json"]
    text_meta = json.loads((folder / "text.json").read_text())
    assert text_meta["kind"] == "minilm" and text_meta["model"] == "all-MiniLM-L6-v2"
    # no MiniLM weights: every stored tensor is an MSEM parameter, and the folder is tiny
    stored = load_file(str(folder / "model.safetensors"))
    assert set(stored) == set(encoder.model.state_dict())
    assert not any("attention.self" in k or "word_embeddings" in k for k in stored)
    assert sum(p.stat().st_size for p in folder.iterdir()) < 200_000
    assert json.loads((folder / "config.json").read_text())["word_repr"] == "minilm"

    loaded = MsemEncoder.load(folder, device="cpu")
    assert isinstance(loaded.text, MiniLMText) and loaded.config == encoder.config
    assert loaded.id.startswith("msem:m:") and loaded.dim == encoder.dim
    np.testing.assert_allclose(loaded.encode(SENTENCES), encoder.encode(SENTENCES), atol=2e-3 if fp16 else 1e-5)
    assert isinstance(load_text(folder), MiniLMText)


def test_glove_folders_still_load_their_text_encoder(tmp_path):
    text = TextEncoder(["<pad>", "<unk>", "hello"], ["<pad>", "<unk>", "h"])
    text.save(tmp_path)
    assert isinstance(load_text(tmp_path), TextEncoder)
    (tmp_path / "text.json").write_text(json.dumps({"format_version": 1, "kind": "elmo"}))
    with pytest.raises(ValueError, match="unknown text kind 'elmo'"):
        load_text(tmp_path)


# ---- minilm_fusion (ours): similarity fused with MiniLM's own sentence embedding --------------------


def test_fusion_vector_is_msem_and_minilm_sentence_embedding(minilm, minilm_encoder):
    """[sqrt(1-w)·û ; sqrt(w)·m̂]: the MiniLM half equals all-MiniLM-L6-v2's own (sentence-transformers)
    embedding, the MSEM half the unfused model's vector, so cos = (1-w)·cos_MSEM + w·cos_MiniLM."""
    w = 0.4
    # max_len 64 so no test sentence is cut (MiniLM alone reads up to 256 wordpieces, MSEM max_len)
    plain = make_encoder(minilm, max_len=64)
    fused = make_encoder(minilm, max_len=64, minilm_fusion=w)
    fused.model.load_state_dict(plain.model.state_dict())
    texts = [t for t in SENTENCES if t]
    v = fused.encode(texts)
    assert v.shape == (len(texts), TINY["out_dim"] + MINILM_DIM) == (len(texts), fused.dim)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    u, m = plain.encode(texts), minilm_encoder.encode(texts)
    np.testing.assert_allclose(v[:, : TINY["out_dim"]], np.sqrt(1 - w) * u, atol=1e-5)
    np.testing.assert_allclose(v[:, TINY["out_dim"]:], np.sqrt(w) * m, atol=2e-4)
    np.testing.assert_allclose(v @ v.T, (1 - w) * (u @ u.T) + w * (m @ m.T), atol=2e-4)
    # padding does not change a sentence's fused vector either
    np.testing.assert_allclose(fused.encode(texts[:1]), fused.encode(texts)[:1], atol=1e-5)


# ---- minilm_train_layers (ours): MiniLM's top layers train with MSEM ----------------------------------


def test_trainable_top_layers_compute_what_minilm_computes(tmp_path, minilm_encoder):
    """The text side stops after 6-N layers and MSEM's MiniLMLayer copies finish the job: at creation the
    fused MiniLM half is still all-MiniLM-L6-v2's own embedding; the copies are saved and loaded with
    MSEM, and a sentence's vector does not depend on its batch-mates."""
    text = MiniLMText()  # not the shared fixture: stop_after changes the depth it runs
    enc = MsemEncoder.create({**TINY, "max_len": 64, "minilm_fusion": 0.5, "minilm_train_layers": 2}, [],
                             device="cpu", seed=0, minilm=text)
    enc.model.eval()
    assert text.n_layers == 4 and len(enc.model.embed.top) == 2
    texts = [t for t in SENTENCES if t]
    v = enc.encode(texts)
    np.testing.assert_allclose(v[:, TINY["out_dim"]:], np.sqrt(0.5) * minilm_encoder.encode(texts), atol=2e-4)
    np.testing.assert_allclose(np.stack([enc.encode([t])[0] for t in texts]), v, atol=1e-5)
    enc.save(tmp_path / "m")
    loaded = MsemEncoder.load(tmp_path / "m")
    assert loaded.text.n_layers == 4
    np.testing.assert_allclose(loaded.encode(texts), v, atol=1e-5)
    with pytest.raises(ValueError, match="minilm_train_layers must be"):
        MsemConfig(**{**TINY, "minilm_train_layers": 7}, word_vocab_size=10, char_vocab_size=10)
    with pytest.raises(ValueError, match=r"\[0, 0\] for word_repr 'glove_char'"):
        MsemConfig(minilm_train_layers=1, word_vocab_size=10, char_vocab_size=10)
    MsemConfig(**{**TINY, "word_repr": "mpnet", "minilm_train_layers": 12}, word_vocab_size=10, char_vocab_size=10)


def test_trainable_mpnet_layers_compute_what_mpnet_computes(tmp_path, real_mpnet_cache, monkeypatch):
    """The same for all-mpnet-base-v2: its top layers with their relative position bias, rebuilt in MSEM
    (MPNetLayer), give mpnet's own sentence vector at creation, also for sentences of different lengths
    padded in one batch."""
    monkeypatch.setenv("FAQ_MODEL_CACHE", str(real_mpnet_cache))
    from models.encoders.load import load_encoder

    text = MiniLMText(base="mpnet")
    enc = MsemEncoder.create({**TINY, "word_repr": "mpnet", "max_len": 64, "minilm_fusion": 0.5,
                              "minilm_train_layers": 2}, [], device="cpu", seed=0, minilm=text)
    enc.model.eval()
    assert text.n_layers == 10 and len(enc.model.embed.top) == 2 and enc.model.embed.rel_bias is not None
    texts = [t for t in SENTENCES if t]
    v = enc.encode(texts)
    np.testing.assert_allclose(v[:, TINY["out_dim"]:], np.sqrt(0.5) * load_encoder("mpnet", runtime="torch").encode(texts), atol=2e-4)
    np.testing.assert_allclose(np.stack([enc.encode([t])[0] for t in texts]), v, atol=1e-5)
