"""`MetricsMiddleware`: every HTTP request counted by route template (not raw path, to keep label
cardinality bounded), method and status, with a latency histogram per route (`ServiceMetrics`,
app/api/metrics.py)."""
from __future__ import annotations

import time
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.metrics import ServiceMetrics


def _route_template(scope: Scope) -> str:
    """The matched route's path template ("/admin/faqs/{faq_id}"), never the raw path, so label
    cardinality stays bounded. The router records the route in the shared scope; requests answered
    before routing (413/415 from the request guard) are matched here against the app's routes."""
    route = scope.get("route")
    if route is None:
        route = _find_route(getattr(getattr(scope.get("app"), "router", None), "routes", []), scope)
    return getattr(route, "path", None) or "unmatched"


def _find_route(routes: list, scope: Scope) -> Any:
    for candidate in routes:
        inner = getattr(candidate, "original_router", None)  # FastAPI keeps included routers whole
        if inner is not None:
            found = _find_route(inner.routes, scope)
            if found is not None:
                return found
            continue
        match, _ = candidate.matches(scope)
        if match is Match.FULL:
            return candidate
    return None


class MetricsMiddleware:
    """Counts every HTTP request (including 4xx/5xx produced by other middleware and handlers)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        # a request that raised is a 500; one that returned without answering was abandoned by its
        # client (a half-sent body, a disconnect while queued): 499, as proxies log it
        status: dict[str, int | None] = {"code": None}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
            if status["code"] is None:
                status["code"] = 499
        finally:
            if status["code"] is None:
                status["code"] = 500
            label = _route_template(scope)
            self.metrics.requests.labels(route=label, method=scope.get("method", ""), status=str(status["code"])).inc()
            self.metrics.request_latency.labels(route=label).observe(time.perf_counter() - start)
