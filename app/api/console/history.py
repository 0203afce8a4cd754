"""The console's History page: a KB's audit log (app/store/audit.py), newest first: when, who and in which role,
through what, the action and its subject, and what changed (before → after, only the fields that differ). With
`?faq_id=` it is one FAQ's history, which the FAQ editor links to.
"""
from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.api.console.pages import current, kb_state, page_router, problem_page, render
from app.api.roles import needs
from app.api.schemas import MAX_ID_CHARS
from app.store.audit import change_summary
from kb.records import field_problem

#: rows a page shows, the newest (`faq kb audit` and the API read further back)
SHOWN = 200

router = page_router()


@router.get("/kbs/{kb}/history", dependencies=needs("viewer"))
async def history_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    faq_id = request.query_params.get("faq_id", "")
    if faq_id and (problem := field_problem(faq_id, MAX_ID_CHARS)) is not None:
        return problem_page(request, 422, f"faq_id: {problem}", session=session)
    rows = await run_in_threadpool(state.store.audit.read, None, faq_id or None, None, SHOWN + 1)
    entries = [{"row": r, "change": change_summary(r.before, r.after)} for r in rows[:SHOWN]]
    return render(request, "history.html", session=session, kb=kb, faq_id=faq_id, entries=entries,
                  more=len(rows) > SHOWN, shown=SHOWN)
