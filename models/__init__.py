"""Sentence encoders and matching models. `load_encoder(spec)` returns an `Encoder`."""
from models.encoders.base import Encoder, pick_device
from models.encoders.load import load_encoder

__all__ = ["Encoder", "load_encoder", "pick_device"]
