"""Matching metrics over FAQs, not variants (the pipeline already groups variants by faq_id):
- top-1 accuracy, MRR, recall@5, nDCG@10: over in-scope queries (gold faq_id not null), from the ranked FAQ list;
- answer precision = correct answers / answered queries (answering an out-of-scope query is wrong);
- answer recall = correct answers / answerable (in-scope) queries; answer F1 their harmonic mean;
- out-of-scope recall = out-of-scope queries left unanswered / out-of-scope queries.
Pure functions of `QueryOutcome`s, shared by every evaluation command; and the metrics of one ranked list
of candidates with 0/1 labels (MRR, nDCG, P@1: answer selection, where a question may have several
right answers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

RECALL_K = 5
NDCG_K = 10



@dataclass(frozen=True)
class QueryOutcome:
    """What the matcher did with one labelled query."""

    gold: str | None  # expected faq_id; None = out of scope (should get no answer)
    ranked: tuple[str, ...]  # faq_ids, best first
    top_score: float | None  # calibrated score of ranked[0] (None when nothing was retrieved)
    answer: str | None  # the faq_id answered, None when the query was left unanswered


def rank_of(gold: str, ranked: Sequence[str]) -> int | None:
    """1-based rank of `gold` in `ranked`, None when absent."""
    for position, faq_id in enumerate(ranked, start=1):
        if faq_id == gold:
            return position
    return None


def _in_scope(outcomes: Sequence[QueryOutcome]) -> list[QueryOutcome]:
    return [o for o in outcomes if o.gold is not None]


def top1_accuracy(outcomes: Sequence[QueryOutcome]) -> float:
    scoped = _in_scope(outcomes)
    return sum(bool(o.ranked) and o.ranked[0] == o.gold for o in scoped) / len(scoped) if scoped else 0.0


def mean_reciprocal_rank(outcomes: Sequence[QueryOutcome]) -> float:
    scoped = _in_scope(outcomes)
    if not scoped:
        return 0.0
    total = 0.0
    for o in scoped:
        r = rank_of(o.gold, o.ranked)
        total += 1.0 / r if r else 0.0
    return total / len(scoped)


def recall_at_k(outcomes: Sequence[QueryOutcome], k: int = RECALL_K) -> float:
    scoped = _in_scope(outcomes)
    return sum(o.gold in o.ranked[:k] for o in scoped) / len(scoped) if scoped else 0.0


def ndcg_at_k(outcomes: Sequence[QueryOutcome], k: int = NDCG_K) -> float:
    """nDCG@k with one relevant FAQ per in-scope query: 1/log2(rank+1) when ranked within k."""
    scoped = _in_scope(outcomes)
    if not scoped:
        return 0.0
    total = 0.0
    for o in scoped:
        r = rank_of(o.gold, o.ranked[:k])
        total += 1.0 / math.log2(r + 1) if r else 0.0
    return total / len(scoped)


def f1_score(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def answer_metrics(outcomes: Sequence[QueryOutcome]) -> dict[str, float | int]:
    """Precision / recall / F1 of the answer decisions, and out-of-scope recall."""
    answered = [o for o in outcomes if o.answer is not None]
    correct = sum(o.answer == o.gold for o in answered)  # gold None never equals an answer
    answerable = sum(o.gold is not None for o in outcomes)
    oos = [o for o in outcomes if o.gold is None]
    oos_unanswered = sum(o.answer is None for o in oos)
    precision = correct / len(answered) if answered else 0.0
    recall = correct / answerable if answerable else 0.0
    return {
        "answer_precision": precision,
        "answer_recall": recall,
        "answer_f1": f1_score(precision, recall),
        "oos_recall": oos_unanswered / len(oos) if oos else None,  # None: no out-of-scope queries
        "n_answered": len(answered),
        "n_correct": correct,
        "n_answerable": answerable,
        "n_oos": len(oos),
        "n_oos_unanswered": oos_unanswered,
    }


def all_metrics(outcomes: Sequence[QueryOutcome], k: int = RECALL_K) -> dict[str, float | int]:
    return {
        "n_queries": len(outcomes),
        "n_in_scope": len(_in_scope(outcomes)),
        "top1_accuracy": top1_accuracy(outcomes),
        "mrr": mean_reciprocal_rank(outcomes),
        f"recall_at_{k}": recall_at_k(outcomes, k),
        **answer_metrics(outcomes),
    }


def reliability(scores: Sequence[float], right: Sequence[bool], bins: int = 10) -> tuple[float, list[dict]]:
    """(ECE, the reliability bins) of scores against whether each was right: equal-width bins, |mean score -
    share right| weighted by the bin's share of the scores."""
    s = np.asarray(scores, dtype=np.float64)
    r = np.asarray(right, dtype=np.float64)
    which = np.minimum((s * bins).astype(int), bins - 1)  # a score of exactly 1 joins the last bin
    total, rows = 0.0, []
    for b in range(bins):
        inside = which == b
        if inside.any():
            mean, share = float(s[inside].mean()), float(r[inside].mean())
            total += inside.sum() / len(s) * abs(mean - share)
            rows.append({"bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}", "n": int(inside.sum()), "mean_p": mean,
                         "accuracy": share})
    return float(total), rows


