"""app/release/calibration.py on its own (`faq index calibrate` without the CLI): the decision model refitted on a
KB's labels against one build, the single configured re-ranking stage stacked with it, and the refit saved.
tests/cli/test_index_labels.py runs the command and the service that serves the result."""
from __future__ import annotations

import json

import pytest

from app.release.calibration import fit_stage, refit_on_labels, save_refit
from index.artifacts import BuildRegistry
from index.decision import WINDOW, decide, load_model
from tests.helpers.api import build, make_settings, make_store
from tests.helpers.reranker import make_tiny_reranker

#: reworded queries of the API tests' KB, two out of scope: enough for the 5-fold comparison (10 or more)
LABELS = [("I lost my password", "reset_password"), ("can I cancel the order I placed", "cancel_order"),
          ("how many days until my parcel comes", "shipping_time"), ("give me my money back", "refund"),
          ("I want to use another email", "change_email"), ("what time do you open", "opening_hours"),
          ("do you accept PayPal payments", "payment_methods"), ("please remove my account", "delete_account"),
          ("I need to reset the password", "reset_password"), ("refund my purchase", "refund"),
          ("what's the weather in Lisbon tomorrow", None), ("who won the football match", None)]


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):  # noqa: F811
    """(settings, store, registry, version): the KB built, then an FAQ added that only the KB snapshot has."""
    settings = make_settings(tmp_path_factory.mktemp("kb_calibration"))
    store = make_store(settings)
    version = build(store, encoder, settings)["version"]
    store.create_faq("pets", "Dogs on a leash are welcome.", ["Can I bring my dog?"])
    return settings, store, BuildRegistry(settings.index_dir), version


@pytest.fixture
def loads(monkeypatch, encoder):  # noqa: F811
    """The manifests refit_on_labels asks the encoder of: it gets the session's MiniLM (the one the build
    recorded) instead of loading it again, which takes seconds."""
    asked: list[dict] = []

    def load_configured_encoder(settings, manifest=None, spec=None):
        asked.append(manifest)
        return encoder

    monkeypatch.setattr("app.match.assembly.load_configured_encoder", load_configured_encoder)
    return asked


@pytest.fixture
def refit(built, loads):
    settings, store, registry, version = built
    return refit_on_labels(settings, store, registry, version, LABELS, strength=10.0)


def test_the_model_is_refitted_on_the_labels_against_the_build_and_the_current_kb(built, loads, refit):
    settings, store, registry, version = built
    assert [m["version"] for m in loads] == [version], "the build's own encoder scores the labels"
    assert refit.model.meta["kb_labels"] == len(LABELS) and refit.model.meta["prior_strength"] == 10.0
    report = refit.report
    assert report["labels"] == len(LABELS) and report["folds"] == 5
    assert set(report["cross_kb"]) == set(report["refitted"]) == {"top1", "f1", "log_loss"}
    # each label's row and matches, in order: its query, its gold FAQ, the candidates of the build's curve
    assert [(text, gold) for text, _, gold, _ in refit.rows] == LABELS
    assert len(refit.matches) == len(LABELS) and all(0 < len(m) <= WINDOW for m in refit.matches)
    assert refit.matches[0][0].faq_id == "reset_password"
    # the build with the KB as it is now: the FAQ added after the build is there
    assert refit.retriever.version == version and "pets" in refit.retriever.answers
    assert refit.retriever.kb_revision == store.revision()


def test_labels_that_give_nothing_to_fit_are_refused(built, loads):
    settings, store, registry, version = built
    with pytest.raises(ValueError, match="none of the labelled queries has a candidate FAQ"):
        refit_on_labels(settings, store, registry, version, [], strength=10.0)


def test_without_a_stage_there_is_nothing_to_stack(built, refit):
    said: list[str] = []
    assert fit_stage(built[0], refit, said.append) is None
    assert said == ["  0 stages configured: stacking takes one; they stay pooled as configured"]
    assert "stages" not in refit.model.meta


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    return make_tiny_reranker(tmp_path_factory.mktemp("rr") / "tiny", onnx=False)  # no export: stacking reads scores


def test_the_single_stage_is_stacked_with_the_refitted_model(built, refit, reranker):
    settings = built[0].model_copy(update={"reranker": str(reranker)})
    said: list[str] = []
    stage_id, coefs, used = fit_stage(settings, refit, said.append)
    assert stage_id.startswith("cross-encoder-minilm-L1") and said == []
    assert used == sum(min(len(m), WINDOW) for m in refit.matches), "every labelled candidate in the window"
    assert refit.model.meta["stages"] == {stage_id: [round(c, 6) for c in coefs]}


def test_several_stages_stay_pooled_as_configured(built, refit, reranker):
    settings = built[0].model_copy(update={"reranker": f"{reranker},{reranker}"})
    said: list[str] = []
    assert fit_stage(settings, refit, said.append) is None
    assert said == ["  2 stages configured: stacking takes one; they stay pooled as configured"]
    assert "stages" not in refit.model.meta


def test_the_saved_refit_says_when_on_which_build_and_how_it_cross_validated(built, refit, tmp_path):
    version = built[3]
    target = tmp_path / "kb" / "decision_model.json"  # its folder does not exist yet
    save_refit(refit, version, target)
    meta = json.loads(target.read_text())["meta"]
    assert meta["build"] == version and meta["cross_validated"] == refit.report and meta["fitted_at"]
    assert meta["kb_labels"] == len(LABELS)
    loaded = load_model(target)
    text, candidates, _, words = refit.rows[0]
    # the same decisions (the file keeps the coefficients to JSON's float text)
    assert decide(loaded, text, candidates, refit.ref, words) == pytest.approx(
        decide(refit.model, text, candidates, refit.ref, words), rel=1e-4, abs=1e-9)
