"""Fixtures of the app tests: `encoder`, MiniLM loaded once for the whole run."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def encoder(request: pytest.FixtureRequest):
    """MiniLM, loaded once per test session (shared through the pytest config across test modules)."""
    enc = getattr(request.config, "_faq_minilm_encoder", None)
    if enc is None:
        import torch

        from models.encoders.pretrained import MiniLMEncoder

        torch.set_num_threads(1)
        enc = MiniLMEncoder(device="cpu")
        request.config._faq_minilm_encoder = enc
    return enc
