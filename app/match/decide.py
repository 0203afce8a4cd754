"""The decision step: each FAQ's probability of being the right answer, then answer, clarify or abstain
with the expected precision of the threshold used (app/match/decider.py `Decider`).

    the decision model over the candidates (with the filter's rivals as evidence, then dropped), in the
    query's language's words -> another language put on the model's scale (multilingual mode's curve)
      -> a turn whose previous FAQ prompts onward: scored with that FAQ as evidence (the conversation's)
      -> the threshold (the request's, else the build's table's for FAQ_TARGET_PRECISION) and the decision

A `+rerank` arm's probability is its stage's (the re-ranking step), and calibration scoring keeps the
build's cosine curve: both are decided on as they come, the table read only where it describes the score.
"""
from __future__ import annotations

from dataclasses import replace

from app.match.arms import uses_stages
from app.match.batch import Batch, Item, Step
from app.match.conversation import in_context


class DecisionStep(Step):
    name = "decision"
    reads = ("request", "matches", "rivals", "plan", "selection", "vec", "batch.served", "batch.pool",
             "batch.weight")
    writes = ("matches", "table", "in_context", "decision", "batch.ref", "batch.table")

    def run(self, batch: Batch) -> None:
        pipeline, decider, build = batch.pipeline, batch.pipeline.decider, batch.served.decisions
        batch.ref = decider.reference(batch.retriever, batch.pool, batch.weight, build) \
            if pipeline.scoring == "model" else None
        batch.table = decider.table(batch.retriever, batch.pool, batch.weight, build) if batch.ref is not None else None
        for item in batch.items:
            item.table = batch.table
            staged = uses_stages(item.request.arm)  # a stage's probability stays the score: the table is not its
            if batch.ref is not None and not staged:
                self.score(batch, item)
            table = None if staged or item.in_context is not None else item.table
            item.decision = decider.decide(item.matches, decider.threshold(item.request.threshold, item.table), table)

    @staticmethod
    def score(batch: Batch, item: Item) -> None:
        """The decision model's probability of each candidate (and the turn model's, in context)."""
        pipeline, request, build = batch.pipeline, item.request, batch.served.decisions
        decider, retriever = pipeline.decider, batch.retriever
        if item.rivals:
            rivaled = sorted(item.matches + item.rivals, key=lambda m: -m.score)
            matches = [m for m in decider.rescore(request.query, rivaled, retriever, batch.ref, build, item.words)
                       if m.faq_id in item.selection.faq_ids]
        else:
            matches = decider.rescore(request.query, item.matches, retriever, batch.ref, build, item.words)
        curve = pipeline.language_curve(request, retriever, item.language)
        if curve is not None:  # the model learnt English queries: put another language's on its scale
            matches = [replace(m, score=curve.apply(m.score)) for m in matches]
            item.table = curve.table
        plan = item.plan
        if plan.applied == "prompted" and pipeline.turn_model is not None and plan.clicked is None:
            item.in_context = in_context(batch, item, matches)
        item.matches = (item.in_context if item.in_context is not None else matches)[: request.top_k]
