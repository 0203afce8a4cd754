"""The decision model's parts: features on a build's scale, the fit, the expected-precision table, the replay."""
from __future__ import annotations

import numpy as np
import pytest

from index.answers import AnswerVectors
from index.decision import (
    FEATURES, N_QUANTILES, Candidate, DecisionModel, KbView, Reference, expected_precision_at, features, fit,
    load_model, precision_table, read_background, replay, threshold_for_precision, words_of,
)


def _ref(bg_median: float = 0.3, held_median: float = 0.7) -> Reference:
    q = np.linspace(0, 1, N_QUANTILES)
    return Reference(bg_median - 0.2 + 0.4 * q, held_median - 0.2 + 0.4 * q, 600, 100)


def _cand(faq_id: str, score: float, words: str = "", n: int = 2) -> Candidate:
    return Candidate(faq_id, score, score, None, n, words_of(words))


def test_features_put_scores_on_the_builds_scale():
    ref = _ref()
    X = features("refund my yearly plan", [_cand("a", 0.7, "yearly plan refund"), _cand("b", 0.4, "opening hours")], ref)
    col = {name: X[:, i] for i, name in enumerate(FEATURES)}
    assert col["bg_norm"][0] == pytest.approx(1.0)  # the held-out phrasings' median
    assert col["bg_norm"][1] == pytest.approx(0.25)
    assert col["gap"].tolist() == pytest.approx([0.3, -0.3])
    assert col["is_top"].tolist() == [1.0, 0.0]
    assert col["lexical"][0] == pytest.approx(1.0) and col["lexical"][1] == 0.0
    # nothing in the background reaches 0.7: the tail is capped by the background's size, not infinite
    assert col["bg_tail"][0] > col["bg_tail"][1] > 0 and np.isfinite(col["bg_tail"]).all()


def test_a_lone_candidate_leads_the_background_median():
    X = features("q", [_cand("a", 0.6)], _ref(bg_median=0.3))
    assert X[0, FEATURES.index("gap")] == pytest.approx(0.3)


def test_fit_learns_a_monotone_probability_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, len(FEATURES)))
    y = (X[:, 0] + 0.3 * rng.normal(size=400) > 0).astype(float)
    model = fit(X, y, rerank=True, meta={"trained_on": ["synthetic"]})
    p = model.prob(X)
    assert ((p > 0.5) == (y > 0.5)).mean() > 0.9
    path = tmp_path / "m.json"
    model.save(path)
    again = load_model(path)
    np.testing.assert_allclose(again.prob(X), p, rtol=1e-4)  # stored to 6 decimals
    assert again.rerank and again.meta["trained_on"] == ["synthetic"]


def test_a_model_of_other_features_is_refused(tmp_path):
    d = DecisionModel(np.zeros(2), np.ones(2), np.zeros(2), 0.0, ("a", "b")).to_json()
    with pytest.raises(ValueError, match="features"):
        DecisionModel.from_json(d)


def test_precision_table_weights_the_assumed_out_of_scope_share():
    p_in, p_out = np.array([0.9, 0.8, 0.3]), np.array([0.6, 0.1])
    none_out = precision_table(p_in, p_out, oos_share=0.0, thresholds=(0.5,))[0]
    assert none_out["expected_precision"] == pytest.approx(0.85, abs=1e-4)
    assert none_out["answer_rate"] == pytest.approx(2 / 3, abs=1e-4)
    half = precision_table(p_in, p_out, oos_share=0.5, thresholds=(0.5,))[0]
    # in scope: 2 of 3 answered at mean 0.85; out of scope: 1 of 2 at 0.6
    rate = 0.5 * 2 / 3 + 0.5 * 0.5
    assert half["answer_rate"] == pytest.approx(rate, abs=1e-4)
    assert half["expected_precision"] == pytest.approx((0.5 * 1.7 / 3 + 0.5 * 0.6 / 2) / rate, abs=1e-4)
    with pytest.raises(ValueError, match="oos_share"):
        precision_table(p_in, p_out, oos_share=1.0)


def test_threshold_for_a_target_and_the_precision_at_a_threshold():
    table = [{"threshold": 0.3, "expected_precision": 0.7, "answer_rate": 0.8},
             {"threshold": 0.5, "expected_precision": 0.86, "answer_rate": 0.6},
             {"threshold": 0.7, "expected_precision": 0.93, "answer_rate": 0.4}]
    assert threshold_for_precision(table, 0.85) == 0.5
    assert threshold_for_precision(table, 0.99) is None
    assert expected_precision_at(table, 0.6) == 0.86
    assert expected_precision_at(table, 0.1) is None


