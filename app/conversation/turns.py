"""A query's place in a conversation: what `context` (the previous turn's FAQ and query) changes about
how it is matched.

- **A follow-up prompt sent back** (a button click): the query is, up to case and spacing, one of the
  previous FAQ's `follow_ups` texts, so its FAQ is the answer, with certainty (score 1.0). Search still
  runs; its list is replaced.
- **Context-only FAQs**: an FAQ marked `context_only` is never a candidate, except for a query whose
  previous FAQ prompts to it.
- **An unknown previous FAQ** (deleted mid-conversation, or never there): the query is matched without
  context, and the response says so.

What the response reports is `context`: {"applied": "none" | "follow_up" | "prompted" | "unknown_previous",
"note": text or null}.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Turn:
    """The previous turn, as a request gives it (either part may be missing)."""

    previous_faq_id: str | None = None
    previous_query: str | None = None

    def key(self) -> tuple:
        return (self.previous_faq_id, self.previous_query)


@dataclass(frozen=True)
class TurnPlan:
    applied: str  # none | follow_up | prompted | unknown_previous
    prompted: frozenset[str] = frozenset()  # the FAQs the previous one prompts to (context-only ones become candidates)
    clicked: str | None = None  # follow_up: the FAQ of the prompt sent back
    prompt: str | None = None  # its text
    note: str | None = None

    def report(self) -> dict:
        return {"applied": self.applied, "note": self.note}


NO_TURN = TurnPlan("none")


def fold_prompt(text: str) -> str:
    return " ".join(text.split()).casefold().rstrip("?!. ")


def plan_turn(turn: Turn | None, query: str, retriever: Any) -> TurnPlan:
    if turn is None or turn.previous_faq_id is None:
        return NO_TURN
    previous = turn.previous_faq_id
    if previous not in (getattr(retriever, "answers", None) or {}):
        return TurnPlan("unknown_previous", note=f"previous_faq_id {previous!r} is not an FAQ of this KB (deleted?): "
                                                 "matched without context")
    details = (getattr(retriever, "details", None) or {}).get(previous)
    follow_ups = list(getattr(details, "follow_ups", None) or [])
    prompted = frozenset(f["faq_id"] for f in follow_ups)
    asked = fold_prompt(query)
    for f in follow_ups:
        if fold_prompt(f["text"]) == asked and f["faq_id"] in retriever.answers:
            return TurnPlan("follow_up", prompted, f["faq_id"], f["text"],
                            note=f"the prompt {f['text']!r} of {previous!r}")
    return TurnPlan("prompted", prompted)
