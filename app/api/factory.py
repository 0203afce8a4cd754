"""The FastAPI application factory.

`create_app(settings, store=None, encoder=None)` builds one app with its own state, housekeeping and metrics
registry (tests inject an already-loaded encoder and a temporary store; the server loads both from
settings at startup): the routes, bare (KB `default`) and under `/kbs/{kb}`, the console, the middleware
(app/api/middleware/) and the error handlers (app/api/errors.py, which also states the error contract).
"""
from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, AsyncIterator

from fastapi import Depends, FastAPI
from starlette.concurrency import run_in_threadpool

from app.api.console import mount_console
from app.api.deps import kb_path
from app.api.errors import add_exception_handlers
from app.api.housekeeping import Housekeeping
from app.api.metrics import ServiceMetrics
from app.api.middleware.metrics import MetricsMiddleware
from app.api.middleware.request_guard import MATCH_PATHS, RequestGuardMiddleware
from app.api.routes import admin, azure, health, match, publishing, qnamaker, review
from app.api.schemas import ErrorBody
from app.api.resident_kbs import ResidentKbs
from app.api.resources import ProcessResources
from app.api.state import KbState
from app.settings import DEFAULT_KB, Settings, get_settings

if TYPE_CHECKING:
    from app.store import FaqStore
    from models.encoders.base import Encoder

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, store: FaqStore | None = None,
               encoder: Encoder | None = None) -> FastAPI:
    settings = settings or get_settings()
    metrics = ServiceMetrics(kb_labels=settings.metrics_kb_labels)
    # the routes without /kbs/{kb} serve the default KB whatever FAQ_KB says (that is the CLI's default)
    resources = ProcessResources(settings.model_copy(update={"kb": DEFAULT_KB}), store=store, encoder=encoder,
                                 metrics=metrics)
    state = KbState(resources)
    resident_kbs = ResidentKbs(state)
    housekeeping = Housekeeping(state, resident_kbs)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await resources.start(state)
        try:
            await housekeeping.start()
            yield
        finally:
            await housekeeping.stop()
            # the console's answer checks take seconds; one cut off inside the encoder would abort the process
            await run_in_threadpool(app.state.console_lints.wait, 30.0)
            await resources.close(state)

    app = FastAPI(
        title="FAQ match",
        summary="Semantic FAQ retrieval: match a question to the knowledge base",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.service = state
    app.state.resident_kbs = resident_kbs
    app.state.housekeeping = housekeeping
    app.state.auth_throttle = resources.auth_throttle  # deps.py and the console's sign-in count failures in it

    # every KB's routes under /kbs/{kb}; the bare ones are the default KB's
    by_kb = {"prefix": "/kbs/{kb}", "dependencies": [Depends(kb_path)],
             "responses": {404: {"model": ErrorBody, "description": "no KB of that name (or no such item in it)"},
                           422: {"model": ErrorBody, "description": "a malformed KB name, or invalid input"}}}
    app.include_router(match.router)
    app.include_router(match.router, **by_kb)
    app.include_router(health.router)
    app.include_router(health.ready_router)
    app.include_router(health.ready_router, **by_kb)
    app.include_router(admin.router)
    app.include_router(admin.router, **by_kb)
    app.include_router(review.router)
    app.include_router(review.router, **by_kb)
    app.include_router(publishing.router)
    app.include_router(publishing.router, **by_kb)
    # the QnA Maker and Azure question answering runtime APIs, for bots moving here (docs/migrate-from-azure.md)
    app.include_router(qnamaker.router)
    app.include_router(azure.router)
    mount_console(app)
    if not settings.admin_token:
        log.warning("FAQ_ADMIN_TOKEN is not set: the /admin API answers only KB tokens (`faq kb token --role`)")

    # the last added middleware is the outermost: metrics also count the guard's 413/415 answers
    app.add_middleware(RequestGuardMiddleware, max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s, cancel_paths=MATCH_PATHS,
                       on_client_gone=metrics.client_gone.inc, form_prefixes=("/console/",),
                       upload_path=r"/console/kbs/[^/]+/import", max_upload_bytes=settings.max_upload_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    add_exception_handlers(app, metrics)
    return app
