"""The console's Changes page: what the draft changes against production (the latest publication), FAQ by FAQ,
with each field before and after and the answer word by word; the Publish button (with a note); the KB's
publications, each with a Roll back button in a KB whose publishing is `reviewed` (app/release/publishing.py).
`?from=ID&to=draft|ID` compares any two.
"""
from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.api.console.pages import checked_post, current, flash, kb_state, kb_url, page_router, problem_page, redirect, render
from app.api.roles import needs
from app.api.state import KbState
from app.release.gate import content_gate, feedback_labels_of
from app.release.publishing import DRAFT, NothingToPublish, PublishingError, diff_of, publish, rollback

#: publications the page lists, the newest (`faq kb published` and the API list more)
LISTED = 50

router = page_router()


async def _page(request: Request, session, kb: str, state: KbState, start: str | None = None,
                end: str = DRAFT, status: int = 200, problem: str | None = None) -> Response:
    def read() -> tuple[dict, list]:
        return diff_of(state.store, start, end), state.store.publications.list(LISTED)

    try:
        changes, listed = await run_in_threadpool(read)
    except PublishingError as exc:
        return problem_page(request, exc.status, str(exc), session=session)
    return render(request, "publishing.html", status=status, session=session, kb=kb, changes=changes,
                  publications=listed, reviewed=state.reviewed, serving=state.published_id, problem=problem,
                  start=start or "", end=end, comparing_draft=end == DRAFT and start is None)


@router.get("/kbs/{kb}/changes", dependencies=needs("viewer"))
async def changes_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    start = request.query_params.get("from") or None
    end = request.query_params.get("to") or DRAFT
    for name, value in (("from", start), ("to", end)):
        if value is not None and len(value) > 20:
            return problem_page(request, 422, f"{name}: at most 20 characters", session=session)
    return await _page(request, session, kb, state, start, end)


@router.post("/kbs/{kb}/publish", dependencies=needs("publisher"))
async def publish_draft(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    force = fields.get("force") == "on"

    def run() -> str:
        gate = None
        if state.retriever is not None and state.encoder is not None:
            gate = content_gate(state.settings, state.encoder, state.retriever, feedback_labels_of(state.store))
        try:
            done = publish(state.store, fields.get("note") or None, gate=gate, force=force)
        except NothingToPublish as nothing:
            return f"{nothing}."
        state.refresh_published(reason="console publish")
        s = done.publication.summary
        return (f"Published publication {done.publication.id}: {s['added']} added, {s['removed']} removed, "
                f"{s['changed']} changed.")

    try:
        message = await run_in_threadpool(run)
    except PublishingError as exc:
        return await _page(request, session, kb, state, status=exc.status if exc.status >= 400 else 409,
                           problem=str(exc))
    await flash(session, message)
    return redirect(kb_url(kb, "/changes"))


@router.post("/kbs/{kb}/rollback", dependencies=needs("publisher"))
async def roll_back(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)

    def run() -> str:
        try:
            done = rollback(state.store, fields.get("to", ""), fields.get("note") or None, reviewed=state.reviewed)
        except NothingToPublish as nothing:
            return f"{nothing}."
        state.refresh_published(reason="console rollback")
        return f"Production serves publication {done.publication.restored} again (as publication {done.publication.id})."

    try:
        message = await run_in_threadpool(run)
    except PublishingError as exc:
        return await _page(request, session, kb, state, status=exc.status, problem=str(exc))
    await flash(session, message)
    return redirect(kb_url(kb, "/changes"))
