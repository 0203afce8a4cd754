"""`GET /healthz` (the process is up), `GET /readyz` and `GET /kbs/{kb}/readyz` (that KB's index is loaded;
`degraded` names parts some arms need that cannot answer, e.g. Elasticsearch for the lexical arms) and
`GET /metrics` (FAQ_METRICS_TOKEN, when set, guards it).

Without a token, /kbs/{kb}/readyz answers from the KBs already resident and loads nothing (a non-resident
KB: 503 `NOT_RESIDENT_REASON`), and with FAQ_MATCH_REQUIRES_KEY it gives the 401 of /match for every KB
(app/api/deps.py `readiness_state`)."""
from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from app.api.deps import get_state, readiness_state, require_metrics_reader
from app.api.schemas import ErrorBody, Health, Readiness
from app.api.state import KbState
from app.match import NO_INDEX

router = APIRouter(tags=["health"])
#: mounted bare (the default KB) and under /kbs/{kb}: a KB is ready when its index is loaded
ready_router = APIRouter(tags=["health"])
#: readyz of a KB that exists but is not resident, to a caller without a token: loading it for them would
#: let anyone churn the resident KBs
NOT_RESIDENT_REASON = "not loaded in this process: it loads on its first match"


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def healthz() -> Health:
    return Health(status="ok")


@ready_router.get(
    "/readyz", response_model=Readiness,
    responses={503: {"model": Readiness, "description": "no index loaded (the reason says why)"},
               401: {"model": ErrorBody, "description": "/kbs/{kb}/readyz: FAQ_MATCH_REQUIRES_KEY is set and no valid "
                                                        "token was sent, or an invalid one was"},
               403: {"model": ErrorBody, "description": "/kbs/{kb}/readyz: the token is another KB's"}},
    summary="Readiness: an index is loaded and /match can answer",
)
async def readyz(state: KbState | None = Depends(readiness_state)) -> Response:
    if state is None:
        return JSONResponse(status_code=503, content=Readiness(ready=False, reason=NOT_RESIDENT_REASON).model_dump())
    retriever = state.retriever
    if retriever is None:
        reason = state.not_ready_reason or NO_INDEX
        return JSONResponse(status_code=503, content=Readiness(ready=False, reason=reason).model_dump())
    # ready = /match answers; a part that only some arms need is reported, not made fatal
    lexical = await run_in_threadpool(state.lexical_problem)
    degraded = {"lexical": lexical} if lexical else None
    encoder = state.encoder
    return JSONResponse(content=Readiness(
        ready=True, index_version=str(retriever.version), degraded=degraded,
        encoder_id=getattr(encoder, "id", None), encoder_runtime=getattr(encoder, "runtime", "torch"),
        query_encoder_id=getattr(state.query_encoder, "id", None), decision=state.decision_summary(),
    ).model_dump())


@router.get("/metrics", summary="Prometheus metrics (text exposition format)", response_class=Response,
            dependencies=[Depends(require_metrics_reader)],
            responses={401: {"model": ErrorBody, "description": "FAQ_METRICS_TOKEN is set and neither it nor "
                                                                "FAQ_ADMIN_TOKEN was sent"}})
async def metrics(state: KbState = Depends(get_state)) -> Response:
    body, content_type = state.metrics.exposition()
    return Response(content=body, media_type=content_type)
