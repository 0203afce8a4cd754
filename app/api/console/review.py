"""The console's review page: mined phrasings (accept / dismiss), clusters of unanswered queries (open
as a new FAQ draft / dismiss) and lint findings (open the FAQ / dismiss with a reason), plus what was
dismissed (restore). The queues and their rules are app/curation/review.py's, shared with the CLI.

Lint encodes the whole KB, so it runs in a background thread (one per KB at a time) whenever the page
finds no report for the KB's current revision; the page says so and reloads itself until it is there.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.curation import review
from app.api import service
from app.api.roles import needs
from app.api.console.pages import (EarlyResponse, checked_post, current, flash, form_values, kb_state, kb_url,
                                   page_router, problem_page, redirect, render)
from app.api.state import KbState
from app.store import FaqNotFound, KbValidationError, QUEUES
from app.store.reviews import lint_key

log = logging.getLogger(__name__)

#: how far back the queues read the query log
WINDOWS = {"7d": timedelta(days=7), "30d": timedelta(days=30), "90d": timedelta(days=90), "all": None}
DEFAULT_WINDOW = "30d"
#: items shown per queue, most asked first: a queue is worked from the top (the CLI's --json gives all)
SHOWN = 10

router = page_router()


@dataclass
class LintJob:
    revision: int
    state: str = "running"  # running | done | failed
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None
    report: Any = None
    message: str = ""
    thread: threading.Thread | None = None


class LintJobs:
    """The latest lint of each KB in this process, for the revision it read."""

    def __init__(self) -> None:
        self._latest: dict[str, LintJob] = {}
        self._lock = threading.Lock()

    def for_revision(self, kb: str, state: KbState, revision: int) -> LintJob:
        """The KB's lint of `revision`, started now when there is none (nor one running)."""
        with self._lock:
            job = self._latest.get(kb)
            if job is not None and (job.revision == revision or job.state == "running"):
                return job
            job = self._latest[kb] = LintJob(revision)
        job.thread = threading.Thread(target=run_lint, args=(job, state), name=f"console-lint-{kb}", daemon=True)
        job.thread.start()
        return job

    def wait(self, timeout: float) -> None:
        """Let running checks end (at shutdown): a thread killed inside the encoder aborts the process."""
        deadline = time.monotonic() + timeout
        for job in list(self._latest.values()):
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))


def run_lint(job: LintJob, state: KbState) -> None:
    from index.build import encode_in_batches
    from kb.lint import lint_kb

    try:
        records = list(state.store.export_records())
        job.report = lint_kb(records, state.background_encoder(), encode=encode_in_batches)
        job.state = "done"
    except Exception as exc:  # noqa: BLE001 - shown on the page; the other queues still work
        log.exception("console lint of KB %s failed", state.store.kb_name)
        job.message, job.state = f"the answers could not be checked: {exc}", "failed"
    finally:
        job.seconds = time.monotonic() - job.started


def lint_jobs_of(request: Request) -> LintJobs:
    return request.app.state.console_lints


def _window(request: Request, session: Any) -> tuple[str, datetime | None]:
    name = request.query_params.get("window", DEFAULT_WINDOW)
    if name not in WINDOWS:
        raise EarlyResponse(problem_page(request, 422, f"window: must be one of {', '.join(WINDOWS)}",
                                         session=session))
    span = WINDOWS[name]
    return name, (datetime.now(timezone.utc) - span if span is not None else None)


def _by(request: Request, session: Any) -> str:
    return "FAQ_ADMIN_TOKEN" if session.kb is None else f"a {session.kb} admin token"


def _findings(store: Any, report: Any) -> list[dict[str, Any]]:
    """The report's flagged FAQs that nobody dismissed, with their review keys."""
    gone = store.reviews.dismissed_keys("lint")
    out = []
    for f in report.faqs:
        key = lint_key(f.faq_id, f.answer)
        if f.flagged and key not in gone:
            out.append({"faq_id": f.faq_id, "score": f.score, "reasons": f.reasons, "answer": f.answer,
                        "review_key": key})
    return out


@router.get("/kbs/{kb}/review", dependencies=needs("viewer"))
async def review_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    return await _page(request, session, kb, state)


async def _page(request: Request, session: Any, kb: str, state: KbState, status: int = 200,
                error: str | None = None, errors: dict[str, str] | None = None) -> Response:
    window, since = _window(request, session)
    store = state.store

    def read() -> tuple[dict, int, list]:
        return state.review_queues(since), store.revision(), store.reviews.dismissed()

    report, revision, dismissed = await run_in_threadpool(read)
    job = lint_jobs_of(request).for_revision(kb, state, revision)
    findings = await run_in_threadpool(_findings, store, job.report) if job.state == "done" else None
    return render(request, "review.html", status=status, session=session, kb=kb, window=window,
                  windows=list(WINDOWS), phrasings=report["phrasings"][:SHOWN], clusters=report["clusters"][:SHOWN],
                  n_phrasings=len(report["phrasings"]), n_clusters=len(report["clusters"]), stats=report["stats"],
                  lint=job, findings=findings, dismissed=dismissed, error=error, errors=errors or {}, shown=SHOWN)


