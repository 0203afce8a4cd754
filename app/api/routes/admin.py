"""The admin API under /admin (KB `default`) and /kbs/{kb}/admin, behind `Authorization: Bearer <token>`:
FAQ_ADMIN_TOKEN reaches every KB, a KB's token (`faq kb token`) only that KB (app/api/deps.py), and only what
its role may do (app/api/roles.py: the GETs a viewer, FAQ writes an editor, reloading the index a publisher).

FAQ CRUD writes go to the store and then refresh the served retriever's delta at once (`service.refresh`
-> `KbState.refresh_kb` -> `Retriever.with_kb`), so an added/edited/deleted FAQ is matchable (or gone)
in the very next /match without an index rebuild. Handlers are plain `def`s: FastAPI runs them
in its thread pool, so database work and delta encoding never block the event loop.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response, status
from pydantic import BaseModel

from app.api import service
from app.api.deps import get_state
from app.api.roles import needs
from app.api.schemas import (
    ADMIN_REFUSALS,
    BAD_INPUT_RESPONSES,
    MAX_ID_CHARS,
    MAX_PAGE_OFFSET,
    STORABLE,
    ErrorBody,
    FaqCreate,
    FaqOutModel,
    FaqPage,
    FaqPatch,
    FaqReplace,
    IndexInfo,
    ReloadResult,
)
from app.api.state import KbState
from app.match import NoIndexError

log = logging.getLogger(__name__)

router = APIRouter(
    prefix="/admin",
    tags=["admin"],
    responses=ADMIN_REFUSALS,
)
_BAD_ID = {422: {"model": ErrorBody, "description": "the faq_id in the path is too long or not storable text"}}
_NOT_FOUND = {404: {"model": ErrorBody, "description": "no FAQ with that id"}, **_BAD_ID}
_WRITE = {**_NOT_FOUND, **BAD_INPUT_RESPONSES}

# A `%00` in the URL reaches the handler as a NUL character (invalid UTF-8 escapes arrive as U+FFFD):
# path and query text get the same STORABLE check as body fields.
FaqIdPath = Annotated[str, Path(max_length=MAX_ID_CHARS, description="the FAQ's id"), STORABLE]


class InvalidFaq(HTTPException):
    """The store's own checks (same rules as KB files) rejected the FAQ: 422 listing each problem."""

    def __init__(self, problems: list[str]):
        super().__init__(422, detail="invalid FAQ: " + "; ".join(problems[:5]))
        self.problems = problems


def _fields(body: Any, names: Any) -> dict[str, Any]:
    """The named FAQ fields of a request body as the store takes them (follow-ups as plain dicts)."""
    out = {name: getattr(body, name) for name in names}
    if out.get("follow_ups") is not None:
        out["follow_ups"] = [f.model_dump() for f in out["follow_ups"]]
    return out


def _invalid_faq(exc: Exception) -> InvalidFaq:
    return InvalidFaq(list(getattr(exc, "errors", None) or [str(exc)]))


@router.get("/faqs", dependencies=needs("viewer"), response_model=FaqPage, responses=BAD_INPUT_RESPONSES, summary="List FAQs (optionally filtered by text)")
def list_faqs(
    offset: int = Query(0, ge=0, le=MAX_PAGE_OFFSET),
    limit: int = Query(50, ge=1, le=500),
    q: Annotated[str | None, Query(min_length=1, max_length=200, description="substring of id, answer or question"),
                 STORABLE] = None,
    state: KbState = Depends(get_state),
) -> FaqPage:
    items = state.store.list_faqs(offset=offset, limit=limit, q=q)
    return FaqPage(total=state.store.count_faqs(q=q), offset=offset, limit=limit,
                   items=[service.faq_out(f) for f in items])


@router.post(
    "/faqs", dependencies=needs("editor"), response_model=FaqOutModel, status_code=status.HTTP_201_CREATED,
    responses={409: {"model": ErrorBody, "description": "an FAQ with that id exists"}, **BAD_INPUT_RESPONSES},
)
def create_faq(body: FaqCreate, state: KbState = Depends(get_state)) -> FaqOutModel:
    from app.store import FaqExists, KbValidationError

    try:
        faq = state.store.create_faq(body.faq_id, body.answer, body.questions, tags=body.tags,
                                     **_fields(body, ("metadata", "source", "follow_ups", "context_only", "answers")))
    except FaqExists as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=f"FAQ {body.faq_id!r} already exists: use PUT or PATCH") from exc
    except KbValidationError as exc:
        raise _invalid_faq(exc) from exc
    service.refresh(state)
    return service.faq_out(faq)


@router.get("/faqs/{faq_id}", dependencies=needs("viewer"), response_model=FaqOutModel, responses=_NOT_FOUND)
def get_faq(faq_id: FaqIdPath, state: KbState = Depends(get_state)) -> FaqOutModel:
    faq = state.store.get_faq(faq_id)
    if faq is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no FAQ {faq_id!r}")
    return service.faq_out(faq)


