"""The console's Traffic page: a KB's answer rate, abstain rate, feedback accuracy and latency over the
last 24 hours, 7 or 30 days, per A/B arm, as tables and SVG charts drawn on the server (app/traffic.py).
"""
from __future__ import annotations

from datetime import datetime, timezone

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.api.roles import needs
from app.api.console.pages import current, kb_state, page_router, problem_page, render
from app.traffic import DEFAULT_WINDOW, WINDOWS, Traffic, charts, summarize, window_bounds

router = page_router()


@router.get("/kbs/{kb}/traffic", dependencies=needs("viewer"))
async def traffic_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    window = request.query_params.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS:
        return problem_page(request, 422, f"window: must be one of {', '.join(WINDOWS)}", session=session)
    now = datetime.now(timezone.utc)

    def read() -> Traffic:
        start, end, _ = window_bounds(window, now)
        found = state.store.query_log.traffic_rows(start, end)
        return summarize(found.rows, window, now, capped=found.capped)

    # summing 200,000 rows takes a second or two: off the event loop, like every store read here
    traffic = await run_in_threadpool(read)
    return render(request, "traffic.html", session=session, kb=kb, traffic=traffic, windows=list(WINDOWS),
                  charts=charts(traffic) if traffic.requests else [], logging=state.settings.query_log)
