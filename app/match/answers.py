"""The answers step: each query's `MatchResult`. A follow-up prompt sent back is answered with its FAQ,
certain (score 1.0), whatever the search thought of its words; small talk is answered in the KB's voice,
the FAQs still listed for the curious; the other queries as decided.

The answer's text in the query's language, its metadata and follow-ups are added at the edge
(app/api/service.py), from the snapshot of the KB the answering retriever reflects.
"""
from __future__ import annotations

from app.match.batch import Batch, Item, Step
from app.match.request import FaqMatch, MatchResult


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
