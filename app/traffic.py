"""A KB's traffic over time, per A/B arm, from its query log: what the console's Traffic page shows.

`summarize(rows, window, now)` buckets logged /match queries (hourly over 24 h, daily over 7 or 30 days)
and counts, per arm and bucket and per arm in total: requests, answer / clarify / abstain / small-talk
rates, feedback, accuracy and latency percentiles. `chart(traffic, metric)` turns one metric into SVG geometry
(points in a fixed viewBox, axis ticks, one polyline per run of non-empty buckets).

The numbers mean what `faq eval online` (evaluation/online.py) means by them, which this module cannot
import (the service sits below evaluation): a request is answered when it was served an FAQ; feedback is
correct when `correct` was true, or when only `faq_id` was sent and it names the FAQ answered; accuracy
is correct / answered requests with feedback. Rows logged before the decision was kept (decision NULL)
count as answered when they name an FAQ and as abstained otherwise, since clarify was not told apart then.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

#: window name -> (length, bucket)
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "24h": (timedelta(hours=24), timedelta(hours=1)),
    "7d": (timedelta(days=7), timedelta(days=1)),
    "30d": (timedelta(days=30), timedelta(days=1)),
}
DEFAULT_WINDOW = "7d"
NO_ARM = "(none)"  # rows logged without an arm, named as `faq eval online` names them
#: 97.5th percentile of the standard normal: a two-sided 95% interval
Z95 = 1.959963984540054

# the charts' viewBox and the plot area inside it (room for the axes' labels)
WIDTH, HEIGHT = 600, 220
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 10, 30


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval of a proportion (evaluation/online.py has the same at any confidence)."""
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) of sorted values, interpolated between ranks as numpy's default does."""
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def outcome(row: Mapping[str, Any]) -> str:
    """answer | clarify | abstain | chitchat; a row without a decision is an answer when it names an FAQ."""
    decision = row.get("decision")
    if decision in ("answer", "clarify", "abstain", "chitchat"):
        return decision
    return "answer" if row.get("faq_id") is not None else "abstain"


def judged(row: Mapping[str, Any]) -> bool | None:
    """Whether the answer was right by its feedback; None when nothing was answered or judged."""
    faq = row.get("faq_id")
    correct, named = row.get("feedback_correct"), row.get("feedback_faq_id")
    if faq is None or (correct is None and named is None):
        return None
    if correct is not None:
        return bool(correct)
    return named == faq


@dataclass
class Stats:
    """The counts of some logged queries (one arm, one bucket or the whole window)."""

    requests: int = 0
    answered: int = 0
    clarified: int = 0
    abstained: int = 0
    undecided: int = 0  # of `abstained`: no decision logged and no FAQ named
    small_talk: int = 0  # answered as small talk: neither an answer nor an abstention
    feedback: int = 0
    judged: int = 0
    correct: int = 0
    latencies: list[float] = field(default_factory=list)

    def add(self, row: Mapping[str, Any]) -> None:
        self.requests += 1
        kind = outcome(row)
        if kind == "answer":
            self.answered += 1
        elif kind == "clarify":
            self.clarified += 1
        elif kind == "chitchat":
            self.small_talk += 1
        else:
            self.abstained += 1
            if row.get("decision") is None:
                self.undecided += 1
        if row.get("feedback_correct") is not None or row.get("feedback_faq_id") is not None:
            self.feedback += 1
        verdict = judged(row)
        if verdict is not None:
            self.judged += 1
            self.correct += verdict
        if row.get("latency_ms") is not None:
            self.latencies.append(float(row["latency_ms"]))

    def _rate(self, count: int) -> float | None:
        return count / self.requests if self.requests else None

    @property
    def answer_rate(self) -> float | None:
        return self._rate(self.answered)

    @property
    def clarify_rate(self) -> float | None:
        return self._rate(self.clarified)

    @property
    def abstain_rate(self) -> float | None:
        return self._rate(self.abstained)

    @property
    def small_talk_rate(self) -> float | None:
        return self._rate(self.small_talk)

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.judged if self.judged else None

    @property
    def answer_rate_ci(self) -> tuple[float, float] | None:
        return wilson(self.answered, self.requests)

    @property
    def accuracy_ci(self) -> tuple[float, float] | None:
        return wilson(self.correct, self.judged)

    def latency(self, q: float) -> float | None:
        return percentile(sorted(self.latencies), q)

    @property
    def p50(self) -> float | None:
        return self.latency(50)

    @property
    def p95(self) -> float | None:
        return self.latency(95)


