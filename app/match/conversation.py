"""The conversation step: small talk ("hi", "thanks", "are you a bot?") recognised so it is answered in the
KB's voice, not matched (app/conversation/small_talk); and a turn whose previous FAQ is known scored with that FAQ as
evidence (index/turns.py's model), which the decision step asks for (`in_context`).

What the previous turn changes before the search (a prompt sent back, the context-only FAQs it opens) is
the query step's (app/conversation/turns.py `plan_turn`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from app.match.batch import Batch, Item, Step
from app.match.request import FaqMatch
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
