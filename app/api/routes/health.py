"""`GET /healthz` (the process is up), `GET /readyz` and `GET /kbs/{kb}/readyz` (that KB's index is loaded;
`degraded` names parts some arms need that cannot answer, e.g. Elasticsearch for the lexical arms) and
`GET /metrics`."""
from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from app.api.deps import get_state
from app.api.schemas import Health, Readiness
from app.api.state import NO_INDEX_REASON, KbState

router = APIRouter(tags=["health"])
#: mounted bare (the default KB) and under /kbs/{kb}: a KB is ready when its index is loaded
ready_router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def healthz() -> Health:
    return Health(status="ok")


@ready_router.get(
    "/readyz", response_model=Readiness,
    responses={503: {"model": Readiness, "description": "no index loaded (the reason says why)"}},
    summary="Readiness: an index is loaded and /match can answer",
)
async def readyz(state: KbState = Depends(get_state)) -> Response:
    retriever = state.retriever
    if retriever is None:
        reason = state.not_ready_reason or NO_INDEX_REASON
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


@router.get("/metrics", summary="Prometheus metrics (text exposition format)", response_class=Response)
async def metrics(state: KbState = Depends(get_state)) -> Response:
    body, content_type = state.metrics.exposition()
    return Response(content=body, media_type=content_type)
