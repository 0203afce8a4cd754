"""app/stages: the registry that turns FAQ_RERANKER's folders into re-ranking stages. Each architecture a
model folder's config names maps to its kind's loader; a folder of no registered kind is read as a
cross-encoder, whose loader refuses it with today's message. Real tiny folders written by each model's
own save code (tests/helpers/stages.py), no encoder or index needed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.settings import Settings
from app.stages import (
    CROSS_ENCODER, STAGES, VECTOR_KINDS, analogy, cross_encoder, kind_of, load_stages, mmaicm, siamese,
    vector_stages,
)
from models.matchers.cross_encoder import RerankerError
from tests.helpers.stages import KINDS

#: the shipped MSEM encoder folder: a model, but of no re-ranking kind
ROOT_MSEM = str(Path(__file__).resolve().parents[3] / "models" / "default")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    return {kind: make(root / kind) for kind, (make, _) in KINDS.items()}


def test_each_architecture_maps_to_its_kinds_loader():
    assert STAGES == {CROSS_ENCODER: cross_encoder.load, "mmaicm": mmaicm.load, "analogy": analogy.load,
                      "siamese": siamese.load}
    assert VECTOR_KINDS == {"siamese"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_folder_is_loaded_as_its_stage(kind, folders, tmp_path):
    assert kind_of(str(folders[kind])) == kind
    [stage] = load_stages(Settings(data_dir=tmp_path), str(folders[kind]), weight=0.25)
    assert type(stage) is KINDS[kind][1] and stage.served_weight == 0.25
    [own] = load_stages(Settings(data_dir=tmp_path, reranker=str(folders[kind])))
    assert own.weight is None and own.served_weight == own.folder_weight  # the folder's fusion weight


def test_folders_chain_in_the_order_given_and_only_siamese_ones_store_vectors(folders, tmp_path):
    spec = ", ".join(str(folders[k]) for k in ("siamese", "cross-encoder", "analogy", "mmaicm"))
    settings = Settings(data_dir=tmp_path, reranker=spec, rerank_weight=0.4)
    stages = load_stages(settings)
    assert [type(s) for s in stages] == [KINDS[k][1] for k in ("siamese", "cross-encoder", "analogy", "mmaicm")]
    assert [s.served_weight for s in stages] == [0.4] * 4
    [stored] = vector_stages(settings)
    assert type(stored) is KINDS["siamese"][1] and stored.weight is None
    # the other kinds are not even loaded: a folder that would not load is no error here
    assert vector_stages(settings, f"{tmp_path / 'missing'},{ROOT_MSEM}") == []


def test_a_folder_of_no_registered_kind_is_refused_by_the_cross_encoders_loader(tmp_path):
    settings = Settings(data_dir=tmp_path)
    assert kind_of(ROOT_MSEM) == CROSS_ENCODER  # names "msem": no stage is registered for it
    with pytest.raises(RerankerError, match=r"format None is not 'faq-reranker/1'"):
        load_stages(settings, ROOT_MSEM)
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"format_version": 1, "architecture": "banana"}))
    assert kind_of(str(odd)) == CROSS_ENCODER
    with pytest.raises(RerankerError, match=r"format None is not 'faq-reranker/1'"):
        load_stages(settings, str(odd))
    with pytest.raises(RerankerError, match=r"no re-ranker at .*config.json missing \(make one with `faq train reranker"):
        load_stages(settings, str(tmp_path / "nothing-here"))


def test_no_reranker_configured_is_no_stage(tmp_path):
    assert load_stages(Settings(data_dir=tmp_path)) == [] and vector_stages(Settings(data_dir=tmp_path)) == []
    assert load_stages(Settings(data_dir=tmp_path), " , ") == []