def test_replay_leaves_each_phrasing_out_and_references_the_background():
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(4, 16))
    vecs, faqs, texts = [], [], []
    for f in range(4):
        for k in range(3):
            v = centres[f] + 0.3 * rng.normal(size=16)
            vecs.append(v / np.linalg.norm(v))
            faqs.append(f"faq-{f}")
            texts.append(f"question {k} about topic{f}")
    vecs = np.array(vecs, dtype=np.float32)
    bg = rng.normal(size=(20, 16))
    bg = (bg / np.linalg.norm(bg, axis=1, keepdims=True)).astype(np.float32)
    answers = AnswerVectors([f"faq-{f}" for f in range(4)], centres / np.linalg.norm(centres, axis=1, keepdims=True))
    view = KbView.build(vecs, faqs, texts, answers, {f"faq-{f}": f"answer about topic{f}" for f in range(4)})
    played = replay(view, [f"bg {i}" for i in range(20)], bg, pools=(1,), weights=(0.0, 0.5))
    ref = played.references["1/0.50"]
    assert ref.n_background == 20 and ref.heldout[50] > ref.background[50]
    held = [q for q in played.queries["1/0.50"] if q[2] is not None]
    assert len(held) == 12
    for _text, cands, own in held:
        mine = [c for c in cands if c.faq_id == own]
        assert mine and mine[0].n_phrasings == 2  # itself left out
        assert "topic" + own[-1] in mine[0].words  # its answer's and other phrasings' words
        assert mine[0].phrasing < 0.9999  # never matched against itself

    # balanced mode: held-out phrasings are encoded as queries are, by the query side
    asked = []

    def query_side(batch):
        asked.extend(batch)
        noisy = vecs[[texts.index(t) for t in batch]] + 0.5 * rng.normal(size=(len(batch), 16))
        return noisy / np.linalg.norm(noisy, axis=1, keepdims=True)

    view.query_encode = query_side
    noisier = replay(view, [f"bg {i}" for i in range(20)], bg, pools=(1,), weights=(0.0, 0.5)).references["1/0.50"]
    assert sorted(asked) == sorted(texts)  # every sampled phrasing, nothing else
    assert noisier.heldout[50] < ref.heldout[50]  # the query side's cosines, not the phrasing vectors'


def test_the_background_set_ships_with_the_package():
    questions = read_background()
    assert len(questions) >= 500 and len(set(questions)) == len(questions)


def test_the_shipped_model_loads_with_this_versions_features():
    model = load_model()
    assert model is not None and model.names == FEATURES and model.meta.get("trained_on")


def test_another_languages_words_drop_its_stop_words_fold_accents_and_stem():
    assert words_of("¿Cómo cambio mi contraseña?", "es") == words_of("como cambio mi contrasena", "es") == \
        words_of("cambiar contraseñas", "es")
    assert "mi" not in " ".join(words_of("¿Cómo cambio mi contraseña?", "es"))
    # German folds umlauts too, but "ändern" must not become the stop word "andern"
    assert len(words_of("Wie kann ich mein Passwort ändern?", "de")) == 2
    assert words_of("je voudrais être remboursé", "fr") == words_of("je voudrais etre rembourse", "fr")
    # English is read as the model learnt it, whatever else changed
    assert words_of("resetting passwords", "en") == words_of("resetting passwords") == frozenset({"resett", "password"})


def test_the_lexical_feature_counts_shared_words_in_the_language_given():
    query = "como cambio la contrasena de mi cuenta"
    faq_text = "¿Cómo puedo cambiar la contraseña de mi cuenta?"
    spanish = features(query, [Candidate("a", 0.5, 0.5, None, 2, words_of(faq_text, "es"))], _ref(), "es")
    english = features(query, [_cand("a", 0.5, faq_text)], _ref())
    lexical = FEATURES.index("lexical")
    # read as English, "la", "de" and "mi" count and the unaccented "como" and "contrasena" miss: 4 of 7
    assert spanish[0, lexical] == 1.0 and english[0, lexical] == pytest.approx(4 / 7)
