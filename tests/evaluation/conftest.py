"""Fixtures of the evaluation tests: `tiny_msem_dir`, a tiny seeded MSEM model folder."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def tiny_msem_dir(tmp_path):
    import torch

    from models.glove import GloVe
    from models.encoders.msem.encoder import MsemEncoder

    torch.set_num_threads(1)
    words = ["password", "reset", "open", "hours", "refund", "money"]
    glove = GloVe(words, np.random.default_rng(0).normal(0, 0.5, (len(words), 8)).astype(np.float32))
    cfg = {"hidden": 8, "heads": 2, "ffn_dim": 16, "pool_da": 8, "pool_heads_r": 2, "char_dim": 8,
           "char_filters": 8, "max_len": 12, "word_dim": 8}
    encoder = MsemEncoder.create(cfg, ["how do i reset my password", "refund money"], device="cpu", glove=glove, seed=0)
    return encoder.save(tmp_path / "tiny-msem")
