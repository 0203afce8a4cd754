"""The shared encoder's priority gate: waiters are served by priority, then in arrival order."""
from __future__ import annotations

import threading
import time

from models.encoders.base import PriorityGate


def test_waiters_are_served_by_priority_then_arrival():
    gate = PriorityGate()
    order: list[str] = []
    release = threading.Event()

    def holder():
        with gate.hold(0):
            release.wait(5)

    def waiter(name: str, priority: int):
        with gate.hold(priority):
            order.append(name)

    first = threading.Thread(target=holder)
    first.start()
    time.sleep(0.05)
    threads = []
    for name, priority in [("bulk-1", 1), ("query-1", 0), ("bulk-2", 1), ("query-2", 0)]:
        t = threading.Thread(target=waiter, args=(name, priority))
        t.start()
        threads.append(t)
        time.sleep(0.05)
    release.set()
    for t in [first, *threads]:
        t.join(5)
    assert order[:2] == ["query-1", "query-2"]
    assert sorted(order[2:]) == ["bulk-1", "bulk-2"]
