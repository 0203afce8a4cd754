"""app/api/console/explain.py without a server: signals of re-ranked FAQs and the word weights' edge cases,
with a stand-in encoder whose vectors are bags of words."""
from __future__ import annotations

import numpy as np

from app.api.console.explain import MAX_OCCLUSION_WORDS, signals_of, word_weights
from app.match import FaqMatch

VOCAB = ["refund", "money", "please", "how", "get"]
SCALE = [3.0, 1.0, 1.0, 1.0, 1.0]  # "refund" carries the meaning


class BagEncoder:
    def __init__(self):
        self.calls: list[list[str]] = []

    def encode(self, texts):
        self.calls.append(list(texts))
        return np.array([[t.lower().split().count(w) * k + 0.01 for w, k in zip(VOCAB, SCALE)] for t in texts], dtype=np.float32)


class NoVariants:
    """A retriever that no longer holds the phrasing (edited since the build): its text is encoded instead."""

    def faq_variants(self, faq_id):
        return []


TOP = FaqMatch("refund", "how get refund", "Refunds take 10 days.", score=0.9, cosine=0.8, phrasing_cosine=0.85)


def test_re_ranked_faqs_show_the_stage_and_first_stage_scores():
    staged = FaqMatch("refund", "refund policy", "Money back in 10 days.", score=0.7, cosine=0.6, first_score=0.4)
    [plain, reranked] = signals_of("refund my money", [TOP, staged])
    assert plain.stage_score is None and plain.first_score is None and plain.answer_cosine is None
    assert reranked.stage_score == 0.7 and reranked.first_score == 0.4
    assert reranked.shared_words == ("money", "refund")


def test_shared_words_are_read_in_the_language_the_decision_model_read_them():
    spanish = FaqMatch("password", "¿Cómo cambio mi contraseña?", "En Ajustes > Cuenta.", score=0.8, cosine=0.7)
    assert signals_of("como cambio la contrasena", [spanish], "es")[0].shared_words == ("cambi", "contrasen")
    assert signals_of("como cambio la contrasena", [spanish])[0].shared_words == ("cambio",)  # as English


def test_word_weights_use_one_encoder_call_and_rank_the_meaning_first():
    encoder = BagEncoder()
    weights = word_weights(encoder, NoVariants(), "how get refund please", TOP)
    assert len(encoder.calls) == 1 and len(encoder.calls[0]) == 4 + 1 + 1  # query, 4 occlusions, the phrasing
    assert weights.top[0].word == "refund" and weights.top[0].bucket == 5
    assert {w.word: w.weight for w in weights.words}["please"] < 0  # a word the phrasing lacks pulls away
    assert weights.texts == 6 and weights.ms > 0


def test_word_weights_say_why_they_are_missing():
    encoder = BagEncoder()
    assert "no FAQ" in word_weights(encoder, NoVariants(), "refund please", None).skipped
    assert "one-word" in word_weights(encoder, NoVariants(), "refund", TOP).skipped
    long = word_weights(encoder, NoVariants(), " ".join(["refund"] * (MAX_OCCLUSION_WORDS + 1)), TOP)
    assert f"{MAX_OCCLUSION_WORDS + 1} words" in long.skipped and long.words == []
    assert encoder.calls == [], "nothing was encoded for them"
