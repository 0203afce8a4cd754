"""Sentence encoders and matching models. `load_encoder(spec)` returns an `Encoder`."""
from models.encoder import Encoder, pick_device
from models.load import load_encoder

__all__ = ["Encoder", "load_encoder", "pick_device"]
