"""The review queues over the admin API (/admin/review, /kbs/{kb}/admin/review), the same queues the
console's review page and `faq kb mine` / `faq kb lint` show (app/curation/review.py): list what is proposed,
accept a mined phrasing, dismiss an item with a reason, list and take back dismissals."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response, status

from app.curation import review
from app.api import service
from app.api.deps import get_state
from app.api.roles import needs
from app.api.schemas import (
    ADMIN_REFUSALS, BAD_INPUT_RESPONSES, AcceptResult, DismissalOut, DismissRequest, ErrorBody, ReviewKey, ReviewQueues,
)
from app.api.state import KbState
from app.store.reviews import lint_key

router = APIRouter(
    prefix="/admin/review",
    tags=["review"],
    responses=ADMIN_REFUSALS,
)
_GONE = {409: {"model": ErrorBody, "description": "the item is not (or no longer) proposed"}}


@router.get("", dependencies=needs("viewer"), response_model=ReviewQueues, responses=BAD_INPUT_RESPONSES,
            summary="Mined phrasings and unanswered clusters waiting for review (dismissed ones left out)")
def queues(since: Annotated[datetime | None, Query(description="only queries logged from then on (ISO 8601)")] = None,
           state: KbState = Depends(get_state)) -> ReviewQueues:
    report = state.review_queues(since)
    return ReviewQueues(phrasings=report["phrasings"], clusters=report["clusters"],
                        dismissed_phrasings=report["stats"]["dismissed_phrasings"],
                        dismissed_clusters=report["stats"]["dismissed_clusters"])


@router.post("/phrasings/{key}/accept", dependencies=needs("editor"), response_model=AcceptResult,
             responses={**_GONE, 404: {"model": ErrorBody, "description": "the FAQ was deleted"}, **BAD_INPUT_RESPONSES},
             summary="Add a mined phrasing to its FAQ")
def accept(key: Annotated[ReviewKey, Path()], since: datetime | None = None,
           state: KbState = Depends(get_state)) -> AcceptResult:
    from app.store import FaqNotFound, KbValidationError

    try:
        accepted = review.accept_phrasing(state.store, key, since)
    except review.NotProposed as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from exc
    except FaqNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc)) from exc
    except KbValidationError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=f"the phrasing cannot be added: {exc}") from exc
    service.refresh(state)
    return AcceptResult(faq=service.faq_out(accepted.faq), added=accepted.added)


@router.post("/dismissals", dependencies=needs("editor"), status_code=status.HTTP_201_CREATED, response_model=DismissalOut,
             responses={**_GONE, 404: {"model": ErrorBody, "description": "no such FAQ (lint)"}, **BAD_INPUT_RESPONSES},
             summary="Dismiss a proposed phrasing, an unanswered cluster or a lint finding")
def dismiss(body: DismissRequest, response: Response, since: datetime | None = None,
            state: KbState = Depends(get_state)) -> DismissalOut:
    store = state.store
    if body.queue == "lint":
        faq = store.get_faq(body.faq_id)
        if faq is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no FAQ {body.faq_id!r}")
        key, subject = lint_key(faq.faq_id, faq.answer), faq.faq_id
    else:
        item = review.find(state.review_queues(since), body.queue, body.key)
        if item is None:
            raise HTTPException(status.HTTP_409_CONFLICT, detail=f"no {body.queue} with that key is proposed now")
        key = body.key
        subject = (f"{item['faq_id']}: {item['question']}" if body.queue == "phrasing"
                   else "; ".join(q["query"] for q in item["queries"][:5]))
    try:
        if not review.dismiss(store, body.queue, key, subject, body.reason, "the admin API"):
            response.status_code = status.HTTP_200_OK  # already dismissed: the first reason stands
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from exc
    found = next(d for d in store.reviews.dismissed(body.queue) if d.key == key)
    return DismissalOut(**vars(found))


@router.get("/dismissals", dependencies=needs("viewer"), response_model=list[DismissalOut], summary="What was dismissed, newest first")
def dismissals(state: KbState = Depends(get_state)) -> list[DismissalOut]:
    return [DismissalOut(**vars(d)) for d in state.store.reviews.dismissed()]


@router.delete("/dismissals/{queue}/{key}", dependencies=needs("editor"), status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"model": ErrorBody, "description": "nothing dismissed under that key"},
                          **BAD_INPUT_RESPONSES},
               summary="Take a dismissal back: the item is proposed again where it still applies")
def restore(queue: Annotated[str, Path(pattern="^(phrasing|cluster|lint)$")], key: Annotated[ReviewKey, Path()],
            state: KbState = Depends(get_state)) -> Response:
    if not state.store.reviews.restore(queue, key):
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail="nothing dismissed under that key")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