def _key_field(fields: dict[str, str]) -> str | None:
    key = fields.get("key", "")
    return key if re.fullmatch(r"[0-9a-f]{64}", key) else None


@router.post("/kbs/{kb}/review/accept", dependencies=needs("editor"))
async def accept(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    key = _key_field(fields)
    if key is None:
        return problem_page(request, 422, "key: not a review item's key (64 hex digits)", session=session)
    _, since = _window(request, session)
    try:
        accepted = await run_in_threadpool(review.accept_phrasing, state.store, key, since)
    except review.NotProposed as exc:
        return await _page(request, session, kb, state, 409, str(exc))
    except FaqNotFound as exc:
        return await _page(request, session, kb, state, 404, f"{exc}: it was deleted since the page was shown")
    except KbValidationError as exc:
        return await _page(request, session, kb, state, 422, f"the phrasing cannot be added: {exc}")
    await run_in_threadpool(service.refresh, state)
    await flash(session, (f"Added the phrasing to FAQ {accepted.faq.faq_id!r}; /match uses it now."
                     if accepted.added else f"FAQ {accepted.faq.faq_id!r} already had this phrasing."))
    return redirect(kb_url(kb, f"/review?window={request.query_params.get('window', DEFAULT_WINDOW)}"))


@router.post("/kbs/{kb}/review/dismiss", dependencies=needs("editor"))
async def dismiss(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    queue, key, reason = fields.get("queue", ""), _key_field(fields), fields.get("reason", "")
    if queue not in QUEUES:
        return problem_page(request, 422, f"queue: must be one of {', '.join(QUEUES)}", session=session)
    if key is None:
        return problem_page(request, 422, "key: not a review item's key (64 hex digits)", session=session)
    _, since = _window(request, session)
    store = state.store

    def subject() -> str | None:
        """What the queue shows for `key` now (None: not in the queue)."""
        if queue == "lint":
            job = lint_jobs_of(request).for_revision(kb, state, store.revision())
            hit = next((f for f in _findings(store, job.report) if f["review_key"] == key),
                       None) if job.state == "done" else None
            return None if hit is None else f"{hit['faq_id']}: {'; '.join(r.text for r in hit['reasons'])}"
        item = review.find(state.review_queues(since), queue, key)
        if item is None:
            return None
        if queue == "phrasing":
            return f"{item['faq_id']}: {item['question']}"
        return "; ".join(q["query"] for q in item["queries"][:5])

    text = await run_in_threadpool(subject)
    if text is None:
        return await _page(request, session, kb, state, 409,
                           "this item is no longer in its queue (dismissed, accepted or changed since): nothing "
                           "was dismissed")
    try:
        done = await run_in_threadpool(review.dismiss, store, queue, key, text, reason, _by(request, session))
    except ValueError as exc:
        return await _page(request, session, kb, state, 422, errors={key: str(exc)})
    await flash(session, "Dismissed." if done else "It was already dismissed.")
    return redirect(kb_url(kb, f"/review?window={request.query_params.get('window', DEFAULT_WINDOW)}"))


@router.post("/kbs/{kb}/review/restore", dependencies=needs("editor"))
async def restore(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    queue, key = fields.get("queue", ""), _key_field(fields)
    if queue not in QUEUES or key is None:
        return problem_page(request, 422, "queue, key: not a dismissed item", session=session)
    if not await run_in_threadpool(state.store.reviews.restore, queue, key):
        return problem_page(request, 404, "key: nothing dismissed under this key", session=session)
    await flash(session, "Restored: it is proposed again when it still applies.")
    return redirect(kb_url(kb, "/review"))


@router.get("/kbs/{kb}/review/draft", dependencies=needs("viewer"))
async def draft(request: Request, kb: str) -> Response:
    """A new-FAQ form filled from an unanswered cluster: its queries as phrasings, an id to change."""
    session = await current(request)
    state = await kb_state(request, session, kb)
    key = request.query_params.get("key", "")
    if not re.fullmatch(r"[0-9a-f]{64}", key):
        return problem_page(request, 422, "key: not a review item's key (64 hex digits)", session=session)
    _, since = _window(request, session)
    item = await run_in_threadpool(lambda: review.find(state.review_queues(since), "cluster", key))
    if item is None:
        return problem_page(request, 404, "key: this cluster is no longer proposed (dismissed, or its queries "
                                          "became phrasings)", session=session)
    queries = [q["query"] for q in item["queries"]]
    values = form_values({"faq_id": review.draft_id(queries), "questions": "\n".join(queries)})
    return render(request, "faq_form.html", session=session, kb=kb, creating=True, values=values, errors={},
                  draft_of=item)
