"""The encode step on Ray workers returns, in text order, exactly the vectors one process computes
(fp32: exact; int8 ONNX quantizes each batch's activations on their own range, so it is not bitwise)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray", reason='optional extra: pip install -e ".[distributed]"')


@pytest.mark.slow  # starting a local Ray cluster takes about a minute on 2 busy cores
def test_ray_workers_encode_like_one_process(tmp_path):
    from models.encoders.distributed import RayEncoder
    from models.encoders.load import load_encoder

    texts = [f"how do I reset password number {i}" for i in range(257)] + ["", "a much longer question " * 20]
    encoder = RayEncoder("minilm", workers=2, threads=1, runtime="torch", cache_dir=tmp_path)
    try:
        assert (encoder.id, encoder.dim, encoder.runtime) == ("all-MiniLM-L6-v2", 384, "torch")
        spread = encoder.encode(texts, batch_size=32)
        assert encoder.encode([]).shape == (0, 384)
    finally:
        encoder.close()
    local = load_encoder("minilm", runtime="torch", threads=1, cache_dir=tmp_path).encode(texts, batch_size=32)
    np.testing.assert_allclose(spread, local, atol=1e-5)
