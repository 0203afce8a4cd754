"""The HTTP protocol `faq serve` gives uvicorn: uvicorn's own, plus a deadline for request headers.

uvicorn times idle keep-alive connections but not a request whose headers trickle in (slowloris): such a
connection would stay open forever and, many of them, use up FAQ_MAX_CONNECTIONS. Bodies are timed by
the request guard (app/api/middleware/request_guard.py), which only sees a request once its headers are
complete; this closes a connection whose request headers have not all arrived within FAQ_BODY_TIMEOUT_S of the
connection opening or, on a keep-alive connection, of the request's first bytes (idle keep-alive
connections are uvicorn's own business: it closes them after 5 s).

It relies on what both of uvicorn's HTTP/1.1 protocols (h11 and httptools) have: `data_received`,
`transport`, `loop`, and `cycle`, the request being served (a new one appears when a request's headers
are complete; `response_complete` once it is answered).
"""
from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol


class HeaderTimeoutProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    #: seconds; None = FAQ_BODY_TIMEOUT_S (read when the first connection opens, in the worker process)
    header_timeout_s: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        idle = self.cycle is None or self.cycle.response_complete
        if idle and self._header_timer is None:
            self._arm()  # the first bytes of the next request on a keep-alive connection
        super().data_received(data)
        if self._header_timer is not None and self.cycle is not self._waiting_since:
            self._disarm()  # the headers of a new request are complete

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._waiting_since: Any = self.cycle
        self._header_timer = self.loop.call_later(_timeout(type(self)), self._headers_too_slow)

    def _disarm(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.cycle is self._waiting_since and not self.transport.is_closing():
            self.transport.close()


def _timeout(cls: type[HeaderTimeoutProtocol]) -> float:
    if cls.header_timeout_s is None:
        from app.settings import get_settings

        cls.header_timeout_s = float(get_settings().body_timeout_s)
    return cls.header_timeout_s
