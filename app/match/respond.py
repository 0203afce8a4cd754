"""The last three steps: small talk recognised, the decision, the answers.

The conversation step: small talk ("hi", "thanks", "are you a bot?") recognised so it is answered in the KB's
voice, not matched (app/conversation/small_talk); and a turn whose previous FAQ is known scored with that FAQ as
evidence (index/turns.py's model), which the decision step asks for (`in_context`).

The decision step: each FAQ's probability of being the right answer, then answer, clarify or abstain with the
expected precision of the threshold used (app/match/decider.py `Decider`).

    the decision model over the candidates (with the filter's rivals as evidence, then dropped), in the
    query's language's words -> another language put on the model's scale (multilingual mode's curve)
      -> a turn whose previous FAQ prompts onward: scored with that FAQ as evidence (the conversation's)
      -> the threshold (the request's, else the build's table's for FAQ_TARGET_PRECISION) and the decision

A `+rerank` arm's probability is its stage's (the re-ranking step), and FAQ_SCORING=calibration keeps the
build's cosine curve: both are decided on as they come, the table read only where it describes the score.

The answers step: each query's `MatchResult`. A follow-up prompt sent back is answered with its FAQ, certain
(score 1.0), whatever the search thought of its words; small talk is answered in the KB's voice, the FAQs still
listed for the curious; the other queries as decided. The answer's text in the query's language, its metadata
and follow-ups are added at the edge (app/api/service.py), from the snapshot of the KB the answering retriever
reflects.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from app.match.arms import uses_stages
from app.match.batch import Batch, Item, Step
from app.match.request import FaqMatch, MatchResult
from index.candidates import RetrieverLike
from index.decision import WINDOW
from index.turns import FEATURES, TurnCandidates, first_question
from index.turns import candidates as turn_candidates


class ConversationStep(Step):
    name = "conversation"
    reads = ("request", "batch.vecs")
    writes = ("reply",)

    def run(self, batch: Batch) -> None:
        small_talk = batch.pipeline.small_talk
        if small_talk is None:
            return
        replies = small_talk.replies([item.request.query for item in batch.items], batch.vecs)
        for item, reply in zip(batch.items, replies):
            item.reply = reply


def candidates_in_context(query: str, previous: str, scored: Sequence[FaqMatch], retriever: RetrieverLike,
                          vec: np.ndarray, selection: Any = None, shut: frozenset[str] = frozenset(),
                          prompted: frozenset[str] = frozenset()) -> TurnCandidates | None:
    """The turn model's candidates for `query` after the FAQ `previous`, from the decision model's scored
    window of the query alone; None when the build has no answer vectors to compare FAQs by."""
    vectors = getattr(retriever, "answer_vectors", None)
    if vectors is None or previous not in vectors.row_of:
        return None
    answer_cos = vectors.cosines(vec[None, :])[0]
    prev_sim = vectors.vectors @ vectors.vectors[vectors.row_of[previous]]
    alone = {m.faq_id: m.score for m in scored[:WINDOW]}
    return turn_candidates(query, previous, alone, vectors.faq_ids, answer_cos, prev_sim,
                           None if selection is None else selection.faq_ids, shut, prompted)


def in_context(batch: Batch, item: Item, scored: list[FaqMatch]) -> list[FaqMatch] | None:
    """The candidates of a turn whose previous FAQ is known, scored by the turn model and best first; None
    when the turn model cannot score them."""
    turn_model, retriever, plan = batch.pipeline.turn_model, batch.retriever, item.plan
    assert turn_model is not None and item.request.turn is not None
    found = candidates_in_context(item.request.query, item.request.turn.previous_faq_id, scored, retriever,
                                  item.vec, item.selection, item.shut, plan.prompted)
    if found is None or not found.faq_ids:
        return None
    probs = turn_model.prob(found.x)
    by_id = {m.faq_id: m for m in scored}
    cos = found.x[:, FEATURES.index("answer_cos")]
    out = []
    for faq_id, p, c in zip(found.faq_ids, probs.tolist(), cos.tolist()):
        m = by_id.get(faq_id)
        if m is None:
            m = FaqMatch(faq_id=faq_id, question=first_question(retriever, faq_id),
                         answer=retriever.answers[faq_id][0], score=0.0, cosine=c, answer_cosine=c)
        out.append(replace(m, score=float(p)))
    out.sort(key=lambda m: -m.score)
    return out


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


class AnswersStep(Step):
    name = "answers"
    reads = ("request", "matches", "decision", "plan", "selection", "reply", "in_context")
    writes = ("result",)

    def run(self, batch: Batch) -> None:
        for item in batch.items:
            item.result = self.result(batch, item)

    @staticmethod
    def result(batch: Batch, item: Item) -> MatchResult:
        request, plan, decision, matches = item.request, item.plan, item.decision, item.matches
        assert decision is not None
        answer = matches[0] if decision.kind == "answer" else None
        kind, options, expected = decision.kind, list(decision.options), decision.expected_precision
        if plan.clicked is not None and (item.selection is None or plan.clicked in item.selection.faq_ids):
            found = next((m for m in matches if m.faq_id == plan.clicked), None)
            answer = FaqMatch(faq_id=plan.clicked, question=plan.prompt or request.query,
                              answer=batch.retriever.answers[plan.clicked][0], score=1.0,
                              cosine=found.cosine if found else 1.0)
            matches = [answer] + [m for m in matches if m.faq_id != plan.clicked][: request.top_k - 1]
            kind, options, expected = "answer", [], None
        elif item.reply is not None:
            answer, kind, options, expected = None, "chitchat", [], None
        context = plan.report() if item.in_context is None else {
            "applied": plan.applied,
            "note": f"scored with the previous FAQ {request.turn.previous_faq_id!r} as evidence"}
        return MatchResult(query=request.query, matches=matches, answer=answer, decision=kind, options=options,
                           threshold=decision.threshold, expected_precision=expected, context=context,
                           small_talk=None if item.reply is None or kind != "chitchat" else item.reply.as_dict(),
                           index_version=str(batch.retriever.version))
