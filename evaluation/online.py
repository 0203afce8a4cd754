"""`faq eval online`: the online A/B report from the query log and its feedback.

Every `/match` is logged with its arm (`query_log.arm`, chosen per request or by `FAQ_AB_SPLIT`), and
`POST /feedback {request_id, correct | faq_id}` attaches the outcome. Per arm this reports:

- answer rate = answered requests / requests (Wilson 95% interval);
- accuracy = correct answers / answered requests with feedback (Wilson interval). A feedback row is
  correct when `correct` is true, or, when only `faq_id` was sent, when it names the FAQ answered;
- latency p50 / p95 / p99 of the served request (`latency_ms`), with a distribution-free interval
  for the median (order statistics).

Every other arm is compared with a control arm (default: `ann` when logged, else the busiest arm):
two-proportion z-tests for answer rate and accuracy, a Mann-Whitney U test for latency. A difference
whose p-value is >= alpha (0.05) is reported as "not yet significant", with the number of requests
(or feedbacks) per arm that the observed difference would need for 80% power.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

ALPHA = 0.05
POWER = 0.8


@dataclass(frozen=True)
class LoggedMatch:
    """The part of a query_log row the report needs."""

    arm: str
    answered_faq: str | None
    latency_ms: float | None
    feedback_correct: bool | None
    feedback_faq: str | None

    @property
    def has_feedback(self) -> bool:
        return self.feedback_correct is not None or self.feedback_faq is not None

    @property
    def correct(self) -> bool | None:
        """Whether the answer was right, from the feedback (None: no feedback on an answered request)."""
        if self.answered_faq is None or not self.has_feedback:
            return None
        if self.feedback_correct is not None:
            return bool(self.feedback_correct)
        return self.feedback_faq == self.answered_faq


# -- statistics -----------------------------------------------------------------------------------
def _z(p: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(p))


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Wilson score interval of a proportion (sensible at small n and near 0 or 1)."""
    if n == 0:
        return None, None
    z = _z(0.5 + confidence / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Distribution-free interval for the median: order statistics j < k with
    P(X_(j) <= median <= X_(k)) >= confidence under Binomial(n, 1/2)."""
    from scipy.stats import binom

    xs = np.sort(np.asarray(values, dtype=np.float64))
    n = len(xs)
    if n == 0:
        return None, None
    lo = int(binom.ppf((1 - confidence) / 2, n, 0.5))  # number of values below the lower bound
    hi = n - lo  # symmetric
    lo_i, hi_i = max(0, lo - 1), min(n - 1, hi)
    return float(xs[lo_i]), float(xs[hi_i])


def two_proportion_test(s1: int, n1: int, s2: int, n2: int) -> float | None:
    """Two-sided p-value of the pooled two-proportion z-test (None when a side is empty)."""
    from scipy.stats import norm

    if n1 == 0 or n2 == 0:
        return None
    pooled = (s1 + s2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0  # both all-success or all-failure: no evidence of a difference
    z = (s1 / n1 - s2 / n2) / se
    return float(2 * norm.sf(abs(z)))


def needed_per_arm(p1: float, p2: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """Observations per arm for a two-sided test at `alpha` to detect p1 vs p2 with `power`."""
    if p1 == p2:
        return None
    z = _z(1 - alpha / 2) + _z(power)
    return int(math.ceil(z * z * (p1 * (1 - p1) + p2 * (1 - p2)) / (p1 - p2) ** 2))


def latency_test(a: Sequence[float], b: Sequence[float]) -> float | None:
    from scipy.stats import mannwhitneyu

    if len(a) == 0 or len(b) == 0:
        return None
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


# -- the report -------------------------------------------------------------------------------------
def read_log(store: Any, since: datetime | None = None, until: datetime | None = None,
             arms: Iterable[str] | None = None) -> list[LoggedMatch]:
    """query_log rows (optionally a time window / some arms) of the store's KB."""
    from sqlalchemy import select

    from app.db.models import QueryLog

    stmt = select(QueryLog.arm, QueryLog.faq_id, QueryLog.latency_ms, QueryLog.feedback_correct,
                  QueryLog.feedback_faq_id).where(QueryLog.kb == store.kb_name)
    if since is not None:
        stmt = stmt.where(QueryLog.created_at >= since)
    if until is not None:
        stmt = stmt.where(QueryLog.created_at < until)
    wanted = list(arms) if arms else None
    if wanted:
        stmt = stmt.where(QueryLog.arm.in_(wanted))
    with store.engine.connect() as conn:
        rows = conn.execute(stmt.order_by(QueryLog.id)).all()
    return [LoggedMatch(r.arm or "(none)", r.faq_id, r.latency_ms, r.feedback_correct, r.feedback_faq_id) for r in rows]


def arm_stats(rows: Sequence[LoggedMatch], confidence: float = 0.95) -> dict:
    n = len(rows)
    answered = sum(r.answered_faq is not None for r in rows)
    judged = [r.correct for r in rows if r.correct is not None]
    correct = sum(judged)
    latencies = [float(r.latency_ms) for r in rows if r.latency_ms is not None]
    lat = np.asarray(latencies, dtype=np.float64)
    pct = (lambda q: float(np.percentile(lat, q))) if len(lat) else (lambda q: None)
    return {
        "requests": n,
        "answered": answered,
        "answer_rate": answered / n if n else None,
        "answer_rate_ci": wilson_interval(answered, n, confidence),
        "feedback": sum(r.has_feedback for r in rows),
        "judged_answers": len(judged),
        "correct": correct,
        "accuracy": correct / len(judged) if judged else None,
        "accuracy_ci": wilson_interval(correct, len(judged), confidence),
        "latency_ms": {"n": len(lat), "mean": float(lat.mean()) if len(lat) else None,
                       "p50": pct(50), "p50_ci": median_interval(lat, confidence), "p95": pct(95), "p99": pct(99)},
    }


def _verdict(p: float | None, needed: int | None, what: str, alpha: float) -> str:
    if p is None:
        return f"no {what} data on one side yet"
    if p < alpha:
        return f"significant (p = {p:.3g})"
    more = f"; about {needed} {what} per arm would detect the observed difference with {POWER:.0%} power" if needed else ""
    return f"not yet significant (p = {p:.3g} >= {alpha}){more}"


def compare(control: dict, other: dict, control_lat: Sequence[float], other_lat: Sequence[float],
            alpha: float = ALPHA) -> dict:
    """The other arm vs the control arm: differences, p-values and a plain-words verdict each."""
    out: dict[str, Any] = {}
    p = two_proportion_test(other["answered"], other["requests"], control["answered"], control["requests"])
    needed = (needed_per_arm(control["answer_rate"], other["answer_rate"], alpha)
              if control["requests"] and other["requests"] else None)
    out["answer_rate"] = {
        "difference": (other["answer_rate"] - control["answer_rate"]) if p is not None else None,
        "p_value": p, "significant": p is not None and p < alpha, "needed_per_arm": needed,
        "verdict": _verdict(p, needed, "requests", alpha)}
    p = two_proportion_test(other["correct"], other["judged_answers"], control["correct"], control["judged_answers"])
    needed = (needed_per_arm(control["accuracy"], other["accuracy"], alpha)
              if control["judged_answers"] and other["judged_answers"] else None)
    out["accuracy"] = {
        "difference": (other["accuracy"] - control["accuracy"]) if p is not None else None,
        "p_value": p, "significant": p is not None and p < alpha, "needed_per_arm": needed,
        "verdict": _verdict(p, needed, "feedbacks on answers", alpha)}
    p = latency_test(other_lat, control_lat)
    out["latency"] = {
        "p50_difference_ms": (other["latency_ms"]["p50"] - control["latency_ms"]["p50"]) if p is not None else None,
        "p_value": p, "significant": p is not None and p < alpha,
        "verdict": _verdict(p, None, "latencies", alpha)}
    return out


def online_report(store: Any, since: datetime | None = None, until: datetime | None = None,
                  arms: Iterable[str] | None = None, control: str | None = None,
                  confidence: float = 0.95, alpha: float = ALPHA) -> dict:
    rows = read_log(store, since, until, arms)
    by_arm: dict[str, list[LoggedMatch]] = {}
    for row in rows:
        by_arm.setdefault(row.arm, []).append(row)
    stats = {arm: arm_stats(rs, confidence) for arm, rs in sorted(by_arm.items())}
    if control is not None and control not in stats:
        raise ValueError(f"control arm {control!r} has no logged requests (arms logged: {', '.join(stats) or 'none'})")
    if control is None and stats:
        control = "ann" if "ann" in stats else max(stats, key=lambda a: stats[a]["requests"])
    comparisons = {}
    for arm in stats:
        if arm != control:
            lat = [float(r.latency_ms) for r in by_arm[arm] if r.latency_ms is not None]
            ctl = [float(r.latency_ms) for r in by_arm[control] if r.latency_ms is not None]
            comparisons[arm] = compare(stats[control], stats[arm], ctl, lat, alpha)
    return {
        "window": {"since": since.isoformat() if since else None, "until": until.isoformat() if until else None},
        "generated_at": datetime.now(timezone.utc).isoformat(),
        "confidence": confidence,
        "alpha": alpha,
        "requests": len(rows),
        "control": control,
        "arms": stats,
        "comparisons": comparisons,
    }


# -- formatting ---------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def _ci(ci: Sequence[float | None]) -> str:
    lo, hi = ci
    return "" if lo is None else f" [{lo * 100:.1f}, {hi * 100:.1f}]"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def format_online_markdown(report: dict) -> str:
    conf = f"{report['confidence']:.0%}"
    window = report["window"]
    lines = [
        "# Online A/B report",
        "",
        f"- {report['requests']} logged /match requests"
        + (f" from {window['since']}" if window["since"] else "") + (f" until {window['until']}" if window["until"] else ""),
        f"- control arm: `{report['control']}`; intervals are {conf}; differences are significant at p < {report['alpha']}",
        "",
        f"| arm | requests | answer rate [{conf} CI] | feedback | accuracy [{conf} CI] (correct / judged) "
        f"| latency p50 [{conf} CI] ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, s in report["arms"].items():
        lat = s["latency_ms"]
        p50_ci = "" if lat["p50_ci"][0] is None else f" [{lat['p50_ci'][0]:.1f}, {lat['p50_ci'][1]:.1f}]"
        lines.append(
            f"| {arm} | {s['requests']} | {_pct(s['answer_rate'])}{_ci(s['answer_rate_ci'])} | {s['feedback']} "
            f"| {_pct(s['accuracy'])}{_ci(s['accuracy_ci'])} ({s['correct']} / {s['judged_answers']}) "
            f"| {_ms(lat['p50'])}{p50_ci} | {_ms(lat['p95'])} | {_ms(lat['p99'])} |")
    if report["comparisons"]:
        lines += ["", f"## Against `{report['control']}`", "", "| arm | metric | difference | verdict |", "|---|---|---|---|"]
        for arm, cmp in report["comparisons"].items():
            for metric, label in (("answer_rate", "answer rate"), ("accuracy", "accuracy")):
                d = cmp[metric]["difference"]
                lines.append(f"| {arm} | {label} | {'n/a' if d is None else f'{d * 100:+.1f} points'} | {cmp[metric]['verdict']} |")
            d = cmp["latency"]["p50_difference_ms"]
            lines.append(f"| {arm} | latency p50 | {'n/a' if d is None else f'{d:+.1f} ms'} | {cmp['latency']['verdict']} |")
    return "\n".join(lines) + "\n"


def write_online_report(report: dict, out_dir: str | Path) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "report.json", out / "report.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(format_online_markdown(report), encoding="utf-8")
    return json_path, md_path