@dataclass
class ArmTraffic:
    arm: str
    index: int  # its place in the page's arms: the chart style arm-<index % 6>
    total: Stats
    buckets: list[Stats]  # one per bucket of the window; an empty one has requests == 0


@dataclass
class Traffic:
    window: str
    start: datetime  # the first bucket's start (UTC)
    end: datetime  # the last bucket's end
    step: timedelta
    bucket_starts: list[datetime]
    arms: list[ArmTraffic]
    capped: bool = False  # more rows than were read: the oldest part of the window is missing
    first_read: datetime | None = None  # the oldest row read

    @property
    def requests(self) -> int:
        return sum(a.total.requests for a in self.arms)

    @property
    def undecided(self) -> int:
        return sum(a.total.undecided for a in self.arms)

    def bucket_label(self, start: datetime) -> str:
        return start.strftime("%H:00") if self.step < timedelta(days=1) else start.strftime("%b %d")

    def bucket_title(self, start: datetime) -> str:
        """The bucket in full, for tables and tooltips."""
        if self.step < timedelta(days=1):
            return f"{start:%Y-%m-%d %H:00}–{start + self.step:%H:00} UTC"
        return f"{start:%Y-%m-%d} UTC"


def window_bounds(window: str, now: datetime) -> tuple[datetime, datetime, timedelta]:
    """(start, end, step) of a window ending with the bucket that holds `now`: whole hours or UTC days,
    so a bucket means the same hour or day whenever the page is loaded."""
    length, step = WINDOWS[window]
    now = now.astimezone(timezone.utc)
    if step < timedelta(days=1):
        floor = now.replace(minute=0, second=0, microsecond=0)
    else:
        floor = now.replace(hour=0, minute=0, second=0, microsecond=0)
    end = floor + step
    return end - length, end, step


def summarize(rows: Iterable[Mapping[str, Any]], window: str, now: datetime, capped: bool = False) -> Traffic:
    """Rows (keys of QueryLogStore.traffic_rows) bucketed per arm; rows outside the window are skipped.
    Arms are ordered by their requests, most first, so the biggest keeps the first colour."""
    start, end, step = window_bounds(window, now)
    n = round((end - start) / step)
    starts = [start + i * step for i in range(n)]
    per_arm: dict[str, tuple[Stats, list[Stats]]] = {}
    first_read = None
    for row in rows:
        created = row["created_at"]
        if created.tzinfo is None:
            created = created.replace(tzinfo=timezone.utc)
        if not start <= created < end:
            continue
        if first_read is None or created < first_read:
            first_read = created
        arm = row.get("arm") or NO_ARM
        if arm not in per_arm:
            per_arm[arm] = (Stats(), [Stats() for _ in range(n)])
        total, buckets = per_arm[arm]
        total.add(row)
        buckets[int((created - start) / step)].add(row)
    ordered = sorted(per_arm.items(), key=lambda item: (-item[1][0].requests, item[0]))
    arms = [ArmTraffic(arm, i, total, buckets) for i, (arm, (total, buckets)) in enumerate(ordered)]
    return Traffic(window, start, end, step, starts, arms, capped=capped, first_read=first_read)


# -- charts ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Metric:
    key: str  # the chart's id: chart-<key>
    title: str
    of: str  # the Stats attribute
    unit: str  # "%" (a rate, 0-100 on the axis) or "ms"


