"""The shipped small-talk answers (answers.json, one list per persona and kind) and the lookup that lets a
KB's own edited answers take precedence over them.

This module sits below the API: it reads a JSON file and nothing of the service, so the request path, the
console and the evaluations can all use it."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

ANSWERS_FILE = Path(__file__).resolve().parent / "answers.json"

# The order is the contract's: clients and the console list kinds in it
KINDS: tuple[str, ...] = (
    "greeting",
    "thanks",
    "goodbye",
    "bot_identity",
    "how_are_you",
    "praise",
    "complaint",
    "acknowledgement",
    "help",
)
PERSONAS: tuple[str, ...] = ("professional", "friendly", "witty")


@lru_cache(maxsize=1)
def read_file() -> dict:
    return json.loads(ANSWERS_FILE.read_text(encoding="utf-8"))


def load_answers() -> dict:
    """`{"personas": {persona: {kind: [answer, ...]}}}`; a copy, so a caller editing it changes nothing shared."""
    return copy.deepcopy(read_file())


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown small-talk kind {kind!r}; expected one of: {', '.join(KINDS)}")


def answer(kind: str, persona: str, overrides: dict[str, list[str]] | None = None, pick: int = 0) -> str:
    """One answer for `kind` in `persona`: the KB's own answers for the kind when `overrides` has a non-empty
    list for it, else the shipped ones. `pick` chooses the variant and wraps around, so a caller can rotate
    through them with a counter."""
    check_kind(kind)
    if persona not in PERSONAS:
        raise ValueError(f"unknown small-talk persona {persona!r}; expected one of: {', '.join(PERSONAS)}")
    for key in overrides or {}:
        check_kind(key)
    candidates = (overrides or {}).get(kind) or read_file()["personas"][persona][kind]
    return candidates[pick % len(candidates)]
