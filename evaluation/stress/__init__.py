"""The fine-grained stress suite (`pairs.tsv` beside this file) and its evaluation (`faq eval stress`).

Every scorer maps (q1, q2) pairs to a score where higher = more likely the same meaning (a cosine, a
re-ranker probability). Its decision threshold is chosen on the suite's `dev` part (best accuracy,
the midpoint between neighbouring scores) and accuracy is reported per perturbation type and overall
on `test`, so models with differently scaled scores are compared fairly.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

STRESS_FILE = Path(__file__).resolve().parent / "pairs.tsv"
TYPES = ("negation", "inc_dec", "comparative", "role_swap", "numeric", "quantifier", "modal", "direction", "paraphrase")

Scorer = Callable[[Sequence[tuple[str, str]]], np.ndarray]


@dataclass(frozen=True)
class StressPair:
    split: str
    type: str
    label: int
    q1: str
    q2: str


def load_stress(path: str | Path = STRESS_FILE) -> list[StressPair]:
    """Read the suite; a malformed line is an error naming `file:line`."""
    pairs = []
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n").split("\t")
        if header != ["split", "type", "label", "question1", "question2"]:
            raise ValueError(f"{path}:1: header must be split, type, label, question1, question2")
        for line_no, line in enumerate(fh, start=2):
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 5 or cols[0] not in ("dev", "test") or cols[2] not in ("0", "1") or cols[1] not in TYPES:
                raise ValueError(f"{path}:{line_no}: expected dev|test, a known type, 0|1, question1, question2")
            pairs.append(StressPair(cols[0], cols[1], int(cols[2]), cols[3], cols[4]))
    return pairs


def dev_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The threshold with the best dev accuracy (ties: the middle of the best range)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(int)
    uniq = np.unique(s)
    cands = np.concatenate([[uniq[0] - 1e-6], (uniq[:-1] + uniq[1:]) / 2, [uniq[-1] + 1e-6]])
    accs = np.array([np.mean((s >= t).astype(int) == y) for t in cands])
    best = np.flatnonzero(accs == accs.max())
    return float(cands[best[len(best) // 2]])


def evaluate_scorer(pairs: Sequence[StressPair], scores: np.ndarray) -> dict:
    """Threshold on dev, accuracy per type and overall (and F1 of label 1) on test."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.array([p.label for p in pairs])
    dev = np.array([p.split == "dev" for p in pairs])
    test = ~dev
    t = dev_threshold(scores[dev], labels[dev])
    pred = (scores >= t).astype(int)
    per_type = {}
    for kind in TYPES:
        m = test & np.array([p.type == kind for p in pairs])
        if m.any():
            per_type[kind] = {"accuracy": float(np.mean(pred[m] == labels[m])), "n": int(m.sum())}
    tp = int(np.sum((pred == 1) & (labels == 1) & test))
    fp = int(np.sum((pred == 1) & (labels == 0) & test))
    fn = int(np.sum((pred == 0) & (labels == 1) & test))
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return {
        "threshold": t,
        "dev_accuracy": float(np.mean(pred[dev] == labels[dev])),
        "test_accuracy": float(np.mean(pred[test] == labels[test])),
        "test_f1": f1,
        "test_n": int(test.sum()),
        "per_type": per_type,
    }


def run_stress(scorers: dict[str, Scorer | None], path: str | Path = STRESS_FILE) -> dict:
    """Evaluate every scorer (None = not available, reported as n/a)."""
    pairs = load_stress(path)
    report: dict = {"suite": str(path), "n_pairs": len(pairs), "models": {}}
    for name, scorer in scorers.items():
        if scorer is None:
            report["models"][name] = None
            continue
        scores = scorer([(p.q1, p.q2) for p in pairs])
        result = evaluate_scorer(pairs, scores)
        result["scores"] = [round(float(s), 5) for s in scores]
        report["models"][name] = result
    return report


def cosine_scorer(encoder) -> Scorer:
    def score(pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        a = encoder.encode([p[0] for p in pairs])
        b = encoder.encode([p[1] for p in pairs])
        return np.sum(a * b, axis=1)

    return score


def format_table(report: dict) -> str:
    names = list(report["models"])
    lines = ["| type | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def cell(name: str, kind: str | None) -> str:
        r = report["models"][name]
        if r is None:
            return "n/a"
        if kind is None:
            return f"**{r['test_accuracy']:.3f}**"
        return f"{r['per_type'][kind]['accuracy']:.3f}" if kind in r["per_type"] else "-"

    for kind in TYPES:
        lines.append(f"| {kind} | " + " | ".join(cell(n, kind) for n in names) + " |")
    lines.append("| **overall (test)** | " + " | ".join(cell(n, None) for n in names) + " |")
    lines.append("| threshold (dev) | " + " | ".join(
        "n/a" if report["models"][n] is None else f"{report['models'][n]['threshold']:.3f}" for n in names) + " |")
    return "\n".join(lines)


def write_report(report: dict, json_path: str | Path, md_path: str | Path | None = None) -> None:
    Path(json_path).parent.mkdir(parents=True, exist_ok=True)
    Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
    if md_path:
        n_test = next((r["test_n"] for r in report["models"].values() if r), 0)
        md = (f"# Stress suite ({report['n_pairs']} pairs, accuracy on the {n_test} test pairs; "
              f"thresholds chosen on dev)\n\n" + format_table(report) + "\n")
        Path(md_path).write_text(md)
