"""Tiny seeded re-ranking folders of each kind, written by each model's own save code (the tiniest configs the
model tests use), and KINDS: kind -> (folder maker, the stage FAQ_RERANKER loads it as)."""
from __future__ import annotations

import torch

from app.stages import AnalogyStage, CrossEncoderStage, MmaicmStage, SiameseStage
from tests.helpers.reranker import make_tiny_reranker


def mmaicm_folder(path):
    from models.calibration import Calibration
    from models.encoders.words import GloveWords
    from models.matchers.mmaicm import MMAICM, MmaicmConfig, MmaicmScorer

    torch.manual_seed(0)
    config = MmaicmConfig(max_q_len=10, max_a_len=14, filters=4, fc_hidden=8, dropout=0.0)
    return MmaicmScorer(MMAICM(config), GloveWords(), Calibration(a=2.0, b=0.5, fusion_weight=0.5)).save(path)


def analogy_folder(path):
    from models.matchers.analogy import AnalogyConfig, AnalogyScorer, BiGruEncoder, Prototype
    from models.calibration import Calibration
    from models.encoders.words import GloveWords

    torch.manual_seed(0)
    protos = [Prototype("who", "who built the lamp ?", "erin built the lamp long ago"),
              Prototype("when", "when was the bridge built ?", "the bridge was built in 1901")]
    scorer = AnalogyScorer(BiGruEncoder(AnalogyConfig(hidden=8, dropout=0.0)), GloveWords(), protos, device="cpu")
    scorer.calibration = Calibration(a=3.0, b=-0.5, fusion_weight=0.5)
    return scorer.save(path)


def siamese_folder(path):
    from models.calibration import Calibration
    from models.encoders.words import GloveWords
    from models.matchers.siamese import SiameseConfig, SiameseMatcher, SiameseScorer

    torch.manual_seed(0)
    config = SiameseConfig(encoder="conv", filters=8, mlp_hidden=16, mean_pool=True)
    return SiameseScorer(SiameseMatcher(config), GloveWords(), Calibration(a=1.5, b=-0.2, fusion_weight=0.5)).save(path)


KINDS = {  # kind -> (how its folder is made, the stage FAQ_RERANKER must load it as)
    "cross-encoder": (lambda path: make_tiny_reranker(path, onnx=False), CrossEncoderStage),
    "mmaicm": (mmaicm_folder, MmaicmStage),
    "analogy": (analogy_folder, AnalogyStage),
    "siamese": (siamese_folder, SiameseStage),
}
