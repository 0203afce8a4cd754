"""A tiny but real re-ranker folder for tests: the packaged MiniLM tokenizer and a 1-layer 32-wide BERT
(or, with base="mpnet", all-mpnet-base-v2's tokenizer and a 1-layer 32-wide MPNet) with seeded random
weights, the real save/export code. Scores are meaningless; shapes, formatting, batching,
calibration and the folder format are the real ones."""
from __future__ import annotations

from pathlib import Path


def make_tiny_reranker(path: Path, onnx: bool = True, calibration: dict | None = None, sts_head: bool = False,
                       base: str = "minilm") -> Path:
    import torch
    from transformers import BertConfig, MPNetConfig

    from models.matchers.cross_encoder import BASES, RerankerConfig, build_module, export_onnx, load_tokenizer, save_reranker

    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    if base == "mpnet":
        body = MPNetConfig(vocab_size=30527, max_position_embeddings=130, **small)
    else:
        body = BertConfig(vocab_size=30522, max_position_embeddings=128, type_vocab_size=2, **small)
    config = RerankerConfig(n_layers=1, max_len=48, bert=body.to_dict(), sts_head=sts_head, base=BASES[base]["name"],
                            calibration=calibration or {"a": 2.0, "b": 0.25, "source": "test"})
    torch.manual_seed(0)
    module = build_module(config)
    with torch.no_grad():  # a head with some weight so that scores differ visibly between pairs
        module.head.weight.normal_(0.0, 1.0)
    save_reranker(module, config, load_tokenizer(base=base), path)
    if onnx:
        export_onnx(path, quantize=True)
    return path


def tiny_training_data(tmp_path):
    pairs = tmp_path / "qqp" / "pairs_dev.tsv"
    pairs.parent.mkdir()
    lines = []
    for i in range(12):
        lines.append(f"1\tHow do I reset my password {i}?\tI forgot my password {i}")
        lines.append(f"0\tHow do I reset my password {i}?\tWhere is my parcel number {i}?")
    pairs.write_text("\n".join(lines) + "\n")
    stsb = tmp_path / "stsb"
    stsb.mkdir()
    rows = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{i % 6}.000\tA man plays a guitar {i}.\tA man plays music {i}."
            for i in range(12)]
    (stsb / "sts-train.csv").write_text("\n".join(rows) + "\n")
    (stsb / "sts-dev.csv").write_text("\n".join(rows[:6]) + "\n")
    return pairs, stsb
