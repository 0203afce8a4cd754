"""app/match/ and app/match/assembly.py: the request path, its one entry point for encoded work (`run`),
the settings it is assembled from, the re-ranking stage contract and the query cache.
Real parts throughout: MiniLM, a built Annoy index, a tiny real cross-encoder folder."""
from __future__ import annotations

import time

import numpy as np
import pytest

from app.match.assembly import build_pipeline
from app.match import MatchQuery, NoStagesError
from app.stages import CrossEncoderStage, load_stages
from index.artifacts import BuildRegistry
from index.retriever import Retriever
from models.matchers.cross_encoder import pool
from tests.helpers.api import build, make_settings, make_store
from tests.helpers.reranker import make_tiny_reranker


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("pipeline"))
    store = make_store(settings)
    build(store, encoder, settings)
    retriever = Retriever.load(BuildRegistry(settings.index_dir).current_dir()).with_kb(store.snapshot(), encoder)
    reranker_dir = make_tiny_reranker(tmp_path_factory.mktemp("rr") / "tiny")
    return settings, retriever, reranker_dir


def test_settings_give_every_option_the_caller_does_not_override(built, encoder):  # noqa: F811
    settings, retriever, _ = built
    p = build_pipeline(settings, encoder, retriever)
    assert (p.pool_variants, p.rerank_k, p.lexical_k) == (settings.pool_variants, settings.rerank_k, settings.lexical_k)
    p = build_pipeline(settings.model_copy(update={"pool_variants": 3}), encoder, retriever, rerank_k=7, lexical_k=9)
    assert (p.pool_variants, p.rerank_k, p.lexical_k) == (3, 7, 9)
    assert build_pipeline(settings, encoder, retriever, pool_variants=1).pool_variants == 1


def test_rerank_arms_need_a_stage_and_stages_chain(built, encoder):  # noqa: F811
    settings, retriever, reranker_dir = built
    plain = build_pipeline(settings, encoder, retriever)
    with pytest.raises(NoStagesError, match="FAQ_RERANKER"):
        plain.match_many([MatchQuery("how long is delivery", 3, 0.5, "ann+rerank")])
    assert load_stages(settings) == []  # no FAQ_RERANKER: no stage
    [first] = load_stages(settings, str(reranker_dir), weight=0.5)
    second = CrossEncoderStage(first.scorer, weight=0.25)
    assert first.served_weight == 0.5 and first.id.startswith("cross-encoder-minilm-L1")
    chained = build_pipeline(settings, encoder, retriever, stages=[first, second], rerank_k=4)
    curve = settings.model_copy(update={"scoring": "calibration"})  # the first-stage score the stages pool with
    [ann] = build_pipeline(curve, encoder, retriever, rerank_k=4).match_many([MatchQuery("how long is delivery", 4, 0.5, "ann")])
    [res] = chained.match_many([MatchQuery("how long is delivery", 4, 0.5, "ann+rerank")])
    # each stage pools its probability with the score the previous stage left (the first: the calibrated cosine)
    cross = first.scorer.score("how long is delivery", [m.question for m in ann.matches])
    prior = np.array([m.score for m in ann.matches])
    expected = pool(cross, pool(cross, prior, 0.5), 0.25)
    got = {m.faq_id: m.score for m in res.matches}
    for m, e in zip(ann.matches, expected):
        assert got[m.faq_id] == pytest.approx(float(e), abs=1e-5)
    assert [m.score for m in res.matches] == sorted(got.values(), reverse=True)


def test_faq_reranker_takes_mmaicm_and_cross_encoder_folders_in_order(built, encoder, tmp_path):  # noqa: F811
    """FAQ_RERANKER="a,b": one stage per folder, in that order, each loaded by what its config says it is."""
    import torch

    from app.stages import MmaicmStage
    from models.calibration import Calibration
    from models.encoders.words import GloveWords
    from models.matchers.mmaicm import MMAICM, MmaicmConfig, MmaicmScorer

    settings, retriever, reranker_dir = built
    torch.manual_seed(0)
    MmaicmScorer(MMAICM(MmaicmConfig(max_q_len=10, max_a_len=14, filters=4, fc_hidden=8, dropout=0.0)), GloveWords(),
                 Calibration(a=2.0, b=0.5, fusion_weight=0.3)).save(tmp_path / "mm")
    stages = load_stages(settings.model_copy(update={"reranker": f"{tmp_path / 'mm'}, {reranker_dir}",
                                                            "rerank_weight": 0.4}))
    assert [type(s) for s in stages] == [MmaicmStage, CrossEncoderStage]
    assert [s.served_weight for s in stages] == [0.4, 0.4]
    result = build_pipeline(settings, encoder, retriever, stages=stages, rerank_k=5).match_many(
        [MatchQuery("how long is delivery", 3, 0.5, "ann+rerank")])[0]
    assert len(result.matches) == 3 and all(0.0 <= m.score <= 1.0 for m in result.matches)
    assert [m.score for m in result.matches] == sorted((m.score for m in result.matches), reverse=True)


