"""Waiting in a test for a condition, never for a fixed time: `poll` and `until` check a predicate until a
deadline (the only sleep here is the pause between two checks)."""
from __future__ import annotations

import time
from typing import Callable


def poll(predicate: Callable[[], object], timeout_s: float, every_s: float = 0.02) -> bool:
    """Whether `predicate()` became true before `timeout_s` passed (checked at once, then every `every_s`)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True


def until(predicate: Callable[[], object], timeout_s: float = 30.0, what: str = "the condition",
          every_s: float = 0.02) -> None:
    """Return as soon as `predicate()` is true; fail the test naming `what` when `timeout_s` passes first."""
    assert poll(predicate, timeout_s, every_s), f"{what} did not happen within {timeout_s:g} s"
