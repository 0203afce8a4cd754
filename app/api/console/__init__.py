"""The web console for FAQ owners at /console: server-rendered pages over the service's own state.

`mount_console(app)` adds its pages, its static files, its security headers, its error pages and its
sessions to an app made by `app.api.factory.create_app`. See app/api/console/README.md for the security model.
"""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.staticfiles import StaticFiles

from app.api.console import (
    builds, faqs, history, imports, publishing, review, signin, small_talk, traffic, try_page,
)
from app.api.console.builds import BuildJobs
from app.api.console.pages import PREFIX, EarlyResponse, console_principal, error_page
from app.api.console.review import LintJobs
from app.api.console.sessions import Sessions
from app.api.errors import add_error_page
from app.api.middleware.security_headers import SECURITY_HEADERS, SecurityHeadersMiddleware

__all__ = ["PREFIX", "SECURITY_HEADERS", "mount_console"]

#: in the order their routes are matched
PAGES = (signin, try_page, faqs, builds, imports, review, traffic, small_talk, history, publishing)


def mount_console(app: FastAPI) -> None:
    app.state.console_sessions = Sessions(lambda: app.state.service.store.console_sessions)
    app.state.console_builds = BuildJobs()
    app.state.console_lints = LintJobs()
    app.state.console_principal = console_principal  # app/api/roles.py require_role's check of a console page
    for page in PAGES:
        app.include_router(page.router)
    app.mount(PREFIX + "/static", StaticFiles(directory=Path(__file__).parent / "static"), name="console-static")
    app.add_middleware(SecurityHeadersMiddleware, prefix=PREFIX)
    add_error_page(app, error_page)  # its errors are pages too, never the API's JSON

    @app.exception_handler(EarlyResponse)
    async def on_early_response(request: Request, exc: EarlyResponse) -> Response:
        return exc.response
