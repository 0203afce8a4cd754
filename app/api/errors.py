"""The API's error contract: every error body is JSON `{"error": "...", ...}`.

- validation problems -> 422 `{"error": "invalid request: top_k must be <= 50",
  "detail": [{"field": "top_k", "message": "must be <= 50"}]}`; malformed JSON -> 400 (same shape), and
  so is JSON the parser refuses (nested deeper than its recursion allows, an integer of more digits than
  Python converts, bytes that are not UTF-8), naming why;
- body over settings.max_body_bytes -> 413 (Content-Length checked first, then streamed bytes counted);
- a body that is not JSON (Content-Type) -> 415; a body not received within FAQ_BODY_TIMEOUT_S -> 408
  (and the connection is closed); these four come from the request guard (app/api/middleware/request_guard.py)
  as HTTP exceptions, answered here;
- match queue full -> 503, or 429 for batch requests that have used their half of it, both with
  Retry-After; not answered within FAQ_REQUEST_TIMEOUT_MS -> 503 with Retry-After;
- the service's own errors (`problem_of`, one table for every edge): no index -> 503 "no index built: run
  `faq index build`"; a `+rerank` arm without a re-ranker -> 409; a KB whose stored settings are refused -> 503;
- lexical arm while its engine is unavailable (Elasticsearch down, no lexical index) -> 503 naming it;
- anything else unexpected -> 500 `{"error": "internal server error", "request_id": ...}`, logged with
  the traceback. Client input must never reach this handler (tests fuzz /match to check).

`add_exception_handlers(app, metrics)` registers them on an app (`create_app` does). Paths with a page of
their own for errors (the console's HTML problem page under /console, registered with `add_error_page`)
get that page instead, with the same status and headers; every other path keeps the JSON above.
"""
from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.metrics import ServiceMetrics
from app.settings import KbSettingsRefused
from app.api.workers import DeadlineExceeded, Overloaded
from app.match import NoIndexError, NoStagesError
from app.release.publishing import PublishingError
from index.elasticsearch.vectors import VectorStoreUnavailable
from index.lexical import LexicalUnavailable
from kb.files import huge_number_problem, nesting_problem

log = logging.getLogger(__name__)


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
        cause = (error.get("ctx") or {}).get("error")
        part, reason = getattr(cause, "field", None), getattr(cause, "reason", None)
        if isinstance(part, str) and isinstance(reason, str):
            # a grammar's own error (kb/filters.py FilterError) names the part inside the field: filter.any[0].tag
            loc = error.get("loc", ())
            head = str(loc[-1]) if loc else ""
            out.append({"field": field + part[len(head):] if part.startswith(head) else field, "message": reason})
            continue
        out.append({"field": field, "message": _message(error)})
    return out


# FastAPI answers any exception of json.loads but a syntax error with this 400, the parser's exception as
# its cause
_UNPARSED_BODY = "There was an error parsing the body"
_DIGITS = re.compile(r"value has (\d+) digits")


def body_problem(cause: BaseException | None) -> str | None:
    """Why the JSON parser refused a request body (from the exception it raised), or None."""
    if isinstance(cause, RecursionError):
        return nesting_problem()
    if isinstance(cause, UnicodeDecodeError):
        return f"not valid {cause.encoding} ({cause.reason} at byte {cause.start})"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        digits = _DIGITS.search(str(cause))
        return huge_number_problem(int(digits.group(1)) if digits else None)
    return None


def error_response(status_code: int, message: str, headers: dict | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=status_code, content={"error": message, **extra}, headers=headers)


#: (request, status, message, headers, extra fields) -> the error as that path's page, or None: the JSON body
ErrorPage = Callable[[Request, int, str, dict[str, str] | None, dict[str, Any]], Response | None]


def add_error_page(app: FastAPI, page: ErrorPage) -> None:
    """Let `page` answer the app's errors first (it returns None for the paths it does not own)."""
    app.state.error_pages = [*getattr(app.state, "error_pages", []), page]


