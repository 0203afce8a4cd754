"""The shared encoder's priority gate: waiters are served by priority, then in arrival order."""
from __future__ import annotations

import threading

from models.encoders.base import PriorityGate
from tests.helpers.waiting import until


def test_waiters_are_served_by_priority_then_arrival():
    gate = PriorityGate()
    order: list[str] = []
    held, release = threading.Event(), threading.Event()

    def holder():
        with gate.hold(0):
            held.set()
            release.wait(5)

    def waiter(name: str, priority: int):
        with gate.hold(priority):
            order.append(name)

    first = threading.Thread(target=holder)
    first.start()
    assert held.wait(5)
    threads = []
    for n, (name, priority) in enumerate([("bulk-1", 1), ("query-1", 0), ("bulk-2", 1), ("query-2", 0)], start=1):
        t = threading.Thread(target=waiter, args=(name, priority))
        t.start()
        threads.append(t)
        # arrival order is the order the tickets were taken: the next waiter starts only once this one queues
        until(lambda n=n: len(gate._waiting) == n)
    release.set()
    for t in [first, *threads]:
        t.join(5)
    assert order == ["query-1", "query-2", "bulk-1", "bulk-2"]
