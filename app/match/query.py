"""The query step: what a query asks for before anything is searched: its filter as the build's selection,
and its place in the conversation (app/conversation/turns.py `plan_turn`: a follow-up prompt sent back, the context-only
FAQs its previous FAQ opens, an unknown previous FAQ).

Its language is read once, on first use (`Item.language`): the service hands its detection of the client's
words in; evaluations that give none are detected there.
"""
from __future__ import annotations

from app.match.batch import Batch, Step
from app.conversation.turns import plan_turn


class QueryStep(Step):
    name = "query"
    reads = ("request", "retriever")
    writes = ("selection", "plan")

    def run(self, batch: Batch) -> None:
        for item in batch.items:
            item.selection = item.request.selection(batch.retriever)
            item.plan = plan_turn(item.request.turn, item.request.query, batch.retriever)
