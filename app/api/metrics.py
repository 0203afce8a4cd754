"""Prometheus metrics of one app instance, on a private `CollectorRegistry`.

A private registry (not prometheus_client's global one) lets several apps live in one process (the
tests create many) without "Duplicated timeseries" errors, and `/metrics` shows only this app.

The HTTP request counts are written by `MetricsMiddleware` (app/api/middleware/metrics.py). Their
route label is the template (`/kbs/{kb}/match`), never a KB's name; the only per-KB label is `kb` of
`faq_kb_match_queries`, which FAQ_METRICS_KB_LABELS=false sets to `ALL_KBS` for every KB.
"""
from __future__ import annotations

from collections import deque
from threading import Lock
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

# Latency buckets in seconds: the service targets tens of milliseconds per query on CPU.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
NO_ANSWER_WINDOW = 1000  # queries in the rolling no-answer rate
#: the `kb` label of every KB when per-KB labels are off: not a valid KB name (those start with a letter
#: or digit), so it can never be mistaken for one; the label set stays, so dashboards summing by kb still work
ALL_KBS = "_all"


class ServiceMetrics:
    def __init__(self, kb_labels: bool = True) -> None:
        self.kb_labels = kb_labels
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "faq_http_requests", "HTTP requests by route template, method and status", ["route", "method", "status"], registry=r
        )
        self.request_latency = Histogram(
            "faq_http_request_seconds", "HTTP request latency by route template", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.stage_latency = Histogram(
            "faq_match_stage_seconds",
            "Per-query matching time by stage (encode, retrieve, rerank, total)",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queries = Counter("faq_match_queries", "Queries matched", registry=r)
        self.cache_hits = Counter("faq_match_cache_hits", "Queries answered from the query cache", registry=r)
        self.no_answer = Counter("faq_match_no_answer", "Queries whose best score was under the threshold", registry=r)
        self.no_answer_rate = Gauge(
            "faq_match_no_answer_rate", f"Share of the last {NO_ANSWER_WINDOW} queries without an answer", registry=r
        )
        self.encode_batch = Histogram(
            "faq_encode_batch_size",
            "Queries per encoder call (micro-batching of concurrent requests)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.index_info = Info("faq_index", "The index build being served", registry=r)
        self.index_loaded = Gauge("faq_index_loaded", "1 when an index is loaded and /match can answer", registry=r)
        self.index_variants = Gauge("faq_index_variants", "Question variants in the served build", registry=r)
        self.delta_size = Gauge("faq_index_delta_size", "Variants in the retriever's delta segment (added since the build)", registry=r)
        self.tombstones = Gauge("faq_index_tombstones", "Build variants hidden by tombstones (deleted/edited since the build)", registry=r)
        self.kb_revision = Gauge("faq_kb_revision", "KB revision the served retriever reflects", registry=r)
        self.swaps = Counter("faq_index_swaps", "Retriever swaps (reload, new build, KB delta refresh)", ["reason"], registry=r)
        self.query_log_dropped = Counter("faq_query_log_errors", "Query-log rows that could not be written", registry=r)
        self.rejected = Counter("faq_match_rejected", "Match requests refused because the queue was full",
                                ["status"], registry=r)
        self.queued = Gauge("faq_match_queued_queries", "Queries waiting for the encoder (admission control)",
                            registry=r)
        self.deadline_exceeded = Counter("faq_match_deadline_exceeded",
                                         "Match requests not answered within FAQ_REQUEST_TIMEOUT_MS", registry=r)
        self.client_gone = Counter("faq_http_client_gone",
                                   "Requests whose client disconnected before the answer: their work was dropped",
                                   registry=r)
        # per KB: the unlabelled index gauges above are the default KB's
        self.kb_queries = Counter("faq_kb_match_queries", "Queries matched per KB and decision", ["kb", "decision"],
                                  registry=r)
        self.kbs_resident = Gauge("faq_kbs_resident", "KBs loaded in this process (the default one included)",
                                  registry=r)
        self.kb_loads = Counter("faq_kb_loads", "KBs loaded on a request (first use, or again after an unload)",
                                registry=r)
        self.kb_unloads = Counter("faq_kb_unloads", "KBs unloaded (least recently used beyond FAQ_MAX_RESIDENT_KBS, "
                                  "deleted, or with new settings)", registry=r)
        self.auth_throttled = Counter("faq_auth_throttled",
                                      "Requests refused with 429 for too many failed token checks from their "
                                      "address (app/api/auth_throttle.py)", registry=r)
        self._recent_no_answer: deque[bool] = deque(maxlen=NO_ANSWER_WINDOW)
        self._lock = Lock()

    def observe_match(self, timings_ms: dict[str, float], answered: bool, cached: bool = False,
                      kb: str = "default", decision: str | None = None) -> None:
        self.kb_queries.labels(kb=kb if self.kb_labels else ALL_KBS,
                               decision=decision or ("answer" if answered else "abstain")).inc()
        if cached:  # a hit ran no stage: its zeros would only hide the stages' real latency
            self.cache_hits.inc()
        else:
            for stage, ms in timings_ms.items():
                self.stage_latency.labels(stage=stage).observe(ms / 1000.0)
        self.queries.inc()
        if not answered:
            self.no_answer.inc()
        with self._lock:
            self._recent_no_answer.append(not answered)
            self.no_answer_rate.set(sum(self._recent_no_answer) / len(self._recent_no_answer))

    def observe_retriever(self, retriever: Any | None, kb_revision: int | None) -> None:
        """Index gauges for the retriever now being served (None: nothing loaded)."""
        if retriever is None:
            self.index_loaded.set(0)
            return
        manifest = getattr(retriever, "manifest", {}) or {}
        self.index_loaded.set(1)
        self.index_info.info(
            {
                "version": str(getattr(retriever, "version", "")),
                "encoder_id": str(manifest.get("encoder_id", "")),
                "encoder_runtime": str(manifest.get("encoder_runtime", "torch")),
                "kb_revision": str(manifest.get("kb_revision", "")),
            }
        )
        self.index_variants.set(float(manifest.get("n_variants") or 0))
        self.delta_size.set(float(getattr(retriever, "n_delta", 0) or 0))
        self.tombstones.set(float(getattr(retriever, "n_tombstones", 0) or 0))
        if kb_revision is not None:
            self.kb_revision.set(kb_revision)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
