"""`SecurityHeadersMiddleware`: the console's security headers on every answer under its prefix.

A middleware rather than a header set by each page, so error pages, redirects and the static files get
them too (app/api/console/README.md, "Security model").
"""
from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SECURITY_HEADERS = {
    "content-security-policy": ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


class SecurityHeadersMiddleware:
    """Adds SECURITY_HEADERS to every answer under `prefix`, error pages and redirects included; pages
    (not the static files under `prefix`/static/) are also never cached, so a signed-out browser cannot
    show them again."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == self.prefix or path.startswith(self.prefix + "/")):
            await self.app(scope, receive, send)
            return
        static = path.startswith(self.prefix + "/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                # an error page may bring its own (app/api/console/pages.py): each is sent once
                replaced = set(SECURITY_HEADERS) if static else {*SECURITY_HEADERS, "cache-control"}
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode("latin-1").lower() not in replaced]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
