"""Re-ranking stages: one module per kind of model folder, and the registry that loads FAQ_RERANKER.

A stage re-scores the top `rerank_k` FAQs of the `+rerank` arms (`Stage` in base.py); every kind
pools its model's calibrated probability with the score before it through `PooledStage.pooled`. The
folder's config says which kind it is (models/folder.py `architecture_of`): `STAGES` maps that to the
kind's loader, `load(path, weight, settings) -> stage`. A new kind is one module here, one line in
`STAGES`, its model under models/ and its test.
"""
from __future__ import annotations

from typing import Callable

from app.settings import Settings
from app.stages import analogy, cross_encoder, mmaicm, siamese
from app.stages.analogy import AnalogyStage
from app.stages.base import PooledStage, Stage
from app.stages.cross_encoder import CrossEncoderStage
from app.stages.mmaicm import MmaicmStage, load_mmaicm_stage
from app.stages.siamese import SiameseStage, load_siamese_stage

__all__ = [
    "AnalogyStage", "CROSS_ENCODER", "CrossEncoderStage", "MmaicmStage", "PooledStage", "Stage", "STAGES",
    "SiameseStage", "VECTOR_KINDS", "kind_of", "load_mmaicm_stage", "load_siamese_stage", "load_stages",
    "vector_stages",
]

Loader = Callable[[str, "float | None", Settings], Stage]

#: the kind of a `faq train reranker` folder, whose config names a format and no architecture
CROSS_ENCODER = "cross-encoder"

#: a model folder's architecture -> the loader of its stage
STAGES: dict[str, Loader] = {
    CROSS_ENCODER: cross_encoder.load,
    "mmaicm": mmaicm.load,
    "analogy": analogy.load,
    "siamese": siamese.load,
}

#: the kinds whose phrasing vectors an index build stores (index/build.py `write_stage_vectors`)
VECTOR_KINDS = frozenset({"siamese"})


def kind_of(folder: str) -> str:
    """The `STAGES` key of a model folder: the architecture its config names, else the cross-encoder's.
    A folder of no registered kind (another architecture, no config at all) is thus read as a cross-encoder,
    whose loader refuses it saying what is wrong."""
    from models.folder import architecture_of

    found = architecture_of(folder)
    return found if found in STAGES else CROSS_ENCODER


def _folders(spec: str) -> list[str]:
    return [part.strip() for part in spec.split(",") if part.strip()]


def load_stages(settings: Settings, path: str | None = None, weight: float | None = None) -> list[Stage]:
    """The re-ranking stages of FAQ_RERANKER (or `path`): one folder, or several separated by commas, run
    in that order; each is a `faq train reranker` cross-encoder, a `faq train mmaicm` matcher, a
    `faq train analogy` model or a `faq train siamese` matcher (`kind_of`). FAQ_RERANK_WEIGHT (or `weight`)
    pools each stage with the score before it; None = each folder's own `fusion_weight`. None configured:
    no stages. Raises what loading a folder raises."""
    spec = path or settings.reranker
    if not spec:
        return []
    weight = settings.rerank_weight if weight is None else weight
    return [STAGES[kind_of(folder)](folder, weight, settings) for folder in _folders(spec)]


def vector_stages(settings: Settings, path: str | None = None) -> list[Stage]:
    """The stages of FAQ_RERANKER (or `path`) whose phrasing vectors an index build stores (`VECTOR_KINDS`),
    loaded; the other folders are not loaded. Raises what loading a folder raises."""
    spec = path or settings.reranker
    if not spec:
        return []
    return [STAGES[kind](folder, None, settings) for folder in _folders(spec)
            if (kind := kind_of(folder)) in VECTOR_KINDS]