METRICS = {
    "answer-rate": Metric("answer-rate", "Answer rate", "answer_rate", "%"),
    "abstain-rate": Metric("abstain-rate", "Abstain rate", "abstain_rate", "%"),
    "small-talk-rate": Metric("small-talk-rate", "Small-talk rate", "small_talk_rate", "%"),
    "accuracy": Metric("accuracy", "Feedback accuracy", "accuracy", "%"),
    "latency-p50": Metric("latency-p50", "Latency p50", "p50", "ms"),
}


@dataclass
class Point:
    x: float
    y: float
    bucket: str  # the bucket in full
    value: str  # the value as shown


@dataclass
class Series:
    arm: str
    index: int
    segments: list[str]  # "x,y x,y ...": one polyline per run of buckets with a value (2 points or more)
    points: list[Point]


@dataclass
class Chart:
    metric: Metric
    width: int
    height: int
    left: int
    right: int  # x of the plot area's right edge
    top: int
    bottom: int  # y of the plot area's bottom edge (the x axis)
    y_ticks: list[tuple[float, str]]  # (y, label)
    x_labels: list[tuple[float, str]]  # (x, label)
    series: list[Series]
    rows: list[tuple[str, list[str]]]  # the same numbers as a table: (bucket, value per arm, "–" for none)

    @property
    def empty(self) -> bool:
        return not any(s.points for s in self.series)


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above `value` (> 0): a round top for the ms axis."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value * (1 - 1e-12):
            return step * power
    return 10 * power


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.1f}%" if unit == "%" else f"{value:.1f} ms"


def chart(traffic: Traffic, key: str) -> Chart:
    metric = METRICS[key]
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    plot_w, plot_h = right - LEFT, bottom - TOP
    n = len(traffic.bucket_starts)
    values = [[getattr(b, metric.of) if b.requests else None for b in a.buckets] for a in traffic.arms]
    if metric.unit == "%":
        top_value = 1.0
        y_ticks_values = [0.0, 0.25, 0.5, 0.75, 1.0]
        tick_label = [f"{round(100 * v)}%" for v in y_ticks_values]
    else:
        top_value = nice_ceiling(max((v for vs in values for v in vs if v is not None), default=1.0))
        y_ticks_values = [top_value * i / 4 for i in range(5)]
        tick_label = [f"{v:g}" for v in y_ticks_values]

    def x_of(i: int) -> float:
        return round(LEFT + (i + 0.5) * plot_w / n, 1)

    def y_of(v: float) -> float:
        return round(bottom - min(max(v / top_value, 0.0), 1.0) * plot_h, 1)

    y_ticks = [(y_of(v), label + (" ms" if metric.unit == "ms" and i == len(y_ticks_values) - 1 else ""))
               for i, (v, label) in enumerate(zip(y_ticks_values, tick_label))]
    # about six labels whatever the window: every 4th hour of a day, every day of a week, every 5th of 30
    every = max(1, math.ceil(n / 7))
    x_labels = [(x_of(i), traffic.bucket_label(s)) for i, s in enumerate(traffic.bucket_starts)
                if (n - 1 - i) % every == 0]
    series = []
    for arm, arm_values in zip(traffic.arms, values):
        segments: list[str] = []
        run: list[str] = []
        points = []
        for i, v in enumerate(arm_values + [None]):
            if v is None:
                if len(run) > 1:
                    segments.append(" ".join(run))
                run = []
                continue
            x, y = x_of(i), y_of(v)
            run.append(f"{x},{y}")
            points.append(Point(x, y, traffic.bucket_title(traffic.bucket_starts[i]), format_value(v, metric.unit)))
        series.append(Series(arm.arm, arm.index, segments, points))
    rows = [(traffic.bucket_title(s), [format_value(vs[i], metric.unit) for vs in values])
            for i, s in enumerate(traffic.bucket_starts)]
    return Chart(metric, WIDTH, HEIGHT, LEFT, right, TOP, bottom, y_ticks, x_labels, series, rows)


def charts(traffic: Traffic) -> list[Chart]:
    return [chart(traffic, key) for key in METRICS]