def _update(state: KbState, faq_id: str, **fields: Any) -> FaqOutModel:
    from app.store import FaqNotFound, KbValidationError

    try:
        faq = state.store.update_faq(faq_id, **fields)
    except FaqNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no FAQ {faq_id!r}") from exc
    except KbValidationError as exc:
        raise _invalid_faq(exc) from exc
    service.refresh(state)
    return service.faq_out(faq)


@router.put("/faqs/{faq_id}", dependencies=needs("editor"), response_model=FaqOutModel, responses=_WRITE, summary="Replace an FAQ")
def replace_faq(faq_id: FaqIdPath, body: FaqReplace, state: KbState = Depends(get_state)) -> FaqOutModel:
    return _update(state, faq_id, answer=body.answer, questions=body.questions, tags=body.tags,
                   **_fields(body, ("metadata", "source", "follow_ups", "context_only", "answers")))


@router.patch("/faqs/{faq_id}", dependencies=needs("editor"), response_model=FaqOutModel, responses=_WRITE, summary="Change some fields of an FAQ")
def patch_faq(faq_id: FaqIdPath, body: FaqPatch, state: KbState = Depends(get_state)) -> FaqOutModel:
    # a source left out is kept; `"source": null` clears it
    given = [f for f in ("metadata", "follow_ups", "context_only", "answers") if getattr(body, f) is not None]
    if "source" in body.model_fields_set:
        given.append("source")
    return _update(state, faq_id, answer=body.answer, questions=body.questions, tags=body.tags, **_fields(body, given))


@router.delete("/faqs/{faq_id}", dependencies=needs("editor"), status_code=status.HTTP_204_NO_CONTENT, responses=_NOT_FOUND)
def delete_faq(faq_id: FaqIdPath, state: KbState = Depends(get_state)) -> Response:
    if not state.store.delete_faq(faq_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no FAQ {faq_id!r}")
    service.refresh(state)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/index", dependencies=needs("viewer"), response_model=IndexInfo, summary="The served index: version, manifest, delta, tombstones")
def index_info(state: KbState = Depends(get_state)) -> IndexInfo:
    return IndexInfo.model_validate(state.index_info())


@router.post(
    "/index/reload", dependencies=needs("publisher"), response_model=ReloadResult,
    responses={503: {"model": ErrorBody, "description": "no build to load, or it could not be loaded"}},
    summary="Hot-swap to the current (newest verified) build",
)
def reload_index(state: KbState = Depends(get_state)) -> ReloadResult:
    # Runs in a worker thread: loading + applying the KB delta happens off the event loop, and the
    # swap itself is one reference assignment; in-flight requests keep the retriever they pinned.
    try:
        previous, version = state.load_current_build(reason="admin reload")
    except Exception as exc:
        log.exception("index reload failed")
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=f"reload failed: {exc}") from exc
    if version is None:
        raise NoIndexError(state.not_ready_reason)
    if previous != version:  # what this replica serves changed by someone's hand (the poller's swaps are not rows)
        state.store.audit.record("index.reload", version, {"version": previous}, {"version": version})
    return ReloadResult(previous_version=previous, version=version, swapped=previous != version)


#: most rows one audit request returns
MAX_AUDIT_LIMIT = 1000


class AuditEntryOut(BaseModel):
    """One change (app/store/audit.py): who (`actor`, `role`), through what (`source`: api, cli, console, compat),
    the request, what (`action` on `subject`) and the state before and after."""

    id: int
    kb: str
    created_at: datetime
    actor: str
    role: str
    source: str
    request_id: str | None
    action: str
    subject: str | None
    before: Any
    after: Any


class AuditLog(BaseModel):
    entries: list[AuditEntryOut]


@router.get("/audit", dependencies=needs("viewer"), response_model=AuditLog, responses=BAD_INPUT_RESPONSES,
            summary="The KB's audit log: every change, newest first")
def audit_log(
    since: Annotated[datetime | None, Query(description="only changes from then on (ISO 8601; no zone: UTC)")] = None,
    faq_id: Annotated[str | None, Query(min_length=1, max_length=MAX_ID_CHARS, description="only this FAQ's changes"),
                      STORABLE] = None,
    actor: Annotated[str | None, Query(min_length=1, max_length=200, description="only this actor's changes"),
                     STORABLE] = None,
    limit: int = Query(100, ge=1, le=MAX_AUDIT_LIMIT, description="at most this many, the newest"),
    state: KbState = Depends(get_state),
) -> AuditLog:
    rows = state.store.audit.read(since=since, faq_id=faq_id, actor=actor, limit=limit)
    return AuditLog(entries=[AuditEntryOut(**vars(r)) for r in rows])
