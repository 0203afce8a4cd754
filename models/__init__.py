"""Sentence encoders. `load_encoder(spec)` returns an `Encoder`; MSEM (msem.py) is the default."""
from models.encoder import Encoder, load_encoder, pick_device

__all__ = ["Encoder", "load_encoder", "pick_device"]
