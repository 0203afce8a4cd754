"""Publishing under /admin (KB `default`) and /kbs/{kb}/admin: publish the draft, list what was published, roll
back to an earlier publication, and diff any two contents (app/release/publishing.py).

A publish or rollback made here swaps production at once (`KbState.refresh_published`); one made by the CLI
is picked up by the KB poller. Handlers are plain `def`s: FastAPI runs them in its thread pool.
"""
from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from app.api.deps import get_state
from app.api.roles import needs
from app.api.schemas import (
    ADMIN_REFUSALS, BAD_INPUT_RESPONSES, STORABLE, ErrorBody, PublishRequest, RollbackRequest,
)
from app.api.state import KbState
from app.release.gate import content_gate, feedback_labels_of
from app.release.publishing import (
    DRAFT, NothingToPublish, Published, diff_of, publish, rollback,
)

log = logging.getLogger(__name__)

router = APIRouter(
    prefix="/admin",
    tags=["publishing"],
    responses=ADMIN_REFUSALS,
)
_CONFLICT = {409: {"model": ErrorBody, "description": "another publish finished first, the labels refused the "
                                                      "draft, or (rollback) the KB publishes immediately"}}


def _outcome(state: KbState, done: Published | None, nothing: NothingToPublish | None) -> dict[str, Any]:
    if nothing is not None:
        return {"published": False, "message": str(nothing), "latest": nothing.latest,
                "serving": state.published_id}
    assert done is not None
    try:
        state.refresh_published(reason=done.publication.kind)
    except Exception:  # the publication is stored: the poller serves it on its next pass
        log.exception("KB %s: could not serve publication %s yet", state.kb, done.publication.id)
    return {"published": True, "publication": done.publication.as_dict(), "changes": done.changes,
            "serving": state.published_id}


@router.post("/publish", dependencies=needs("publisher"), responses={**BAD_INPUT_RESPONSES, **_CONFLICT},
             summary="Publish the draft: production answers from it (a KB with publishing=reviewed)")
def publish_draft(body: PublishRequest | None = None, state: KbState = Depends(get_state)) -> dict[str, Any]:
    body = body or PublishRequest()
    gate = None
    retriever = state.retriever
    if retriever is not None and state.encoder is not None:
        gate = content_gate(state.settings, state.encoder, retriever, feedback_labels_of(state.store))
    try:
        done = publish(state.store, body.note, gate=gate, force=body.force)
    except NothingToPublish as nothing:
        return _outcome(state, None, nothing)
    return _outcome(state, done, None)


@router.get("/published", dependencies=needs("viewer"), responses=BAD_INPUT_RESPONSES,
            summary="The KB's publications, newest first")
def published(state: KbState = Depends(get_state),
              limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> dict[str, Any]:
    return {"publications": [p.as_dict() for p in state.store.publications.list(limit)],
            "serving": state.published_id, "publishing": state.settings.publishing}


@router.post("/rollback", dependencies=needs("publisher"), responses={**BAD_INPUT_RESPONSES, **_CONFLICT,
                                     404: {"model": ErrorBody, "description": "no such publication in this KB"}},
             summary="Serve an earlier publication's content on production again (the draft is kept)")
def roll_back(body: RollbackRequest, state: KbState = Depends(get_state)) -> dict[str, Any]:
    try:
        done = rollback(state.store, body.to, body.note, reviewed=state.reviewed)
    except NothingToPublish as nothing:
        return _outcome(state, None, nothing)
    return _outcome(state, done, None)


@router.get("/diff", dependencies=needs("viewer"),
            responses={404: {"model": ErrorBody, "description": "no such publication in this KB"}, **BAD_INPUT_RESPONSES},
            summary="What changed between two publications, or a publication and the draft")
def diff(state: KbState = Depends(get_state),
         start: Annotated[str | None, Query(alias="from", max_length=20, description="a publication id; unset: the "
                                            "latest"), STORABLE] = None,
         end: Annotated[str, Query(alias="to", max_length=20, description="draft or a publication id"),
                        STORABLE] = DRAFT) -> dict[str, Any]:
    return diff_of(state.store, start, end)
