"""kb/lint.py on a small real KB with the real MiniLM encoder."""
from __future__ import annotations

import json

import pytest

from kb.lint import format_report, lint_kb
from kb.records import KbRecord
from tests.helpers.kb import INDEX_TEST_FAQS


def _records(answers: dict[str, str] | None = None, extra: list[tuple[str, str]] | None = None) -> list[KbRecord]:
    answers = answers or {}
    recs = [KbRecord(f, q, answers.get(f, a), ["test"]) for f, a, qs in INDEX_TEST_FAQS for q in qs]
    return recs + [KbRecord(f, q, None, None) for f, q in (extra or [])]


def _answer(faq_id: str) -> str:
    return next(a for f, a, _ in INDEX_TEST_FAQS if f == faq_id)


def test_clean_kb_is_not_flagged(minilm_encoder):
    report = lint_kb(_records(), minilm_encoder)
    assert report.flagged == [], format_report(report)
    assert len(report.faqs) == len(INDEX_TEST_FAQS)
    assert all(0.0 <= f.score < report.threshold for f in report.faqs)


def test_swapped_answer_is_flagged_first_and_names_the_other_faq(minilm_encoder):
    swapped = {"refund": _answer("dark-mode"), "dark-mode": _answer("refund")}
    report = lint_kb(_records(swapped), minilm_encoder)
    top2 = {f.faq_id for f in report.faqs[:2]}
    assert top2 == {"refund", "dark-mode"}, format_report(report)
    assert {f.faq_id for f in report.flagged} == top2
    refund = next(f for f in report.faqs if f.faq_id == "refund")
    fit = next(r for r in refund.reasons if r.signal == "fit")
    assert "'dark-mode'" in fit.text and "better than" in fit.text
    assert fit.numbers["own_fit"] < fit.numbers["their_fit"]


def test_truncated_and_missing_answers_are_flagged(minilm_encoder):
    cut = "Standard shipping takes 3-5 busin"
    report = lint_kb(_records({"shipping-time": cut, "warranty": "[intent: warranty]"}), minilm_encoder)
    flagged = {f.faq_id: f for f in report.flagged}
    assert set(flagged) == {"shipping-time", "warranty"}, format_report(report)
    assert flagged["warranty"].reasons[0].signal == "missing"
    truncated = next(r for r in flagged["shipping-time"].reasons if r.signal == "truncated")
    assert "mid-word" in truncated.text


@pytest.mark.parametrize("placeholder", ["", "  ", "TODO", "n/a"])
def test_placeholder_forms_count_as_missing(placeholder):
    report = lint_kb(_records({"refund": placeholder}))  # no encoder: structure only
    assert [f.faq_id for f in report.flagged] == ["refund"]
    assert report.faqs[0].reasons[0].signal == "missing"
    assert any("no encoder" in n for n in report.notes)


def test_duplicate_answers_and_phrasings_name_each_other():
    report = lint_kb(_records({"invoice": _answer("refund")}, extra=[("warranty", "Can I get a refund?")]))
    by_id = {f.faq_id: f for f in report.flagged}
    assert {"invoice", "refund", "warranty"} <= set(by_id)
    assert any(r.signal == "duplicate-answer" and "'refund'" in r.text for r in by_id["invoice"].reasons)
    assert any(r.signal == "duplicate-phrasing" and "'refund'" in r.text for r in by_id["warranty"].reasons)


def test_json_shape(minilm_encoder):
    report = lint_kb(_records({"refund": "TODO"}), minilm_encoder)
    data = json.loads(json.dumps(report.as_dict(top=3)))
    assert {"threshold", "encoder", "n_faqs", "n_phrasings", "n_flagged", "notes", "faqs"} <= set(data)
    assert data["n_faqs"] == len(INDEX_TEST_FAQS) and data["n_flagged"] == 1 and len(data["faqs"]) == 3
    first = data["faqs"][0]
    assert first["faq_id"] == "refund" and first["flagged"] is True and 0.0 <= first["score"] <= 1.0
    assert {"signal", "score", "text", "numbers"} <= set(first["reasons"][0])
    assert {"own_fit", "fit_z", "analogy_best_cos"} <= set(data["faqs"][1]["numbers"])


def test_an_analogy_model_moves_the_analogy_numbers_and_nothing_else(minilm_encoder):
    import torch

    from models.matchers.analogy import AnalogyConfig, AnalogyScorer, BiGruEncoder
    from models.encoders.words import GloveWords

    torch.manual_seed(0)
    model = AnalogyScorer(BiGruEncoder(AnalogyConfig(hidden=8)), GloveWords(), device="cpu")
    records = _records({"refund": _answer("invoice"), "invoice": _answer("refund")})
    plain = lint_kb(records, minilm_encoder)
    with_model = lint_kb(records, minilm_encoder, analogy=model)
    assert [(f.faq_id, f.score) for f in plain.faqs] == [(f.faq_id, f.score) for f in with_model.faqs]
    before = {f.faq_id: f.numbers["analogy_best_cos"] for f in plain.faqs}
    after = {f.faq_id: f.numbers["analogy_best_cos"] for f in with_model.faqs}
    assert before.keys() == after.keys() and before != after
    assert all(-1.0 <= v <= 1.0 for v in after.values())


def test_encode_is_how_texts_become_vectors(minilm_encoder):
    """`encode=` is called once with every phrasing and answer (the CLI passes the build's
    `encode_in_batches`), and its vectors are what the fit is computed on."""
    from index.build import encode_in_batches

    calls = []

    def encode(encoder, texts, batch_size, progress):
        calls.append(len(texts))
        return encode_in_batches(encoder, texts, batch_size, progress)

    records = _records()
    report = lint_kb(records, minilm_encoder, encode=encode)
    assert calls == [len(records) + len(INDEX_TEST_FAQS)]
    assert report.flagged == [] and all("own_fit" in f.numbers for f in report.faqs)


def test_vectors_that_are_not_unit_length_are_refused(minilm_encoder):
    def unnormalised(encoder, texts, batch_size, progress):
        return 2.0 * encoder.encode(texts, batch_size=batch_size)

    with pytest.raises(ValueError, match="L2-normalised"):
        lint_kb(_records(), minilm_encoder, encode=unnormalised)
