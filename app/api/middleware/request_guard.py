"""The request guard: body size, time and type limits, and dropping the work of clients that have gone.

Its refusals (400, 408, 413, 415) are raised as HTTP exceptions when the endpoint reads its body, so the
app's error handlers (app/api/errors.py) answer them in the API's JSON shape (the console's problem page
under /console) and the metrics count them under their route.
"""
from __future__ import annotations

import asyncio
import re
from typing import Callable

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
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
