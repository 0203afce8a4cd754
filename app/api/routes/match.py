"""`POST /match`, `POST /match/batch` and `POST /feedback`, bare (KB `default`) and under /kbs/{kb}.

The handlers only validate and call the shared verbs (app/api/service.py): `service.match` pins the served
retriever and hands the queries to the MatchBatcher (encode and search run in its bounded thread pool); the
query log is written later by a background thread.
"""
from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app.api import service
from app.api.deps import get_state, require_any_key, require_reader
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
from app.store import FaqNotFound, FeedbackAlreadyRecorded, FeedbackSessionMismatch

router = APIRouter(tags=["match"], dependencies=[Depends(require_reader)], responses={
    401: {"model": ErrorBody, "description": "FAQ_MATCH_REQUIRES_KEY is set and no valid token was sent"},
    403: {"model": ErrorBody, "description": "FAQ_MATCH_REQUIRES_KEY is set and the token is another KB's"},
    429: {"model": ErrorBody, "description": "FAQ_MATCH_REQUIRES_KEY is set and this address sent too many wrong "
                                             "tokens (Retry-After); a batch also when its share of the queue is full"}})

_ERRORS = {
    **BAD_INPUT_RESPONSES,
    409: {"model": ErrorBody, "description": "rerank requested but no re-ranker is installed"},
    503: {"model": ErrorBody, "description": "no index built yet, overloaded, or (lexical arms) the lexical engine is unavailable"},
}


@router.post("/match", response_model=MatchResponse, responses=_ERRORS, summary="Match one query to the FAQ")
async def match(body: MatchRequest, request: Request, state: KbState = Depends(get_state)) -> MatchResponse:
    if body.deployment == "test":
        await require_any_key(request)
    return (await service.match(state, [body]))[0]


@router.post(
    "/match/batch", response_model=BatchMatchResponse, responses=_ERRORS,
    summary="Match up to 64 queries (encoded in one encoder call)",
)
async def match_batch(body: BatchMatchRequest, request: Request,
                      state: KbState = Depends(get_state)) -> BatchMatchResponse:
    if body.queries[0].deployment == "test":
        await require_any_key(request)
    return BatchMatchResponse(results=await service.match(state, body.queries))


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
        found = await service.record_feedback(state, body.request_id, body.correct, body.faq_id, body.session_id)
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
