"""`faq eval pairs`: accuracy of an encoder's cosine as a paraphrase classifier on labelled pairs.

Pairs files are `label<TAB>q1<TAB>q2` TSV (`faq data prepare qqp|mrpc|stsb` writes them). A pair is
called a paraphrase when cos(u, v) >= threshold, with the threshold taken from:
- `matching_layer`: MSEM's own matching layer, ŷ = σ(γ (cos − α)) >= 0.5  <=>  cos >= α (no tuning,
  so training on the dev pairs does not leak into it); only for encoders with a calibration (MSEM);
- `dev_tuned`: the cosine that maximises accuracy on `--dev-pairs` (when given).
ROC AUC (threshold-free) is reported too.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from models.scoring import best_threshold


def _pairs(path: str | Path) -> tuple[list[str], list[str], np.ndarray]:
    from models.pairs import read_pair_file

    pairs = read_pair_file(path)
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return [p.q1 for p in pairs], [p.q2 for p in pairs], np.array([p.label for p in pairs], dtype=np.int64)


def pair_cosines(encoder: Any, q1: Sequence[str], q2: Sequence[str], batch_size: int = 256) -> np.ndarray:
    """Cosine of each pair; each distinct sentence is encoded once."""
    distinct = list(dict.fromkeys([*q1, *q2]))
    where = {t: i for i, t in enumerate(distinct)}
    vecs = encoder.encode(distinct, batch_size=batch_size, show_progress_bar=True)
    u = vecs[[where[t] for t in q1]]
    v = vecs[[where[t] for t in q2]]
    return np.sum(u * v, axis=1)


def accuracy_at(cos: np.ndarray, labels: np.ndarray, threshold: float) -> float:
    return float(np.mean((cos >= threshold) == (labels == 1)))


def roc_auc(cos: np.ndarray, labels: np.ndarray) -> float | None:
    pos, neg = cos[labels == 1], cos[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return None
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([pos, neg]))
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def run_eval_pairs(pairs_path: str | Path, model: str | None = None, dev_pairs_path: str | Path | None = None,
                   batch_size: int = 256) -> dict:
    from app.settings import get_settings
    from app.pipeline import encoder_spec, load_configured_encoder

    settings = get_settings()
    spec = model or encoder_spec(settings)
    t0 = time.perf_counter()
    encoder = load_configured_encoder(settings, spec=spec)
    q1, q2, labels = _pairs(pairs_path)
    cos = pair_cosines(encoder, q1, q2, batch_size)
    report: dict[str, Any] = {
        "pairs": str(pairs_path), "encoder": spec, "encoder_id": encoder.id,
        "n": int(len(labels)), "positive_share": round(float(labels.mean()), 4),
        "majority_class_accuracy": round(float(max(labels.mean(), 1 - labels.mean())), 4),
        "roc_auc": roc_auc(cos, labels), "accuracy": {},
    }
    calibration = getattr(encoder, "calibration", None)
    if calibration is not None:
        alpha = float(calibration[1])
        report["accuracy"]["matching_layer"] = {"threshold": alpha, "accuracy": accuracy_at(cos, labels, alpha)}
    if dev_pairs_path:
        d1, d2, dlabels = _pairs(dev_pairs_path)
        dcos = pair_cosines(encoder, d1, d2, batch_size)
        thr, dev_acc = best_threshold(dcos, dlabels == 1)
        report["dev_pairs"] = str(dev_pairs_path)
        report["accuracy"]["dev_tuned"] = {"threshold": thr, "dev_accuracy": dev_acc,
                                           "accuracy": accuracy_at(cos, labels, thr)}
    thr, oracle = best_threshold(cos, labels == 1)
    report["accuracy"]["oracle_on_test"] = {"threshold": thr, "accuracy": oracle,
                                            "note": "upper bound: threshold chosen on the test pairs themselves"}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def format_pairs_report(report: dict) -> str:
    lines = [f"{report['pairs']}: {report['n']} pairs ({report['positive_share']:.1%} positive), "
             f"encoder {report['encoder_id']}",
             f"  ROC AUC {report['roc_auc']:.4f}" if report["roc_auc"] is not None else "  ROC AUC n/a"]
    for name, row in report["accuracy"].items():
        lines.append(f"  accuracy ({name}, cos >= {row['threshold']:.4f}): {row['accuracy']:.4f}")
    return "\n".join(lines)


def write_pairs_report(report: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
