"""The Siamese matcher as a re-ranking stage (app/stages/siamese.py): phrasing vectors stored by
the index build and read back by the stage, phrasings added since the build encoded on the fly, the same
probabilities as scoring the text pairs, and FAQ_RERANKER loading it. Real parts: MiniLM first stage, a
built index, GloVe word vectors, an untrained (seeded) Siamese matcher with a calibration."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from app.match.assembly import build_pipeline
from app.match import MatchQuery
from app.stages import SiameseStage, load_stages, vector_stages
from index.artifacts import STAGE_VECTORS_DIR, BuildRegistry
from app.release import build_current
from index.retriever import Retriever
from kb.records import KbRecord
from models.calibration import Calibration
from models.encoders.words import GloveWords
from models.scoring import pool
from models.matchers.siamese import SiameseConfig, SiameseMatcher, SiameseScorer, load_siamese
from tests.helpers.api import make_settings, make_store


class CountingScorer:
    """Wraps a SiameseScorer and records which texts it had to encode."""

    def __init__(self, scorer):
        self.inner = scorer
        self.encoded: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def sentence_vectors(self, texts, batch_size=256):
        self.encoded.extend(texts)
        return self.inner.sentence_vectors(texts, batch_size=batch_size)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = SiameseConfig(encoder="conv", filters=8, mlp_hidden=16, mean_pool=True)
    scorer = SiameseScorer(SiameseMatcher(config), GloveWords(), Calibration(a=1.5, b=-0.2, fusion_weight=0.3))
    return scorer.save(tmp_path_factory.mktemp("siamese") / "tiny")


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder, model_dir):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("stage"), reranker=str(model_dir))
    store = make_store(settings)
    stages = vector_stages(settings)
    manifest = build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5, stage_vectors=stages)
    return settings, store, manifest, stages[0]


def test_the_build_stores_each_phrasings_vector_under_the_models_key(built):
    settings, store, manifest, stage = built
    [(key, block)] = manifest["stage_vectors"].items()
    assert key == stage.vector_key and block["rows"] == manifest["n_variants"] and block["dim"] == stage.scorer.config.dim
    retriever = Retriever.load(BuildRegistry(settings.index_dir).current_dir())
    texts, matrix = retriever.stage_vectors(key)
    assert matrix.shape == (manifest["n_variants"], stage.scorer.config.dim) and matrix.dtype == np.float16
    np.testing.assert_allclose(matrix[:5].astype(np.float32), stage.scorer.sentence_vectors(texts[:5]), atol=2e-3)
    assert retriever.stage_vectors("siamese-another-model") is None
    assert (retriever.build_dir / STAGE_VECTORS_DIR / f"{key}.npy").is_file()


def test_the_vector_key_belongs_to_the_weights(model_dir):
    words = GloveWords()
    a, b = load_siamese(model_dir, words=words), load_siamese(model_dir, words=words)
    assert a.vector_key == b.vector_key
    with torch.no_grad():
        b.model.encoder.conv.convs[0].bias.add_(1.0)
    b._vector_key = None
    assert b.vector_key != a.vector_key


def test_stage_reads_the_builds_vectors_and_scores_like_text_pairs(built, encoder):  # noqa: F811
    settings, store, _, stage = built
    counting = CountingScorer(stage.scorer)
    served = SiameseStage(counting, weight=0.4)
    retriever = Retriever.load(BuildRegistry(settings.index_dir).current_dir()).with_kb(store.snapshot(), encoder)
    pipeline = build_pipeline(settings, encoder, retriever, stages=[served], rerank_k=6)
    query = "how long does delivery take"
    curve = settings.model_copy(update={"scoring": "calibration"})  # the first-stage score the stage pools with
    [ann] = build_pipeline(curve, encoder, retriever, rerank_k=6).match_many([MatchQuery(query, 6, 0.5, "ann")])
    [res] = pipeline.match_many([MatchQuery(query, 6, 0.5, "ann+rerank")])
    assert counting.encoded == [query]  # every candidate phrasing came from the build
    p = stage.scorer.score_pairs([(query, m.question) for m in ann.matches])
    expected = pool(p, np.array([m.score for m in ann.matches]), 0.4)
    got = {m.faq_id: m.score for m in res.matches}
    for m, e in zip(ann.matches, expected):
        assert got[m.faq_id] == pytest.approx(float(e), abs=2e-3)  # fp16 storage
    assert [m.score for m in res.matches] == sorted(got.values(), reverse=True)


def test_phrasings_added_after_the_build_are_encoded_once(built, encoder):  # noqa: F811
    settings, store, _, stage = built
    store.import_records([KbRecord("parcel-lockers", "can i pick my parcel up from a locker",
                                   "Yes: choose a parcel locker at checkout.", [])])
    retriever = Retriever.load(BuildRegistry(settings.index_dir).current_dir()).with_kb(store.snapshot(), encoder)
    counting = CountingScorer(stage.scorer)
    pipeline = build_pipeline(settings, encoder, retriever, stages=[SiameseStage(counting, weight=1.0)], rerank_k=5)
    query = "pick up my parcel from a locker"
    [res] = pipeline.match_many([MatchQuery(query, 5, 0.5, "ann+rerank")])
    assert "parcel-lockers" in {m.faq_id for m in res.matches}
    assert counting.encoded == [query, "can i pick my parcel up from a locker"]
    pipeline.match_many([MatchQuery(query + "?", 5, 0.5, "ann+rerank")])
    assert counting.encoded[2:] == [query + "?"]  # the new phrasing's vector is kept


def test_stage_without_stored_vectors_still_scores(tmp_path, encoder, model_dir):  # noqa: F811
    """A build made before the folder was configured: the stage encodes the candidates itself."""
    settings = make_settings(tmp_path)
    store = make_store(settings)
    build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5)
    retriever = Retriever.load(BuildRegistry(settings.index_dir).current_dir()).with_kb(store.snapshot(), encoder)
    [stage] = load_stages(settings.model_copy(update={"reranker": str(model_dir)}))
    assert isinstance(stage, SiameseStage) and stage.served_weight == pytest.approx(0.3)
    [res] = build_pipeline(settings, encoder, retriever, stages=[stage], rerank_k=4).match_many(
        [MatchQuery("how long is delivery", 3, 0.5, "ann+rerank")])
    assert len(res.matches) == 3 and all(0.0 < m.score < 1.0 for m in res.matches)
    assert json.loads((model_dir / "config.json").read_text())["mean_pool"] is True


def test_weight_out_of_range_is_refused(model_dir):
    with pytest.raises(ValueError, match="0..1"):
        SiameseStage(load_siamese(model_dir, words=GloveWords()), weight=1.5)


def test_faq_index_build_stores_the_configured_siamese_vectors(faq_env, tmp_path, monkeypatch, model_dir, capsys):
    """`faq index build` with FAQ_RERANKER naming a Siamese folder: the build carries its vectors; a Siamese
    folder that does not load stops the build before anything is written."""
    import shutil

    from app.settings import get_settings
    from cli.main import main

    kb = tmp_path / "kb.jsonl"
    kb.write_text("".join(json.dumps({"faq_id": f, "question": q, "answer": f"about {f}"}) + "\n"
                          for f, q in [("pay", "how do i pay"), ("pay", "payment options"), ("ship", "where is my parcel")]))
    assert main(["kb", "import", str(kb)]) == 0
    monkeypatch.setenv("FAQ_RERANKER", str(model_dir))
    get_settings.cache_clear()
    assert main(["index", "build", "--encoder", "minilm", "--no-lexical"]) == 0
    assert "stage vectors: siamese-conv-glove" in capsys.readouterr().out
    manifest = json.loads((get_settings().index_dir / "current" / "manifest.json").read_text())
    [(key, block)] = manifest["stage_vectors"].items()
    assert block["rows"] == 3 and key.startswith("siamese-")
    broken = shutil.copytree(model_dir, tmp_path / "broken")
    (broken / "model.safetensors").unlink()
    monkeypatch.setenv("FAQ_RERANKER", str(broken))
    get_settings.cache_clear()
    assert main(["index", "build", "--encoder", "minilm", "--no-lexical"]) == 1
    assert "FAQ_RERANKER" in capsys.readouterr().err
    assert json.loads((get_settings().index_dir / "current" / "manifest.json").read_text())["version"] == manifest["version"]