def expected_calibration_error(outcomes: Sequence[QueryOutcome], bins: int = 10) -> float | None:
    """ECE of the top match's score; an out-of-scope query's top match is never right. None when nothing
    was retrieved."""
    scored = [(o.top_score, bool(o.ranked) and o.ranked[0] == o.gold) for o in outcomes if o.top_score is not None]
    if not scored:
        return None
    return reliability([s for s, _ in scored], [r for _, r in scored], bins)[0]


def apply_threshold(outcomes: Sequence[QueryOutcome], threshold: float) -> list[QueryOutcome]:
    """The same outcomes with the answer decided as the Matcher does: best FAQ iff score >= threshold."""
    return [
        replace(o, answer=o.ranked[0] if o.ranked and o.top_score is not None and o.top_score >= threshold else None)
        for o in outcomes
    ]


def tune_threshold(outcomes: Sequence[QueryOutcome]) -> tuple[float, float]:
    """The answer threshold maximising answer F1 on `outcomes` -> (threshold, F1): models/scoring.py
    `best_threshold` over the top scores, a pass being right when the top FAQ is the gold one, recall
    counted over every answerable query (ties go to the higher threshold: fewer wrong answers to
    out-of-scope queries)."""
    from models.scoring import best_threshold

    scored = [o for o in outcomes if o.ranked and o.top_score is not None]
    answerable = sum(o.gold is not None for o in outcomes)
    if not scored or answerable == 0:
        return 1.0, 0.0
    return best_threshold([o.top_score for o in scored], [o.ranked[0] == o.gold for o in scored],
                          objective="f1", n_relevant=answerable)


def outcomes_from_results(results: Sequence[Any], golds: Sequence[str | None]) -> list[QueryOutcome]:
    """Matcher `MatchResult`s + gold labels -> outcomes."""
    out = []
    for result, gold in zip(results, golds):
        ranked = tuple(m.faq_id for m in result.matches)
        top = float(result.matches[0].score) if result.matches else None
        out.append(QueryOutcome(gold, ranked, top, result.answer.faq_id if result.answer is not None else None))
    return out


# ------------------------------------------------------------------------------------------------
# metrics of one ranked list (scores, 0/1 labels); ties keep the given order


def _order(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def reciprocal_rank(scores: Sequence[float] | np.ndarray, labels: Sequence[int]) -> float:
    """1 / the rank of the first correct candidate; 0 without one."""
    y = np.asarray(labels)[_order(scores)]
    hits = np.flatnonzero(y > 0)
    return 1.0 / (hits[0] + 1) if len(hits) else 0.0


def ndcg(scores: Sequence[float] | np.ndarray, labels: Sequence[int]) -> float:
    """nDCG over the whole list, binary gains: sum 1/log2(1 + rank) over the correct candidates, divided
    by the same sum with them ranked first; 0 without one."""
    y = np.asarray(labels, dtype=np.float64)[_order(scores)]
    discounts = 1.0 / np.log2(np.arange(2, len(y) + 2))
    ideal = float(np.sum(discounts[: int(y.sum())]))
    return float(np.sum(y * discounts)) / ideal if ideal > 0 else 0.0


def precision_at_1(scores: Sequence[float] | np.ndarray, labels: Sequence[int]) -> float:
    if len(labels) == 0:
        return 0.0
    return float(np.asarray(labels)[_order(scores)[0]] > 0)
