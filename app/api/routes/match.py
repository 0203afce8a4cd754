"""`POST /match`, `POST /match/batch` and `POST /feedback`, bare (KB `default`) and under /kbs/{kb}.

The handlers only validate, pin the served retriever and hand the queries to the MatchBatcher (encode
and search run in its bounded thread pool); the query log is written later by a background thread.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from app.api.deps import get_state, require_reader
from app.api.schemas import (
    BAD_INPUT_RESPONSES,
    BatchMatchRequest,
    BatchMatchResponse,
    ErrorBody,
    FeedbackRequest,
    FeedbackResponse,
    MatchRequest,
    MatchResponse,
)
from app.api.state import QueryLogDisabled, KbState
from app.arms import arm_split, resolve_arm, uses_stages
from app.pipeline import MatchQuery, MatchResult
from app.store import FaqNotFound, FeedbackAlreadyRecorded, FeedbackSessionMismatch

router = APIRouter(tags=["match"], dependencies=[Depends(require_reader)], responses={
    401: {"model": ErrorBody, "description": "FAQ_MATCH_REQUIRES_KEY is set and no valid token was sent"},
    403: {"model": ErrorBody, "description": "FAQ_MATCH_REQUIRES_KEY is set and the token is another KB's"}})

NO_RERANKER = ("no re-ranker installed: set FAQ_RERANKER to a folder made by `faq train reranker` (or `faq train "
               "mmaicm`, `faq train analogy`, `faq train siamese`) to use `rerank: true`; send `rerank: false` or "
               "leave it out")

_ERRORS = {
    **BAD_INPUT_RESPONSES,
    409: {"model": ErrorBody, "description": "rerank requested but no re-ranker is installed"},
    503: {"model": ErrorBody, "description": "no index built yet, overloaded, or (lexical arms) the lexical engine is unavailable"},
}


@router.post("/match", response_model=MatchResponse, responses=_ERRORS, summary="Match one query to the FAQ")
async def match(body: MatchRequest, state: KbState = Depends(get_state)) -> MatchResponse:
    return (await _match(state, [body]))[0]


@router.post(
    "/match/batch", response_model=BatchMatchResponse, responses=_ERRORS,
    summary="Match up to 64 queries (encoded in one encoder call)",
)
async def match_batch(body: BatchMatchRequest, state: KbState = Depends(get_state)) -> BatchMatchResponse:
    return BatchMatchResponse(results=await _match(state, body.queries))


def arm_of(state: KbState, item: MatchRequest) -> str:
    """The arm a request runs: its own `arm`, else the A/B split (sticky per session_id; without a
    session, random per request), else FAQ_DEFAULT_ARM; `rerank: true` adds the re-ranking stage."""
    arm = item.arm
    if arm is None:
        split = arm_split(state.settings)
        arm = split.assign(item.session_id or uuid.uuid4().hex) if split is not None else state.settings.default_arm
    return resolve_arm(arm, item.rerank)


@dataclass
class MatchTrace:
    """What one `_match` call ranked with, for the console's "why it matched": the pipeline's own results
    carry more than a response shows (each FAQ's cosines), and the retriever they were ranked on is the one
    to explain them with. Handing them back costs nothing; matching again would encode and search twice, and
    after a hot swap could explain another index's answer."""

    retriever: Any = None
    results: list[MatchResult] = field(default_factory=list)


async def _match(state: KbState, items: list[MatchRequest], trace: MatchTrace | None = None) -> list[MatchResponse]:
    arms = [arm_of(state, item) for item in items]
    for arm in arms:
        if uses_stages(arm) and not state.stages:
            problem = state.stage_problem
            raise HTTPException(status_code=status.HTTP_409_CONFLICT,
                                detail=f"{problem or NO_RERANKER} (arm {arm!r} needs a re-ranker)")
    retriever = state.require_retriever()  # pinned: this request finishes on this index even if a swap happens
    settings = state.settings
    queries = [
        MatchQuery(
            query=item.query,
            top_k=item.top_k if item.top_k is not None else settings.default_top_k,
            threshold=item.threshold,
            arm=arm,
        )
        for item, arm in zip(items, arms)
    ]
    assert state.batcher is not None
    state.in_flight += 1  # the KB is not unloaded under this request (app/api/resident_kbs.py)
    try:
        results = await state.batcher.submit(queries, retriever, state.pipeline)
    finally:
        state.in_flight -= 1
    if trace is not None:
        trace.retriever, trace.results = retriever, list(results)
    responses = [_response(arm, result) for arm, result in zip(arms, results)]
    for response in responses:
        state.metrics.observe_match(response.timings_ms.model_dump(), answered=response.answer is not None,
                                    cached=response.cached, kb=state.kb, decision=response.decision)
    if settings.query_log:
        state.log_matches([_log_row(item, response) for item, response in zip(items, responses)])
    return responses


def _match_out(m) -> dict:
    return {"faq_id": m.faq_id, "question": m.question, "answer": m.answer, "score": m.score}


def _response(arm: str, result: MatchResult) -> MatchResponse:
    answer = result.answer
    return MatchResponse.model_validate(
        {
            "request_id": uuid.uuid4().hex,
            "query": result.query,
            "arm": arm,
            "index_version": result.index_version,
            "answer": None if answer is None else {"faq_id": answer.faq_id, "answer": answer.answer, "score": answer.score},
            "matches": [_match_out(m) for m in result.matches],
            "decision": result.decision,
            "options": [_match_out(m) for m in result.options],
            "threshold": result.threshold,
            "expected_precision": result.expected_precision,
            "timings_ms": result.timings_ms,
            "cached": result.cached,
        }
    )


def _log_row(item: MatchRequest, response: MatchResponse) -> dict:
    """One query_log row: `faq_id` is the FAQ served as the answer (None: no answer) and `score` the best
    match's score either way, so near misses under the threshold stay visible in the log."""
    best = response.matches[0] if response.matches else None
    return {
        "request_id": response.request_id,
        "created_at": datetime.now(timezone.utc),
        "arm": response.arm,
        "session_id": item.session_id,
        "query": response.query,
        "faq_id": response.answer.faq_id if response.answer else None,
        "score": best.score if best else None,
        "latency_ms": response.timings_ms.total,
        "index_version": response.index_version,
        "decision": response.decision,
    }


_FEEDBACK_ERRORS = {
    **BAD_INPUT_RESPONSES,
    403: {"model": ErrorBody, "description": "session_id differs from the one the request was sent with (or is "
                                             "missing, with FAQ_FEEDBACK_REQUIRES_SESSION)"},
    404: {"model": ErrorBody, "description": "unknown request_id"},
    409: {"model": ErrorBody,
          "description": "feedback for this request was already recorded, or the query log is disabled"},
    422: {"model": ErrorBody,
          "description": "a field is missing, unknown, of the wrong type or out of range, or faq_id is not in the KB"},
}


@router.post(
    "/feedback", response_model=FeedbackResponse, responses=_FEEDBACK_ERRORS,
    summary="Record whether a /match answer was right (and which FAQ was); once per request",
)
async def feedback(body: FeedbackRequest, state: KbState = Depends(get_state)) -> FeedbackResponse | JSONResponse:
    def refused(status_code: int, field: str, message: str) -> JSONResponse:
        return JSONResponse(status_code=status_code,
                            content={"error": message, "detail": [{"field": field, "message": message}]})

    try:
        found = await run_in_threadpool(state.record_feedback, body.request_id, body.correct, body.faq_id,
                                        body.session_id)
    except QueryLogDisabled as exc:
        raise HTTPException(status_code=status.HTTP_409_CONFLICT, detail=str(exc)) from exc
    except FaqNotFound as exc:
        # the same shape (and handler) as any other invalid field
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "faq_id"), "msg": str(exc)}]) from exc
    except FeedbackSessionMismatch as exc:
        return refused(status.HTTP_403_FORBIDDEN, "session_id", str(exc))
    except FeedbackAlreadyRecorded as exc:
        return refused(status.HTTP_409_CONFLICT, "request_id", str(exc))
    if not found:
        raise HTTPException(status_code=status.HTTP_404_NOT_FOUND, detail=f"unknown request_id {body.request_id!r}")
    return FeedbackResponse(request_id=body.request_id, recorded=True)
