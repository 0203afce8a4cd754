"""The console's Try a question page: a question answered as `/match` answers it (`service.match`: logged
and counted the same), why it matched (explain.py), and its feedback: right, wrong, or which FAQ is right
(`service.record_feedback`, as `POST /feedback`)."""
from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.api import service
from app.api.console.explain import explain
from app.api.errors import SERVICE_ERRORS, problem_of
from app.api.roles import needs
from app.api.console.pages import (checked_post, current, flash, kb_state, kb_url, page_router, problem_page,
                                   pydantic_problems, redirect, render)
from app.api.schemas import MAX_ID_CHARS, MatchRequest
from app.api.state import QueryLogDisabled
from app.store import FaqNotFound, FeedbackAlreadyRecorded, FeedbackSessionMismatch
from kb.files import nesting_problem
from kb.records import field_problem

log = logging.getLogger(__name__)

#: the deployments a question can be tried on: what users get, and the draft
DEPLOYMENTS = ("production", "test")

router = page_router()


@router.get("/kbs/{kb}/try", dependencies=needs("viewer"))
async def try_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    # an editor of a reviewed KB tries the draft first: what users get is one click away
    asked = request.query_params.get("deployment")
    deployment = asked if asked in DEPLOYMENTS else "test" if state.reviewed else "production"
    return render(request, "try.html", session=session, kb=kb, query="", top_k="", filter="", previous_faq_id="",
                  deployment=deployment, reviewed=state.reviewed, errors={}, result=None)


@router.post("/kbs/{kb}/try", dependencies=needs("viewer"))
async def try_question(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    query, top_k = fields.get("query", ""), fields.get("top_k", "").strip()
    flt, previous = fields.get("filter", "").strip(), fields.get("previous_faq_id", "").strip()
    deployment = fields.get("deployment") or "production"
    page = {"session": session, "kb": kb, "query": query, "top_k": top_k, "filter": flt, "previous_faq_id": previous,
            "deployment": deployment, "reviewed": state.reviewed, "result": None}
    values: dict[str, Any] = {"query": query, "deployment": deployment}
    if previous:  # the next turn of a conversation: a follow-up button, or a question asked after an answer
        values["context"] = {"previous_faq_id": previous}
    if flt:
        try:
            values["filter"] = json.loads(flt)
        except RecursionError:
            return render(request, "try.html", 422, errors={"filter": f"filter: {nesting_problem()}"}, **page)
        except ValueError as exc:
            return render(request, "try.html", 422, errors={"filter": f"filter: not JSON ({exc})"}, **page)
    if top_k:
        if not top_k.isascii() or not top_k.isdigit():
            return render(request, "try.html", 422, errors={"top_k": "must be an integer"}, **page)
        # a long digit string is still just out of range: MatchRequest's own bound (<= 50) gives the message
        values["top_k"] = int(top_k) if len(top_k) <= 6 else 10**6
    try:
        item = MatchRequest.model_validate(values)
    except ValidationError as exc:
        return render(request, "try.html", 422, errors=pydantic_problems(exc), **page)
    trace = service.MatchTrace()
    try:
        result = (await service.match(state, [item], trace))[0]
    except SERVICE_ERRORS as exc:
        problem = problem_of(exc)
        return render(request, "try.html", problem.status, errors={"form": problem.message}, **page)
    page["result"] = result
    why, why_problem = None, None
    pipeline = state.pipeline_for(deployment)
    if trace.results and pipeline is not None:
        try:
            # the word weights' encoder call runs here, off the batcher: the console is low traffic, and
            # the answer above is already logged and counted as /match would have it
            why = await run_in_threadpool(explain, pipeline, trace.retriever, result.query, trace.results[0])
        except Exception as exc:  # noqa: BLE001 - the answer is shown whatever befalls its explanation
            log.exception("could not explain the console question")
            why_problem = f"the explanation could not be worked out: {type(exc).__name__}"
    # the draft's answers are not logged (app/api/service.py): nothing to give feedback on
    return render(request, "try.html", errors={}, logged=state.settings.query_log and deployment == "production",
                  why=why, why_problem=why_problem, **page)


@router.post("/kbs/{kb}/feedback", dependencies=needs("viewer"))
async def feedback(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    request_id = fields.get("request_id", "")
    verdict = fields.get("correct", "")
    # "the right FAQ is ...": typed, else picked from the FAQs the page showed
    right = fields.get("other_faq_id", "").strip() or fields.get("faq_id", "").strip()
    problem = field_problem(request_id, 64) if request_id else "must not be empty"
    if problem is not None:
        return problem_page(request, 422, f"request_id: {problem}", session=session)
    if verdict == "other":
        problem = field_problem(right, MAX_ID_CHARS) if right else "pick the FAQ that answers the question, or type its id"
        if problem is not None:
            return problem_page(request, 422, f"faq_id: {problem}", session=session)
    elif verdict not in ("true", "false"):
        return problem_page(request, 422, "correct: must be true, false or other", session=session)
    correct = None if verdict == "other" else verdict == "true"
    try:
        found = await service.record_feedback(state, request_id, correct, right if correct is None else None, None)
    except QueryLogDisabled as exc:
        return problem_page(request, 409, str(exc), session=session)
    except FeedbackAlreadyRecorded as exc:
        return problem_page(request, 409, str(exc), session=session)
    except (FeedbackSessionMismatch, FaqNotFound) as exc:
        return problem_page(request, 422, str(exc), session=session)
    if not found:
        return problem_page(request, 404, f"request_id: unknown request {request_id!r}", session=session)
    await flash(session, (f"Feedback recorded: the right FAQ is {right!r}." if correct is None
                     else f"Feedback recorded: the answer was {'right' if correct else 'wrong'}."))
    return redirect(kb_url(kb, "/try"))
