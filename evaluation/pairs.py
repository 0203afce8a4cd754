"""`faq eval pairs`: accuracy of an encoder's cosine as a paraphrase classifier on labelled pairs.

Pairs files are `label<TAB>q1<TAB>q2` TSV (`faq data prepare qqp|mrpc|stsb` writes them). A pair is
called a paraphrase when cos(u, v) >= threshold, with the threshold taken from:
- `matching_layer`: MSEM's own matching layer, ŷ = σ(γ (cos − α)) >= 0.5  <=>  cos >= α (no tuning,
  so training on the dev pairs does not leak into it); only for encoders with a calibration (MSEM);
- `dev_tuned`: the cosine that maximises accuracy on `--dev-pairs` (when given).
ROC AUC (threshold-free) is reported too.

With --dev-pairs the report also holds a classifier table in the form of the Siamese matcher paper's
Table 2 (`classifiers`): log loss, accuracy / precision / recall / F1 at p >= 0.5 and ROC AUC of
- the encoder's cosine through a sigmoid fitted on the dev pairs (Platt), and so each other encoder given
  (`cosines`: mpnet, the shipped MSEM, a fine-tuned MSEM folder);
- `char_ngram`: TF-IDF character 3-grams (IDF from the dev pairs' texts), cosine, a sigmoid fitted on dev;
- each cross-encoder folder given (`faq train reranker`): its match probability, as trained;
- each Siamese model folder given (`faq train siamese`): its own calibrated probabilities.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from evaluation.measures import f1_score
from models.scoring import best_threshold


def _pairs(path: str | Path) -> tuple[list[str], list[str], np.ndarray]:
    from training.pairs import read_pair_file

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


def classifier_metrics(p: np.ndarray, labels: np.ndarray, eps: float = 1e-7) -> dict:
    """Log loss, accuracy, precision, recall, F1 (positive: p >= 0.5) and ROC AUC of probabilities."""
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1.0 - eps)
    y = np.asarray(labels) == 1
    pred = p >= 0.5
    tp = float(np.sum(pred & y))
    precision = tp / max(float(pred.sum()), 1.0)
    recall = tp / max(float(y.sum()), 1.0)
    f1 = f1_score(precision, recall)
    return {"log_loss": float(-np.mean(np.where(y, np.log(p), np.log1p(-p)))),
            "accuracy": float(np.mean(pred == y)), "precision": precision, "recall": recall, "f1": f1,
            "roc_auc": roc_auc(p, y.astype(np.int64))}


class CharNgramBaseline:
    """TF-IDF over character 3-grams (within word boundaries, lower case), cosine of the two rows, and
    p = sigmoid(a * cos + b) fitted on labelled pairs: the paper's character n-gram baseline."""

    def __init__(self, n: int = 3):
        self.n = n
        self.vectorizer: Any = None
        self.a, self.b = 1.0, 0.0

    def cosines(self, q1: Sequence[str], q2: Sequence[str]) -> np.ndarray:
        u, v = self.vectorizer.transform(list(q1)), self.vectorizer.transform(list(q2))  # rows L2-normalised
        return np.asarray(u.multiply(v).sum(axis=1)).ravel()

    def fit(self, q1: Sequence[str], q2: Sequence[str], labels: np.ndarray) -> "CharNgramBaseline":
        from sklearn.feature_extraction.text import TfidfVectorizer

        from models.scoring import fit_platt

        self.vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(self.n, self.n), lowercase=True,
                                          sublinear_tf=True)
        self.vectorizer.fit([*q1, *q2])
        self.a, self.b = fit_platt(self.cosines(q1, q2), np.asarray(labels, dtype=np.float64))
        return self

    def score_pairs(self, q1: Sequence[str], q2: Sequence[str]) -> np.ndarray:
        from models.scoring import sigmoid

        return sigmoid(self.a * self.cosines(q1, q2) + self.b)