def answer_error(request: Request, status_code: int, message: str, headers: dict | None = None,
                 **extra: Any) -> Response:
    for page in getattr(request.app.state, "error_pages", ()):
        response = page(request, status_code, message, headers, extra)
        if response is not None:
            return response
    return error_response(status_code, message, headers=headers, **extra)


# -- the service's errors: one table ----------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """An error the service raises that is not a bug, as every edge answers it: the JSON errors here, the
    compat routes' shapes (app/api/compat.py) and the console's pages (app/api/console/try_page.py)."""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


#: the errors `problem_of` answers (each raised with its message by the code that knows why)
SERVICE_ERRORS: tuple[type[Exception], ...] = (KbSettingsRefused, NoIndexError, NoStagesError, Overloaded,
                                                 DeadlineExceeded, LexicalUnavailable, VectorStoreUnavailable,
                                                 PublishingError)


def problem_of(exc: BaseException) -> Problem | None:
    """The status, message and headers of one of SERVICE_ERRORS; None for anything else."""
    if isinstance(exc, KbSettingsRefused):  # not the client's fault, nor passing: fixed by the KB's operator
        return Problem(503, str(exc))
    if isinstance(exc, NoIndexError):
        return Problem(503, str(exc), {"Retry-After": "30"})
    if isinstance(exc, NoStagesError):
        return Problem(409, str(exc))
    if isinstance(exc, Overloaded):
        return Problem(exc.status_code, str(exc), {"Retry-After": str(exc.retry_after)})
    if isinstance(exc, DeadlineExceeded):
        return Problem(503, str(exc), {"Retry-After": "1"})
    if isinstance(exc, LexicalUnavailable):  # only the lexical arms depend on it: the ann arms keep serving
        return Problem(503, f"the lexical arms are unavailable: {exc}; the ann arms keep serving (send \"arm\": "
                            f"\"ann\")", {"Retry-After": "10"})
    if isinstance(exc, VectorStoreUnavailable):
        return Problem(503, f"the vector store is unavailable: {exc}", {"Retry-After": "10"})
    if isinstance(exc, PublishingError):  # each kind carries its status: 404 unknown id, 409 conflict, 422 note
        return Problem(exc.status, str(exc))
    return None


# -- the handlers ---------------------------------------------------------------------------------
def add_exception_handlers(app: FastAPI, metrics: ServiceMetrics) -> None:
    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = list(exc.errors())
        detail = format_validation_errors(errors)
        if any(e.get("type") == "json_invalid" for e in errors):
            return answer_error(request, 400,
                                f"invalid JSON body: {detail[0]['message'].removeprefix('invalid JSON: ')}",
                                detail=detail)
        summary = "; ".join(f"{d['field']} {d['message']}" for d in detail[:3])
        return answer_error(request, 422, f"invalid request: {summary}", detail=detail)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and exc.detail == _UNPARSED_BODY:
            problem = body_problem(exc.__cause__)
            if problem is not None:
                return answer_error(request, 400, f"invalid JSON body: {problem}",
                                    detail=[{"field": "body", "message": problem}])
        return answer_error(request, exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    async def on_service_error(request: Request, exc: Exception) -> Response:
        problem = problem_of(exc)
        assert problem is not None  # registered for the table's types only
        if isinstance(exc, Overloaded):
            metrics.rejected.labels(status=str(problem.status)).inc()
        return answer_error(request, problem.status, problem.message, headers=problem.headers or None)

    for kind in SERVICE_ERRORS:
        app.add_exception_handler(kind, on_service_error)

    @app.exception_handler(Exception)
    async def on_server_bug(request: Request, exc: Exception) -> Response:
        request_id = uuid.uuid4().hex
        log.error("unhandled error (request_id=%s) on %s %s", request_id, request.method, request.url.path,
                  exc_info=exc)
        return answer_error(request, 500, "internal server error", request_id=request_id)
