"""The re-ranking step: the `+rerank` arms' stages (app/stages) re-score each query's top `rerank_k` FAQs.

Each stage takes the scores so far as its prior; the last stage's probability becomes the score and the
order. The stages pool with the build's cosine curve, not the decision model's probability: a convex pool
of two calibrated probabilities is under-confident (docs/results.md). A stage fitted on the KB's labels
(`faq index calibrate`) is stacked with the decision model instead: P = sigmoid(a * logit p_stage +
b * logit p_model + c).
"""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from app.match.arms import uses_stages
from app.match.batch import Batch, Item, Step
from app.match.request import FaqMatch, NoStagesError
from index.decision import WINDOW


class RerankStep(Step):
    name = "rerank"
    reads = ("request", "matches", "batch.served", "batch.decided", "batch.pool", "batch.weight")
    writes = ("matches",)

    def run(self, batch: Batch) -> None:
        stack = stage_stack(batch) if batch.decided else None
        for item in batch.items:
            if not uses_stages(item.request.arm):
                continue
            grouped = [replace(m, first_score=m.score) for m in item.matches]
            item.matches = stacked(batch, item, grouped, stack) if stack is not None else rerank(batch, item, grouped)


def stage_stack(batch: Batch) -> tuple[float, float, float] | None:
    """(a, b, c) of the single configured stage when the served decision model was fitted with it on this
    KB's labels (`faq index calibrate`), else None."""
    pipeline = batch.pipeline
    model = pipeline.decider.model
    if model is None or len(pipeline.stages) != 1:
        return None
    found = (model.meta.get("stages") or {}).get(pipeline.stages[0].id)
    return tuple(float(x) for x in found) if found else None  # type: ignore[return-value]


def rerank(batch: Batch, item: Item, candidates: list[FaqMatch]) -> list[FaqMatch]:
    """Each stage re-scores the top `rerank_k` FAQs in turn (a stage reading stored vectors reads the
    answering build's)."""
    pipeline, request = batch.pipeline, item.request
    if not pipeline.stages:
        raise NoStagesError()
    head = candidates[: max(request.top_k, pipeline.rerank_k)]
    for stage in pipeline.stages:
        stage = batch.served.stage(stage) if batch.served is not None else stage
        if not head:
            return []
        probs = np.asarray(stage.rescore(request.query, head), dtype=np.float64)
        head = [replace(m, score=float(p)) for m, p in zip(head, probs.tolist())]
        head.sort(key=lambda m: (-m.score, m.faq_id))
    return head[: request.top_k]


def stacked(batch: Batch, item: Item, candidates: list[FaqMatch], stack: tuple[float, float, float]) -> list[FaqMatch]:
    """The `+rerank` arm with a stage fitted on the KB's labels: the decision model's probability and the
    stage's own (weight 1) stacked."""
    from models.scoring import stacked as stack_probabilities

    pipeline, request, served = batch.pipeline, item.request, batch.served
    ref = pipeline.decider.reference(batch.retriever, batch.pool, batch.weight, served.decisions)
    head = pipeline.decider.rescore(request.query, candidates, batch.retriever, ref, served.decisions, item.words)[
        : max(request.top_k, WINDOW)]
    if not head:
        return []
    pure = served.pure_stage
    if pure is None or pure.id != pipeline.stages[0].id:  # the stage alone (weight 1), made once per build
        pure = served.pure_stage = copy.copy(served.stage(pipeline.stages[0]))
        pure.weight = 1.0
    p_stage = np.asarray(pure.rescore(request.query, head), dtype=np.float64)
    p = stack_probabilities(stack, p_stage, np.array([m.score for m in head]))
    out = [replace(m, first_score=m.score, score=float(x)) for m, x in zip(head, p.tolist())]
    out.sort(key=lambda m: (-m.score, m.faq_id))
    return out[: request.top_k]