def classifier_table(q1: Sequence[str], q2: Sequence[str], labels: np.ndarray, cos: np.ndarray | None,
                     dev: tuple[Sequence[str], Sequence[str], np.ndarray, np.ndarray | None],
                     siamese: Sequence[str | Path] = (), cosines: Sequence[str] = (),
                     rerankers: Sequence[str | Path] = (), batch_size: int = 256) -> dict[str, dict]:
    """Table-2 rows: {name: classifier_metrics + how its probabilities were made}. `dev` is
    (q1, q2, labels, cosines or None) of the pairs the sigmoids are fitted on; `cosines` are more encoder
    specs, `rerankers` cross-encoder folders."""
    from models.scoring import fit_platt, sigmoid

    d1, d2, dlabels, dcos = dev
    rows: dict[str, dict] = {}

    def cosine_row(test_cos: np.ndarray, dev_cos: np.ndarray) -> dict:
        a, b = fit_platt(np.asarray(dev_cos, dtype=np.float64), dlabels.astype(np.float64))
        return {**classifier_metrics(sigmoid(a * test_cos + b), labels), "sigmoid": [a, b]}

    if cos is not None and dcos is not None:
        rows["cosine"] = cosine_row(cos, dcos)
    for spec in cosines:
        from app.match.assembly import load_configured_encoder
        from app.settings import get_settings

        t0 = time.perf_counter()
        encoder = load_configured_encoder(get_settings(), spec=spec)
        rows[f"cosine:{spec}"] = {**cosine_row(pair_cosines(encoder, q1, q2, batch_size),
                                               pair_cosines(encoder, d1, d2, batch_size)),
                                  "encoder_id": encoder.id, "seconds": round(time.perf_counter() - t0, 1)}
    for folder in rerankers:
        from models.matchers.cross_encoder import load_reranker

        t0 = time.perf_counter()
        reranker = load_reranker(str(folder), device=get_settings().device)
        p = reranker.score_pairs(list(zip(q1, q2)))
        name = f"cross-encoder:{Path(folder).name}"
        rows[name if name not in rows else f"cross-encoder:{folder}"] = {**classifier_metrics(p, labels), "model": str(folder),
                                                      "seconds": round(time.perf_counter() - t0, 1)}
    baseline = CharNgramBaseline().fit(d1, d2, dlabels)
    rows["char_ngram"] = {**classifier_metrics(baseline.score_pairs(q1, q2), labels),
                          "sigmoid": [baseline.a, baseline.b]}
    # (word representation, max_len) -> (words, word vectors by text): computed once for all models alike
    loaded: dict[tuple[str, int], tuple[Any, dict]] = {}
    for folder in siamese:
        from models.matchers.siamese import load_siamese, read_config

        t0 = time.perf_counter()
        config = read_config(Path(folder) / "config.json")
        key = (config.word_repr, config.max_len)
        words, states = loaded.get(key, next(((w, {}) for (k, _), (w, _) in loaded.items() if k == key[0]), (None, {})))
        scorer = load_siamese(folder, words=words, states=states)
        loaded[key] = (scorer.words, states)
        p = scorer.score_pairs(list(zip(q1, q2)))
        name = f"siamese:{Path(folder).name}"
        rows[name if name not in rows else f"siamese:{folder}"] = {**classifier_metrics(p, labels), "model": str(folder),
                                                "encoder": scorer.config.encoder,
                                                "word_repr": scorer.config.word_repr,
                                                "seconds": round(time.perf_counter() - t0, 1)}
    return rows


def run_eval_pairs(pairs_path: str | Path, model: str | None = None, dev_pairs_path: str | Path | None = None,
                   batch_size: int = 256, siamese: Sequence[str | Path] = (), cosines: Sequence[str] = (),
                   rerankers: Sequence[str | Path] = ()) -> dict:
    from app.settings import get_settings
    from app.match.assembly import encoder_spec, load_configured_encoder

    if (siamese or cosines or rerankers) and not dev_pairs_path:
        raise ValueError("Siamese models, other cosines and cross-encoders are compared in the classifier table: "
                         "give --dev-pairs too")
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
    if dev_pairs_path:
        report["classifiers"] = classifier_table(q1, q2, labels, cos, (d1, d2, dlabels, dcos), siamese, cosines,
                                                 rerankers, batch_size)
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
    if report.get("classifiers"):
        lines.append(f"  {'classifier':<34} {'log loss':>8} {'acc':>6} {'P':>6} {'R':>6} {'F1':>6} {'AUC':>6}")
        for name, row in report["classifiers"].items():
            auc = row["roc_auc"] if row["roc_auc"] is not None else float("nan")
            lines.append(f"  {name:<34} {row['log_loss']:8.4f} {row['accuracy']:6.4f} {row['precision']:6.4f} "
                         f"{row['recall']:6.4f} {row['f1']:6.4f} {auc:6.4f}")
    return "\n".join(lines)


def write_pairs_report(report: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
