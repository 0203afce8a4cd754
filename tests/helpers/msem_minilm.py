"""The tiny MSEM config on MiniLM token states of the model and training tests."""
from __future__ import annotations


TINY = {"word_repr": "minilm", "hidden": 8, "heads": 2, "ffn_dim": 16, "pool_da": 8, "pool_heads_r": 2,
        "max_len": 16, "out_dim": 12, "dropout": 0.0}