class CountingEncoder:
    """The real encoder, counting the texts it is asked to encode."""

    def __init__(self, inner):
        self.inner, self.texts = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, texts, batch_size=64, show_progress_bar=False):
        self.texts.extend(texts)
        return self.inner.encode(texts, batch_size=batch_size)


def test_query_cache_answers_repeats_without_encoding(built, encoder):  # noqa: F811
    settings, retriever, _ = built
    counting = CountingEncoder(encoder)
    p = build_pipeline(settings, counting, retriever, cache_size=2)
    [first] = p.match_many([MatchQuery("How long is delivery?", 3, 0.5)])
    # the same text up to case and spacing, the same options: no encoding, the same ranking
    [again] = p.match_many([MatchQuery("  how LONG is   delivery? ", 3, 0.5)])
    assert counting.texts == ["How long is delivery?"]
    assert again.cached and not first.cached and again.query == "  how LONG is   delivery? "
    assert [(m.faq_id, m.score) for m in again.matches] == [(m.faq_id, m.score) for m in first.matches]
    assert again.timings_ms["encode"] == 0.0
    # other options are other entries
    p.match_many([MatchQuery("How long is delivery?", 2, 0.5), MatchQuery("How long is delivery?", 3, 0.9)])
    assert len(counting.texts) == 3
    p.answer_weight = 0.3  # evaluations retune the pipeline in place: the cache must not answer for the old one
    p.match_many([MatchQuery("How long is delivery?", 3, 0.9)])
    assert len(counting.texts) == 4
    assert len(p.cache) == 2 and p.cache.hits == 1  # LRU bound


def test_query_cache_is_emptied_by_another_retriever(built, encoder):  # noqa: F811
    """The service replaces its retriever on every swap and KB change: the cache follows it."""
    settings, retriever, _ = built
    current = {"r": retriever}
    counting = CountingEncoder(encoder)
    p = build_pipeline(settings, counting, lambda: current["r"], cache_size=16)
    p.match_many([MatchQuery("can I get my money back", 3, 0.5)])
    p.match_many([MatchQuery("can I get my money back", 3, 0.5)])
    assert len(counting.texts) == 1
    current["r"] = Retriever.load(retriever.build_dir)  # e.g. a reload of the same version: a new object
    [fresh] = p.match_many([MatchQuery("can I get my money back", 3, 0.5)])
    assert len(counting.texts) == 2 and not fresh.cached and p.cache.invalidations == 1
    assert build_pipeline(settings, counting, retriever, cache_size=0).cache.size == 0


class BrokenRetriever:
    """A retriever whose search fails: one group's error, not the others'."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def search(self, vecs, k):
        raise RuntimeError("search failed")


def test_run_encodes_every_group_once_and_isolates_each_groups_error(built, encoder):  # noqa: F811
    """`Pipeline.run`, the service batcher's one entry point: one encoder call for all groups, each group
    ranked on its own retriever and remembered; a failing group gets its error, the others their results."""
    settings, retriever, _ = built
    counting = CountingEncoder(encoder)
    p = build_pipeline(settings, counting, retriever, cache_size=16)
    good = [MatchQuery("how long is delivery", 3, 0.5), MatchQuery("can I get my money back", 3, 0.5)]
    bad = [MatchQuery("where is my parcel", 3, 0.5)]
    sizes: list[int] = []
    submitted = time.perf_counter() - 1.0  # a second in the queue: the total timing counts it
    first, second, third = p.run([(good, retriever, submitted), (bad, BrokenRetriever(retriever), None),
                                  (good[:1], retriever, None)], on_encode=sizes.append)
    assert counting.texts == [q.query for q in good + bad + good[:1]] and sizes == [4]
    assert isinstance(second, RuntimeError) and "search failed" in str(second)
    expected = p.match_many(good, retriever=retriever)  # from the cache: `run` remembered them
    assert all(r.cached for r in expected) and len(counting.texts) == 4
    assert [[m.faq_id for m in r.matches] for r in first] == [[m.faq_id for m in r.matches] for r in expected]
    assert [m.faq_id for m in third[0].matches] == [m.faq_id for m in first[0].matches]
    assert first[0].timings_ms["total"] >= 1000.0 > third[0].timings_ms["total"]
    assert first[0].timings_ms["encode"] == third[0].timings_ms["encode"] > 0


def test_run_gives_an_encoder_failure_to_every_group(built, encoder):  # noqa: F811
    settings, retriever, _ = built

    class FailingEncoder(CountingEncoder):
        def encode(self, texts, batch_size=64, show_progress_bar=False):
            raise OSError("encoder gone")

    p = build_pipeline(settings, FailingEncoder(encoder), retriever)
    sizes: list[int] = []
    outcomes = p.run([([MatchQuery("a")], retriever, None), ([MatchQuery("b")], retriever, None)],
                     on_encode=sizes.append)
    assert [type(o) for o in outcomes] == [OSError, OSError] and sizes == []
    with pytest.raises(OSError, match="encoder gone"):
        p.match_many([MatchQuery("refund please")])
