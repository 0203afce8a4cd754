"""The ONNX encoder runtime (models/encoders/runtime.py): export round trip, checksums, runtime choice.

A tiny random BERT (2 layers, 32 wide, MiniLM's tokenizer) exports in about a second and checks the
mechanics; the packaged all-MiniLM-L6-v2 (exported once per run, a few seconds) checks the numbers
that matter: fp32 equals PyTorch, int8 stays within the stated cosine.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from models.encoders import runtime
from models.encoders.runtime import (
    FP32_FILE, INT8_FILE, OnnxSentenceEncoder, RuntimeUnavailable, ensure_export, export_valid, resolve_runtime,
)

SENTENCES = [
    "How do I reset my password?", "where is my parcel", "Can I pay by card or only in cash at the desk?",
    "close my account", "What are your opening hours on public holidays?", "refund",
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A sentence-transformers folder holding a 2-layer, 32-wide random BERT."""
    import torch
    from transformers import BertConfig, BertModel

    from models.encoders.pretrained import minilm_path

    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(Path(minilm_path()) / name, folder / name)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32}))
    return folder


def torch_mean_pooled(folder: Path, texts: list[str]) -> np.ndarray:
    """The sentence-transformers recipe by hand: transformer, masked mean, L2 normalisation."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    batch = tok(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
    with torch.inference_mode():
        states = model(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).float()
    mean = (states * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(mean, dim=-1).numpy()


def test_tiny_export_round_trip(tiny_model, tmp_path):
    reference = torch_mean_pooled(tiny_model, SENTENCES)
    fp32 = OnnxSentenceEncoder(tiny_model, "tiny", 32, "onnx", tmp_path)
    np.testing.assert_allclose(fp32.encode(SENTENCES), reference, atol=1e-5)
    int8 = OnnxSentenceEncoder(tiny_model, "tiny", 32, "onnx-int8", tmp_path)
    assert (int8.encode(SENTENCES) * reference).sum(1).min() > 0.98
    # a text's vector does not depend on its batch-mates' lengths in fp32 (padding is masked)
    np.testing.assert_allclose(fp32.encode(SENTENCES[:1])[0], fp32.encode(SENTENCES)[0], atol=1e-5)
    # token states: [CLS] .. [SEP] of each text, unpadded
    ids = fp32.tokenize(SENTENCES[:2])
    states = fp32.states_for_ids(ids)
    assert [s.shape for s in states] == [(len(ids[0]), 32), (len(ids[1]), 32)]
    assert fp32.encode([]).shape == (0, 32)


def test_export_is_checked_and_redone_when_damaged(tiny_model, tmp_path, capsys):
    file = ensure_export(tiny_model, tmp_path, "tiny", "onnx-int8")
    folder = file.parent
    meta = json.loads((folder / runtime.EXPORT_META).read_text())
    assert folder.name.startswith("tiny-") and meta["source_sha256"].startswith(folder.name.split("-")[-1])
    assert set(meta["files"]) == {FP32_FILE, INT8_FILE} and meta["int8"] == runtime.int8_scheme("tiny")
    assert meta["min_cosine_to_torch"][FP32_FILE] > 0.9999
    capsys.readouterr()
    assert ensure_export(tiny_model, tmp_path, "tiny", "onnx-int8") == file  # cached: no second export
    assert "exporting" not in capsys.readouterr().err
    with open(file, "r+b") as fh:  # a truncated copy (disk full, killed mid-write) never serves
        fh.truncate(100)
    assert not export_valid(folder, INT8_FILE)
    ensure_export(tiny_model, tmp_path, "tiny", "onnx-int8")
    assert "exporting" in capsys.readouterr().err and export_valid(folder, INT8_FILE)


def test_another_quantisation_scheme_re_exports(tiny_model, tmp_path, monkeypatch, capsys):
    ensure_export(tiny_model, tmp_path, "tiny", "onnx-int8")
    capsys.readouterr()
    monkeypatch.setitem(runtime.FP32_FFN_OUT_FROM, "tiny", 1)  # keep layer 1's FFN output in fp32
    file = ensure_export(tiny_model, tmp_path, "tiny", "onnx-int8")
    assert "exporting" in capsys.readouterr().err
    import onnx

    ops = {n.name: n.op_type for n in onnx.load(str(file)).graph.node}
    assert ops["/body/encoder/layer.1/output/dense/MatMul"] == "MatMul"  # fp32 kept
    assert "/body/encoder/layer.0/output/dense/MatMul" not in ops  # quantised (MatMulInteger + scale)


def test_runtime_choice():
    assert resolve_runtime("auto", "cpu") == "onnx-int8"
    assert resolve_runtime(None, "cpu") == "onnx-int8"
    assert resolve_runtime("auto", "cuda") == "torch"  # the GPU beats int8 on the CPU
    assert resolve_runtime("onnx", "cpu") == "onnx" and resolve_runtime("torch", "cuda:0") == "torch"
    with pytest.raises(RuntimeUnavailable, match="CPU only"):
        resolve_runtime("onnx-int8", "cuda")
    with pytest.raises(RuntimeUnavailable, match="must be one of"):
        resolve_runtime("tensorrt", "cpu")


def test_minilm_onnx_against_pytorch(minilm_encoder, tmp_path_factory):
    """The packaged model: fp32 ONNX equals PyTorch; int8 keeps cosine >= 0.95 per sentence and 0.98 on
    average (measured on 1,000 CLINC150 queries: mean 0.992, min 0.963)."""
    from models.encoders.load import load_encoder

    cache = tmp_path_factory.mktemp("minilm-onnx")
    reference = minilm_encoder.encode(SENTENCES)
    fp32 = load_encoder("minilm", runtime="onnx", threads=1, cache_dir=cache)
    int8 = load_encoder("minilm", runtime="onnx-int8", threads=1, cache_dir=cache)
    assert fp32.id == int8.id == minilm_encoder.id and (fp32.runtime, int8.runtime) == ("onnx", "onnx-int8")
    assert (fp32.encode(SENTENCES) * reference).sum(1).min() > 0.9999
    cos = (int8.encode(SENTENCES) * reference).sum(1)
    assert cos.min() > 0.95 and cos.mean() > 0.98
    assert any(p.name.startswith("all-MiniLM-L6-v2-") for p in (cache / "onnx").iterdir())


def test_faq_model_onnx_prepares_the_cache(faq_env, shared_model_cache, capsys):
    """`faq model onnx` (what the Docker image runs at build time) leaves both files checked in the cache."""
    from cli.main import main

    assert main(["model", "onnx", "--encoder", "minilm"]) == 0
    out = capsys.readouterr().out
    assert "minilm onnx: " in out and "minilm onnx-int8: " in out
    folder = next((shared_model_cache / "onnx").glob("all-MiniLM-L6-v2-*"))
    assert export_valid(folder, FP32_FILE) and export_valid(folder, INT8_FILE)
    assert main(["model", "onnx", "--encoder", str(faq_env.data_dir / "no-such-model")]) == 2


def test_a_same_size_corruption_is_caught_by_the_full_check(tiny_model, tmp_path):
    """Loads compare sizes (cheap); `faq model onnx` also compares the sha256 recorded at export."""
    file = ensure_export(tiny_model, tmp_path, "tiny", "onnx")
    data = bytearray(file.read_bytes())
    data[-1] ^= 0xFF
    file.write_bytes(bytes(data))
    assert export_valid(file.parent, file.name) and not export_valid(file.parent, file.name, verify_sha=True)


def negated_unless_reduced(real):
    """A quantiser whose full-range int8 file is wrong, as on a CPU whose int8 kernel saturates."""
    def quantize(fp32_file, out_file, scheme, reduce_range=False):
        real(fp32_file, out_file, scheme, reduce_range=reduce_range)
        if not reduce_range:  # the sentence vector comes out negated: cosine -1 to PyTorch
            import onnx

            model = onnx.load(str(out_file))
            for node in model.graph.node:
                node.output[:] = ["sentence.raw" if name == "sentence" else name for name in node.output]
            model.graph.node.append(onnx.helper.make_node("Neg", ["sentence.raw"], ["sentence"]))
            onnx.save(model, str(out_file))
    return quantize


def test_an_int8_file_far_from_pytorch_is_redone_with_7_bit_weights(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "quantize_int8", negated_unless_reduced(runtime.quantize_int8))
    folder = ensure_export(tiny_model, tmp_path, "tiny", "onnx-int8").parent
    meta = json.loads((folder / runtime.EXPORT_META).read_text())
    assert meta["int8_reduce_range"] is True
    assert meta["min_cosine_to_torch"][INT8_FILE] >= runtime.MIN_INT8_COSINE
    int8 = OnnxSentenceEncoder(tiny_model, "tiny", 32, "onnx-int8", tmp_path)
    assert (int8.encode(SENTENCES) * torch_mean_pooled(tiny_model, SENTENCES)).sum(1).min() > 0.98


def test_an_int8_file_that_stays_far_from_pytorch_is_refused(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "MIN_INT8_COSINE", 1.01)  # no int8 file can pass
    with pytest.raises(RuntimeUnavailable, match="FAQ_ENCODER_RUNTIME=onnx"):
        ensure_export(tiny_model, tmp_path, "tiny", "onnx-int8")
    assert not any(tmp_path.rglob(INT8_FILE))  # nothing half-checked left to serve
