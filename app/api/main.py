"""The FastAPI application factory, error handling and the request-guard middleware.

`create_app(settings, store=None, encoder=None)` builds one app with its own state, housekeeping and metrics
registry (tests inject an already-loaded encoder and a temporary store; the server loads both from
settings at startup). `app` (module attribute, created on first access) is what
`uvicorn app.api.main:app` and `faq serve` run.

Error contract: every error body is JSON `{"error": "...", ...}`.
- validation problems -> 422 `{"error": "invalid request: top_k must be <= 50",
  "detail": [{"field": "top_k", "message": "must be <= 50"}]}`; malformed JSON -> 400 (same shape);
- body over settings.max_body_bytes -> 413 (Content-Length checked first, then streamed bytes counted);
- a body that is not JSON (Content-Type) -> 415; a body not received within FAQ_BODY_TIMEOUT_S -> 408
  (and the connection is closed);
- match queue full -> 503, or 429 for batch requests that have used their half of it, both with
  Retry-After; not answered within FAQ_REQUEST_TIMEOUT_MS -> 503 with Retry-After;
- no index -> 503 "no index built: run `faq index build`";
- lexical arm while its engine is unavailable (Elasticsearch down, no lexical index) -> 503 naming it;
- anything else unexpected -> 500 `{"error": "internal server error", "request_id": ...}`, logged with
  the traceback. Client input must never reach this handler (tests fuzz /match to check).
"""
from __future__ import annotations

import asyncio
import logging
import re
import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.deps import kb_path
from app.api.housekeeping import Housekeeping
from app.api.metrics import MetricsMiddleware, ServiceMetrics
from app.api.schemas import ErrorBody
from app.api.routes import admin, health, match, review
from app.api.resident_kbs import ResidentKbs
from app.api.resources import ProcessResources
from app.api.state import NO_INDEX_REASON, KbState
from app.api.workers import DeadlineExceeded, Overloaded
from app.api.console import mount_console
from app.pipeline import NoIndexError
from index.es_vectors import VectorStoreUnavailable
from index.lexical import LexicalUnavailable
from app.settings import DEFAULT_KB, Settings, get_settings

if TYPE_CHECKING:
    from app.store import FaqStore
    from models.encoders.base import Encoder

log = logging.getLogger(__name__)

_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


