"""app/traffic.py on hand-made query-log rows, and the store read behind it (QueryLogStore.traffic_rows)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from app.traffic import (Stats, chart, nice_ceiling, outcome, percentile, summarize, wilson, window_bounds)

NOW = datetime(2026, 11, 26, 9, 30, tzinfo=timezone.utc)


def row(hours_ago: float, arm: str | None = "ann", decision: str | None = "answer", faq_id: str | None = "refund",
        latency_ms: float | None = 10.0, correct: bool | None = None, named: str | None = None) -> dict:
    if decision in ("clarify", "abstain") and faq_id == "refund":
        faq_id = None
    return {"created_at": NOW - timedelta(hours=hours_ago), "arm": arm, "faq_id": faq_id, "decision": decision,
            "latency_ms": latency_ms, "feedback_correct": correct, "feedback_faq_id": named}


def test_windows_are_whole_hours_or_utc_days_ending_with_now():
    assert window_bounds("24h", NOW) == (datetime(2026, 11, 25, 10, tzinfo=timezone.utc),
                                         datetime(2026, 11, 26, 10, tzinfo=timezone.utc), timedelta(hours=1))
    start, end, step = window_bounds("7d", NOW)
    assert (start, end, step) == (datetime(2026, 11, 20, tzinfo=timezone.utc), datetime(2026, 11, 27, tzinfo=timezone.utc),
                                  timedelta(days=1))
    assert len(summarize([], "30d", NOW).bucket_starts) == 30
    assert len(summarize([], "24h", NOW).bucket_starts) == 24


def test_rates_per_arm_and_bucket():
    rows = [row(0.1), row(0.2, decision="clarify"), row(0.3, decision="abstain"), row(0.4),
            row(2.5, arm="lexical", decision="abstain"), row(2.6, arm=None)]
    traffic = summarize(rows, "24h", NOW)
    assert [a.arm for a in traffic.arms] == ["ann", "(none)", "lexical"], "most requests first, then by name"
    ann = traffic.arms[0]
    assert (ann.total.requests, ann.total.answer_rate, ann.total.clarify_rate, ann.total.abstain_rate) == (4, .5, .25, .25)
    assert ann.buckets[-1].requests == 4 and sum(b.requests for b in ann.buckets) == 4
    lexical = traffic.arms[2]
    assert lexical.buckets[-3].abstain_rate == 1.0 and lexical.buckets[-1].requests == 0
    assert lexical.buckets[-1].answer_rate is None, "an empty bucket has no value, not 0"
    assert traffic.requests == 6


def test_rows_outside_the_window_are_skipped():
    traffic = summarize([row(24.6), row(0.1), row(-1)], "24h", NOW)
    assert traffic.requests == 1


def test_accuracy_counts_feedback_as_faq_eval_online_does():
    rows = [row(1, correct=True), row(1, correct=False),
            row(1, named="refund"),  # only a faq_id, naming the FAQ answered: right
            row(1, named="shipping"),  # only a faq_id, naming another: wrong
            row(1, correct=True, named="shipping"),  # `correct` decides when sent
            row(1, decision="abstain", named="refund"),  # feedback on no answer: counted, not judged
            row(1)]
    total = summarize(rows, "24h", NOW).arms[0].total
    assert (total.feedback, total.judged, total.correct) == (6, 5, 3)
    assert total.accuracy == pytest.approx(0.6)
    assert summarize([row(1), row(1, decision="abstain", correct=False)], "24h", NOW).arms[0].total.accuracy is None


def test_rows_without_a_decision_count_by_their_faq():
    assert outcome({"decision": None, "faq_id": "x"}) == "answer"
    assert outcome({"decision": None, "faq_id": None}) == "abstain"
    traffic = summarize([row(1, decision=None), row(1, decision=None, faq_id=None), row(1, decision="abstain")],
                        "24h", NOW)
    total = traffic.arms[0].total
    assert (total.answered, total.abstained, total.undecided) == (1, 2, 1)
    assert traffic.undecided == 1


def test_latency_percentiles_and_wilson():
    total = summarize([row(1, latency_ms=float(ms)) for ms in range(1, 101)] + [row(1, latency_ms=None)],
                      "24h", NOW).arms[0].total
    assert total.p50 == pytest.approx(50.5) and total.p95 == pytest.approx(95.05)
    assert percentile([], 50) is None and percentile([7.0], 95) == 7.0
    assert Stats().p50 is None and Stats().answer_rate is None and Stats().answer_rate_ci is None
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson(0, 0) is None and wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0


def test_chart_breaks_lines_at_empty_buckets():
    rows = [row(h) for h in (0.5, 1.5, 2.5, 5.5, 9.5, 10.5)] + [row(h, arm="lexical") for h in (0.5, 3.5)]
    traffic = summarize(rows, "24h", NOW)
    c = chart(traffic, "answer-rate")
    ann, lexical = c.series
    assert (ann.arm, lexical.arm) == ("ann", "lexical")
    assert len(ann.points) == 6 and len(lexical.points) == 2
    # runs: hours -10..-9 and -2..0 are lines; the lone hour -5 is a dot only
    assert [len(s.split()) for s in ann.segments] == [2, 3]
    assert lexical.segments == [], "two points with a gap between make two dots, no line"
    assert all(c.left <= p.x <= c.right and c.top <= p.y <= c.bottom for p in ann.points)
    assert all(p.y == c.top for p in ann.points), "a 100% answer rate is the top of the plot"
    assert [label for _, label in c.y_ticks] == ["0%", "25%", "50%", "75%", "100%"]
    assert len(c.x_labels) == 6 and c.x_labels[-1][1] == "09:00"
    assert len(c.rows) == 24 and c.rows[-1][1] == ["100.0%", "100.0%"] and c.rows[0][1] == ["–", "–"]
    accuracy = chart(traffic, "accuracy")
    assert accuracy.empty, "no feedback: no values, and no line pretending 0%"


def test_latency_chart_axis_is_rounded_up():
    traffic = summarize([row(1, latency_ms=37.0), row(2, latency_ms=12.0)], "24h", NOW)
    c = chart(traffic, "latency-p50")
    assert c.y_ticks[-1] == (c.top, "50 ms") and c.y_ticks[0] == (c.bottom, "0")
    assert [nice_ceiling(v) for v in (0.3, 1, 1.2, 2.2, 4, 7, 99)] == [0.5, 1, 2, 2.5, 5, 10, 100]


def test_store_reads_this_kbs_window_newest_first_capped(store):
    store.catalog.create("other")
    base = datetime(2026, 11, 20, tzinfo=timezone.utc)
    store.log_queries([{"request_id": f"r{i}", "query": "q", "created_at": base + timedelta(hours=i), "arm": "ann",
                        "faq_id": "refund", "decision": "answer", "latency_ms": 5.0} for i in range(10)])
    store.for_kb("other").log_queries([{"request_id": "x", "query": "q", "created_at": base + timedelta(hours=3)}])
    found = store.query_log.traffic_rows(base + timedelta(hours=2), base + timedelta(hours=8))
    assert [r["created_at"].hour for r in found.rows] == [2, 3, 4, 5, 6, 7] and not found.capped
    assert set(found.rows[0]) == {"created_at", "arm", "faq_id", "decision", "latency_ms", "feedback_correct",
                                  "feedback_faq_id"}
    assert found.rows[0]["created_at"].tzinfo is not None
    capped = store.query_log.traffic_rows(base, limit=4)
    assert capped.capped and [r["created_at"].hour for r in capped.rows] == [6, 7, 8, 9], "the newest, oldest first"
    assert not store.query_log.traffic_rows(base, limit=10).capped
    traffic = summarize(capped.rows, "7d", base + timedelta(hours=9), capped=capped.capped)
    assert traffic.capped and traffic.first_read == base + timedelta(hours=6) and traffic.requests == 4
