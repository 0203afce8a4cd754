"""Multilingual mode's encoder: FAQ-side vectors are unit vectors holding both encoders; an English query
scores exactly mpnet's cosine, another language the route's mix of both encoders plus its offset."""
from __future__ import annotations

import numpy as np
import pytest

from models.encoders.multilingual import E5Encoder, MultilingualEncoder, read_curves, read_routes


class Fixed:
    """A stand-in base with fixed unit vectors per text (the real mpnet is exercised by the service tests)."""

    id, dim, runtime = "fixed", 4, "onnx-int8"

    def encode(self, texts, batch_size=64, show_progress_bar=False):
        rng = [np.random.default_rng(abs(hash(t)) % 2**32).normal(size=self.dim) for t in texts]
        v = np.asarray(rng, np.float32).reshape(len(texts), self.dim)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def e5():
    return E5Encoder(threads=1)


def test_e5_encodes_queries_and_passages_apart(e5):
    q = e5.encode_queries(["¿cómo restablezco mi contraseña?"])
    p = e5.encode(["How do I reset my password?", "What are your opening hours?"])
    assert q.shape == (1, 384) and p.shape == (2, 384)
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-4)
    assert (p @ q[0])[0] > (p @ q[0])[1]  # the Spanish question is nearest its English FAQ


def test_routes_put_each_language_on_its_scale(e5):
    routes = {"es": {"mpnet": 0.3, "e5": 2.0, "offset": -1.2}, "*": {"mpnet": 0.0, "e5": 1.0, "offset": 0.0},
              "en": {"mpnet": 1.0, "e5": 0.0, "offset": 0.0}}
    enc = MultilingualEncoder(Fixed(), e5, routes)
    faqs = ["How do I reset my password?", "Quiero devolver un pedido"]
    f = enc.encode(faqs)
    assert f.shape == (2, 4 + 384 + 1) and np.allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-4)
    q = enc.encode_queries(["reset my password", "restablecer contraseña", "passwort zurücksetzen"],
                           languages=["en", "es", "de"])
    m, e = Fixed().encode(faqs), e5.encode(faqs)
    qm = Fixed().encode(["reset my password", "restablecer contraseña"])
    qe = e5.encode_queries(["restablecer contraseña", "passwort zurücksetzen"])
    assert np.allclose(q[0] @ f.T, m @ qm[0], atol=1e-5)  # English: mpnet's cosine
    assert np.allclose(q[1] @ f.T, 0.3 * (m @ qm[1]) + 2.0 * (e @ qe[0]) - 1.2, atol=1e-4)
    assert np.allclose(q[2] @ f.T, e @ qe[1], atol=1e-4)  # a language without a route of its own: "*"


def test_the_shipped_routes_keep_english_on_mpnet():
    routes = read_routes()
    assert routes["en"] == {"mpnet": 1.0, "e5": 0.0, "offset": 0.0} and "*" in routes


def test_a_language_curve_moves_the_probability_and_brings_its_table(tmp_path):
    import json

    from models.encoders.multilingual import LanguageCurve, read_curves

    curve = LanguageCurve(2.0, 1.0)
    assert curve.apply(0.5) == pytest.approx(1 / (1 + np.exp(-1.0)))
    assert curve.apply(0.0) < 1e-9 and curve.apply(1.0) > 1 - 1e-9
    ps = [0.05, 0.2, 0.5, 0.8]
    assert [curve.apply(p) for p in ps] == sorted(curve.apply(p) for p in ps)  # the order of FAQs is kept
    path = tmp_path / "routes.json"
    table = [{"threshold": 0.5, "expected_precision": 0.8, "answer_rate": 0.4}]
    path.write_text(json.dumps({"routes": {}, "calibration": {"es": {"a": 1.5, "b": 0.5, "table": table},
                                                               "en": {"a": 9, "b": 9}}}))
    curves = read_curves(path)
    assert set(curves) == {"es"} and curves["es"] == LanguageCurve(1.5, 0.5, table)


def test_the_pipeline_routes_a_query_in_the_language_it_was_given(e5):
    """The service detects each query's language on the client's words and the pipeline routes by that one, so a
    query is encoded in the language its response names even when the text alone would read otherwise."""
    from app.match import Pipeline
    from models.encoders.base import SharedEncoder

    routes = {"es": {"mpnet": 0.0, "e5": 2.0, "offset": -1.0}, "*": {"mpnet": 0.0, "e5": 1.0, "offset": 0.0},
              "en": {"mpnet": 1.0, "e5": 0.0, "offset": 0.0}}
    shared = SharedEncoder(MultilingualEncoder(Fixed(), e5, routes))
    pipeline = Pipeline(shared, None, turn_model=False)
    text = "reset password"  # English to the identifier
    routed = pipeline.encode([text], ["es"])
    assert np.allclose(routed, shared.encode_queries([text], languages=["es"]))
    assert not np.allclose(routed, pipeline.encode([text]))  # detected here: English, mpnet
    assert np.allclose(pipeline.encode([text], [None]), pipeline.encode([text]))


def test_a_question_is_native_when_the_kb_is_written_in_its_language():
    """A question in a non-English KB's own language gets the `native` curve and its words read in that language
    (app/match/decider.py `native_language`); English never does, and a Spanish question to an English KB is cross-lingual."""
    from types import SimpleNamespace

    from app.match.decider import native_language

    spanish_kb = SimpleNamespace(manifest={"lexical": {"languages": {"es": 188}}})
    english_kb = SimpleNamespace(manifest={"lexical": {"languages": {"en": 188}}})
    old_build = SimpleNamespace(manifest={})  # built before languages were recorded: English
    question = "¿cómo me cambio a vuestra compañía de luz?"
    assert native_language(question, spanish_kb) == "es"
    assert native_language(question, english_kb) is None and native_language(question, old_build) is None
    assert native_language("how do I switch to you?", spanish_kb, "en") is None
    assert native_language("wechseln", spanish_kb, "es") == "es"  # the caller's detection


def test_each_query_gets_its_languages_curve_the_shared_one_or_the_native_one(e5):
    from types import SimpleNamespace

    from app.match import MatchQuery, Pipeline
    from models.encoders.base import SharedEncoder

    shipped = read_curves()
    assert {"es", "de", "fr", "*", "native"} <= set(shipped) and "en" not in shipped
    assert shipped["es"].table == shipped["de"].table == shipped["fr"].table  # one table over their queries
    pipeline = Pipeline(SharedEncoder(MultilingualEncoder(Fixed(), e5)), None, turn_model=False)
    english_kb = SimpleNamespace(manifest={"lexical": {"languages": {"en": 10}}})
    italian_kb = SimpleNamespace(manifest={"lexical": {"languages": {"it": 10}}})
    curves = pipeline.encoder.language_curves
    for language, kb, curve in [("en", english_kb, None), ("es", english_kb, curves["es"]),
                                ("it", english_kb, curves["*"]), ("it", italian_kb, curves["native"])]:
        assert pipeline.language_curve(MatchQuery("una domanda", 5, None, language=language), kb) is curve
