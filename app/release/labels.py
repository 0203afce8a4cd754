"""A KB's own labels (`/feedback` rows, review picks, dev files), read and scored as serving scores them: the
label gate's top-1 (gate.py) and the decision model refitted on them (`faq index calibrate`, calibration.py).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from app.match.decider import Decider, native_language
from index.decision import Candidate, DecisionModel, Reference, decide, reference_for


def feedback_labels(rows: Sequence[dict]) -> list[tuple[str, str | None]]:
    """(query, right faq_id or None = out of scope) from query-log rows (`FaqStore.read_query_log`): the
    FAQ a user picked (`faq_id` feedback, e.g. a clarify option), the served FAQ confirmed correct, or an
    abstention confirmed correct. A served answer marked wrong without the right FAQ says too little."""
    out: list[tuple[str, str | None]] = []
    for r in rows:
        if r.get("feedback_faq_id"):
            out.append((r["query"], r["feedback_faq_id"]))
        elif r.get("feedback_correct") is True:
            out.append((r["query"], r.get("faq_id")))
    return out


def labelled_rows(first_stage: Any, retriever: Any, labels: Sequence[tuple[str, str | None]],
                  batch_size: int = 64, matches: list | None = None
                  ) -> tuple[list[tuple[str, list[Candidate], str | None, str]], Reference]:
    """Each labelled query's candidates as the model sees them, from a pipeline scoring by the build's
    curve (`first_stage`), with the build's reference for its served (pool, weight); `matches`, when
    given, receives each query's `FaqMatch`es (what a re-ranking stage scores). Each row is (query, candidates,
    gold, the language their words are read in), as serving reads them (`native_language`)."""
    from index.decision import WINDOW

    pool, weight = first_stage.served_pool(retriever), first_stage.served_answer_weight(retriever)
    ref = reference_for(getattr(retriever, "manifest", None), pool, weight)
    if ref is None:
        raise ValueError("the current build has no decision references: rebuild it with `faq index build`")
    plain = Decider(None)
    out = []
    for start in range(0, len(labels), batch_size):
        batch = labels[start:start + batch_size]
        results = first_stage.match([q for q, _ in batch], WINDOW, 1.0, retriever=retriever)
        for (q, gold), r in zip(batch, results):
            words = native_language(q, retriever) or "en"
            out.append((q, plain.candidates(retriever, r.matches, language=words), gold, words))
        if matches is not None:
            matches += [r.matches for r in results]
    return out, ref


def label_scores(model: DecisionModel, rows: Sequence[tuple[str, list[Candidate], str | None, str]], ref: Reference,
                 threshold: float = 0.5) -> dict:
    """Top-1 (in scope), answer precision / recall / F1 at `threshold` and the top answer's mean log loss."""
    right, answered, correct, in_scope, loss = 0, 0, 0, 0, 0.0
    for text, cands, gold, words in rows:
        p = decide(model, text, cands, ref, words)
        order = np.argsort(-p, kind="stable") if model.rerank else np.arange(len(p))
        top = cands[int(order[0])].faq_id if len(p) else None
        q = float(p[order[0]]) if len(p) else 0.0
        ok = top is not None and top == gold
        in_scope += gold is not None
        right += ok and gold is not None
        answered += q >= threshold
        correct += ok and q >= threshold
        loss -= np.log(max(q if ok else 1 - q, 1e-9))
    precision = correct / answered if answered else 0.0
    recall = correct / in_scope if in_scope else 0.0
    return {"top1": right / in_scope if in_scope else 0.0, "precision": precision, "recall": recall,
            "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
            "log_loss": loss / max(len(rows), 1), "n": len(rows)}


def fit_on_labels(prior: DecisionModel, rows: Sequence[tuple[str, list[Candidate], str | None, str]], ref: Reference,
                  strength: float, folds: int = 5, seed: int = 0) -> tuple[DecisionModel, dict]:
    """`prior` refitted on the labelled rows (index/decision.py `refit`), with a `folds`-fold comparison of
    the two on the labels each was not fitted on."""
    from index.decision import WINDOW, features, refit

    def design(part: Sequence) -> tuple[np.ndarray, np.ndarray]:
        Xs, ys = [], []
        for text, cands, gold, words in part:
            head = cands[:WINDOW]
            if head:
                Xs.append(features(text, head, ref, words))
                ys.append(np.array([c.faq_id == gold for c in head], dtype=np.float64))
        if not Xs:
            raise ValueError("none of the labelled queries has a candidate FAQ")
        return np.vstack(Xs), np.concatenate(ys)

    order = np.random.default_rng(seed).permutation(len(rows))
    held: list[tuple[dict, dict]] = []
    if len(rows) >= 2 * folds:
        for k in range(folds):
            test = [rows[i] for i in order[k::folds]]
            train = [rows[i] for i in order if i not in set(order[k::folds].tolist())]
            refitted = refit(prior, *design(train), strength)
            held.append((label_scores(prior, test, ref), label_scores(refitted, test, ref)))
    model = refit(prior, *design(rows), strength, meta={"kb_labels": len(rows), "prior_strength": strength})

    def mean(i: int) -> dict:
        return {k: float(np.mean([h[i][k] for h in held])) for k in ("top1", "f1", "log_loss")} if held else {}

    return model, {"labels": len(rows), "folds": len(held), "cross_kb": mean(0), "refitted": mean(1)}
