"""models/calibration.py `Calibration`, the one Platt curve p = sigmoid(a * x + b) of model folders, build
manifests and cross-encoder configs: files written before it existed read back the same, and what it writes
is byte for byte what was written before."""
from __future__ import annotations

import json

import numpy as np
import pytest

from models.calibration import CALIBRATION_FILE, Calibration, read_calibration, write_calibration

# calibration.json as `faq train mmaicm | analogy | siamese` wrote it (dataclasses.asdict of the old class)
OLD_FOLDER_FILE = """{
  "a": 11.013648845240725,
  "b": 4.714513879045201,
  "fitted_on": "dev pairs (those that chose the epoch)",
  "n_pairs": 12,
  "fusion_weight": 0.5,
  "extra": {}
}
"""
OLD_IDENTITY_FILE = """{
  "a": 1.0,
  "b": 0.0,
  "fitted_on": null,
  "n_pairs": 0,
  "fusion_weight": 0.5,
  "extra": {}
}
"""


def test_an_old_folder_file_reads_back_and_is_written_unchanged(tmp_path):
    (tmp_path / CALIBRATION_FILE).write_text(OLD_FOLDER_FILE, encoding="utf-8")
    cal = read_calibration(tmp_path)
    assert (cal.a, cal.b, cal.fitted_on, cal.n_pairs, cal.fusion_weight, cal.extra) == (
        11.013648845240725, 4.714513879045201, "dev pairs (those that chose the epoch)", 12, 0.5, {})
    out = tmp_path / "again"
    out.mkdir()
    write_calibration(out, cal)
    assert (out / CALIBRATION_FILE).read_text(encoding="utf-8") == OLD_FOLDER_FILE
    write_calibration(out, Calibration())
    assert (out / CALIBRATION_FILE).read_text(encoding="utf-8") == OLD_IDENTITY_FILE


def test_a_folder_without_a_file_is_the_identity_and_unknown_fields_are_refused(tmp_path):
    cal = read_calibration(tmp_path)
    assert (cal.a, cal.b) == (1.0, 0.0) and np.allclose(cal.prob([-2.0, 0.0, 3.0]), 1 / (1 + np.exp(-np.array([-2.0, 0.0, 3.0]))))
    # a build's `source` is not a folder field: refused as before
    (tmp_path / CALIBRATION_FILE).write_text(json.dumps({"a": 2.0, "b": 0.0, "source": "kb_fit"}), encoding="utf-8")
    with pytest.raises(ValueError, match="unknown calibration fields"):
        read_calibration(tmp_path)


def test_a_partial_old_file_keeps_the_defaults(tmp_path):
    (tmp_path / CALIBRATION_FILE).write_text(json.dumps({"a": 3.0, "b": -1.0, "fusion_weight": 0.4}), encoding="utf-8")
    cal = read_calibration(tmp_path)
    assert (cal.a, cal.b, cal.fusion_weight, cal.fitted_on, cal.n_pairs, cal.extra) == (3.0, -1.0, 0.4, None, 0, {})


def test_build_manifests_keep_their_curve_format():
    from index.calibration import DEFAULT_A, DEFAULT_B, calibration_for, prior_calibration

    prior = prior_calibration(object())
    assert prior.to_dict() == {"a": DEFAULT_A, "b": DEFAULT_B, "source": "default"}  # a manifest's `prior`
    manifest = {"calibration": {"a": 10.0, "b": -8.0, "source": "kb_fit", "n_examples": 40, "n_positive": 31,
                                "prior": prior.to_dict(), "pooled": {"2": {"a": 11.0, "b": -7.0, "source": "kb_fit"}}}}
    cal = calibration_for(manifest)
    assert (cal.a, cal.b, cal.source) == (10.0, -8.0, "manifest")
    assert (calibration_for(manifest, pool=2).a, calibration_for(manifest, pool=2).b) == (11.0, -7.0)
    cos = np.array([0.2, 0.75, 0.95])
    assert np.array_equal(cal.prob(cos), 0.5 * (1.0 + np.tanh(0.5 * (10.0 * cos - 8.0))))
    assert cal.probability(0.8) == float(cal.prob(0.8))


def test_cross_encoder_configs_keep_their_curve_format():
    written = {"a": 2.0, "b": 0.25, "source": "platt on 6 held-out binary pairs (heldout_pairs.tsv)"}
    cal = Calibration.from_dict(written)
    assert cal.to_dict() == written
    assert Calibration.from_dict({}).to_dict() == {"a": 1.0, "b": 0.0, "source": None}
    assert Calibration.from_dict(None).prob(0.0) == 0.5


def test_matcher_probabilities_are_the_old_formula():
    from models.scoring import sigmoid

    raw = np.array([-0.7, 0.0, 0.3, 0.9], dtype=np.float32)
    cal = Calibration(a=3.0, b=-1.0, fusion_weight=0.4)
    old = sigmoid(cal.a * np.asarray(raw, dtype=np.float64) + cal.b).astype(np.float32)
    assert np.array_equal(cal.prob(raw).astype(np.float32), old)


def test_one_provenance_field_under_both_names():
    """A build's `source` and a folder's `fitted_on` are one field; trainers' `dataclasses.asdict` (their
    training.json) keeps the folder file's keys and order."""
    import dataclasses

    from models.calibration import FOLDER_FIELDS

    cal = Calibration(12.0, -9.0, source="default")
    assert cal.source == cal.fitted_on == "default" and cal == Calibration(a=12.0, b=-9.0, fitted_on="default")
    assert tuple(dataclasses.asdict(cal)) == FOLDER_FIELDS == ("a", "b", "fitted_on", "n_pairs", "fusion_weight", "extra")
    with pytest.raises(ValueError, match="same field"):
        Calibration(source="kb_fit", fitted_on="dev")