# -- validation error formatting ------------------------------------------------------------------
def _field_name(loc: tuple | list) -> str:
    """("body", "queries", 3, "top_k") -> "queries[3].top_k"; ("query", "limit") -> "limit"."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    if not parts:
        return "body"
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += ("." if name else "") + str(part)
    return name


def _message(error: dict) -> str:
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "field required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} items"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items"
    bounds = {"less_than_equal": ("<=", "le"), "less_than": ("<", "lt"),
              "greater_than_equal": (">=", "ge"), "greater_than": (">", "gt")}
    if kind in bounds:
        op, key = bounds[kind]
        return f"must be {op} {ctx.get(key)}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return "must be a number" if kind != "finite_number" else "must be a finite number"
    if kind in ("bool_type", "bool_parsing"):
        return "must be true or false"
    if kind in ("string_type", "string_unicode"):
        return "must be a string"
    if kind == "list_type":
        return "must be a list"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "must be a JSON object"
    if kind == "json_invalid":
        return f"invalid JSON: {ctx.get('error', 'could not decode')}"
    if kind == "value_error":
        return str(error.get("msg", "")).removeprefix("Value error, ")
    return str(error.get("msg", "invalid value"))


def format_validation_errors(errors: list[dict]) -> list[dict[str, str]]:
    out = []
    for error in errors:
        field = "body" if error.get("type") == "json_invalid" else _field_name(error.get("loc", ()))
        out.append({"field": field, "message": _message(error)})
    return out


def _error(status_code: int, message: str, headers: dict | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=status_code, content={"error": message, **extra}, headers=headers)


# -- request guard middleware ---------------------------------------------------------------------
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RequestGuardMiddleware:
    """Rejects oversized, slow and non-JSON bodies, and drops the work of clients that have gone.

    Content-Length is checked first (cheap, no read); otherwise the body is read while counting
    bytes, so a chunked upload or a lying Content-Length cannot exceed the limit either (reading
    stops at the limit). A body that does not arrive within `body_timeout_s` gets a 408 and the
    connection is closed, so half-sent bodies cannot hold connections open. The small body is then
    replayed to the app. A rejected request is still routed, and the error is raised when the endpoint
    reads its body: it is then answered by the app's error handlers like any other error and counted
    under its route template in the metrics.

    On `cancel_paths` (the match routes) the request runs as a task while the connection is watched:
    when the client disconnects before the answer, the task is cancelled, which drops the request's
    queued work (MatchBatcher), so abandoned requests cost nothing.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout_s: float = 10.0,
                 cancel_paths: tuple[str, ...] = (), on_client_gone: Callable[[], None] | None = None,
                 form_prefixes: tuple[str, ...] = (), upload_path: str | None = None,
                 max_upload_bytes: int | None = None) -> None:
        self.app = app
        # the console's KB file upload gets its own, larger limit (FAQ_MAX_UPLOAD_BYTES)
        self.upload_path = re.compile(upload_path) if upload_path else None
        self.max_upload_bytes = max_upload_bytes or max_body_bytes
        # the console's HTML forms post urlencoded (and its upload multipart) bodies: size and time limits
        # still apply to them
        self.form_prefixes = form_prefixes
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.cancel_paths = frozenset(cancel_paths)
        self.on_client_gone = on_client_gone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.upload_path is not None and self.upload_path.fullmatch(scope.get("path", "")):
            limit, setting = self.max_upload_bytes, "FAQ_MAX_UPLOAD_BYTES"
        else:
            limit, setting = self.max_body_bytes, "FAQ_MAX_BODY_BYTES"
        too_large = f"request body too large: the limit is {limit} bytes ({setting})"
        problem: StarletteHTTPException | None = None
        body = b""
        declared = headers.get("content-length")
        if declared is not None and (not declared.strip().isdigit()):
            problem = StarletteHTTPException(400, f"invalid Content-Length header {declared!r}")
        elif declared is not None and int(declared) > limit:
            problem = StarletteHTTPException(413, f"{too_large}; Content-Length is {int(declared)}")
        else:
            chunks: list[bytes] = []
            size = 0
            deadline = asyncio.get_running_loop().time() + self.body_timeout_s
            while True:
                try:
                    message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
                except TimeoutError:
                    problem = StarletteHTTPException(
                        408, f"request body not received within {self.body_timeout_s:g} s (FAQ_BODY_TIMEOUT_S)",
                        headers={"Connection": "close"})
                    break
                if message["type"] == "http.disconnect":
                    return  # client went away: nothing to answer
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    problem = StarletteHTTPException(413, too_large)
                    break
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            content_type = headers.get("content-type", "")
            # the console's forms: urlencoded, and multipart for its KB file upload
            form_ok = content_type.split(";")[0].strip().lower() in _FORM_TYPES and \
                scope.get("path", "").startswith(self.form_prefixes or ("\0",))
            if problem is None and body and content_type and not _is_json(content_type) and not form_ok:
                problem = StarletteHTTPException(
                    415, f"Content-Type must be application/json, got {content_type.split(';')[0]!r}")

        watch = problem is None and _route_path(scope.get("path", "")) in self.cancel_paths
        gone = asyncio.Event()
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if problem is not None:
                raise problem
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            if watch:  # the watcher below owns the connection's receive channel
                await gone.wait()
                return {"type": "http.disconnect"}
            return await receive()  # after the body: wait for the disconnect as usual

        if not watch:
            await self.app(scope, replay, send)
            return

        answered = False

        async def tracking_send(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                answered = True
            await send(message)

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        request = asyncio.ensure_future(self.app(scope, replay, tracking_send))
        watcher = asyncio.ensure_future(watch_disconnect())
        try:
            await asyncio.wait({request, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not request.done() and not answered:
                request.cancel()  # the client has gone: stop its work
                if self.on_client_gone is not None:
                    self.on_client_gone()
            try:
                await request
            except asyncio.CancelledError:
                if not gone.is_set():
                    raise  # the server is cancelling us (shutdown), not a client that left
        finally:
            watcher.cancel()
            if not request.done():
                request.cancel()


#: the routes whose work is dropped when their client disconnects (bare and under /kbs/{kb})
MATCH_PATHS = ("/match", "/match/batch")


def _route_path(path: str) -> str:
    """"/kbs/shop/match" -> "/match": a KB's route as its bare twin."""
    if path.startswith("/kbs/"):
        rest = path[5:].partition("/")[2]
        return "/" + rest
    return path


def _is_json(content_type: str) -> bool:
    mime = content_type.split(";")[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


# -- the app factory ----------------------------------------------------------------------------
def create_app(settings: Settings | None = None, *, store: FaqStore | None = None,
               encoder: Encoder | None = None) -> FastAPI:
    settings = settings or get_settings()
    metrics = ServiceMetrics()
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
    mount_console(app)
    if not settings.admin_token:
        log.warning("FAQ_ADMIN_TOKEN is not set: the /admin API answers only KB admin tokens (`faq kb token`)")

    # the last added middleware is the outermost: metrics also count the guard's 413/415 answers
    app.add_middleware(RequestGuardMiddleware, max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s, cancel_paths=MATCH_PATHS,
                       on_client_gone=metrics.client_gone.inc, form_prefixes=("/console/",),
                       upload_path=r"/console/kbs/[^/]+/import", max_upload_bytes=settings.max_upload_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        detail = format_validation_errors(errors)
        if any(e.get("type") == "json_invalid" for e in errors):
            return _error(400, f"invalid JSON body: {detail[0]['message'].removeprefix('invalid JSON: ')}", detail=detail)
        summary = "; ".join(f"{d['field']} {d['message']}" for d in detail[:3])
        return _error(422, f"invalid request: {summary}", detail=detail)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(NoIndexError)
    async def on_no_index(request: Request, exc: NoIndexError) -> JSONResponse:
        return _error(503, str(exc) or NO_INDEX_REASON, headers={"Retry-After": "30"})

    @app.exception_handler(LexicalUnavailable)
    async def on_lexical_unavailable(request: Request, exc: LexicalUnavailable) -> JSONResponse:
        # only the lexical arms depend on it: the ann arms keep serving
        return _error(503, f"the lexical arms are unavailable: {exc}; the ann arms keep serving (send \"arm\": \"ann\")",
                      headers={"Retry-After": "10"})

    @app.exception_handler(VectorStoreUnavailable)
    async def on_vector_store_unavailable(request: Request, exc: VectorStoreUnavailable) -> JSONResponse:
        return _error(503, f"the vector store is unavailable: {exc}", headers={"Retry-After": "10"})

    @app.exception_handler(Overloaded)
    async def on_overloaded(request: Request, exc: Overloaded) -> JSONResponse:
        metrics.rejected.labels(status=str(exc.status_code)).inc()
        return _error(exc.status_code, str(exc), headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(DeadlineExceeded)
    async def on_deadline(request: Request, exc: DeadlineExceeded) -> JSONResponse:
        return _error(503, str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def on_server_bug(request: Request, exc: Exception) -> JSONResponse:
        request_id = uuid.uuid4().hex
        log.error("unhandled error (request_id=%s) on %s %s", request_id, request.method, request.url.path, exc_info=exc)
        return _error(500, "internal server error", request_id=request_id)

    return app


def __getattr__(name: str) -> Any:
    """`app` is created on first access (by uvicorn), not at import time, so importing this module
    (tests, `faq serve --help`) does not read settings or log the admin warning."""
    if name == "app":
        application = create_app()
        globals()["app"] = application
        return application
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
