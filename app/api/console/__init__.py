"""The web console for FAQ owners at /console: server-rendered pages over the service's own state.

`mount_console(app)` adds its routes, its static files, its security headers and its sessions to an
app made by `app.api.main.create_app`. See app/api/console/README.md for the security model.
"""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.console import builds, imports, review, traffic  # noqa: F401 - their pages join `router`
from app.api.console.builds import BuildJobs
from app.api.console.review import LintJobs
from app.api.console.routes import Answer, router
from app.api.console.sessions import Sessions

PREFIX = "/console"

SECURITY_HEADERS = {
    "content-security-policy": ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every answer under /console, error pages and redirects included; pages
    (not the static files) are also never cached, so a signed-out browser cannot show them again."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        static = path.startswith(PREFIX + "/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.decode("latin-1").lower() not in SECURITY_HEADERS]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def mount_console(app: FastAPI) -> None:
    app.state.console_sessions = Sessions(lambda: app.state.service.store.console_sessions)
    app.state.console_builds = BuildJobs()
    app.state.console_lints = LintJobs()
    app.include_router(router)
    app.mount(PREFIX + "/static", StaticFiles(directory=Path(__file__).parent / "static"), name="console-static")
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(Answer)
    async def on_answer(request: Request, exc: Answer) -> Response:
        return exc.response
