"""The HTTP protocol `faq serve` runs: a connection whose request headers trickle in is closed, on a
real uvicorn server on loopback; normal and keep-alive requests are unaffected."""
from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn

from app.api.server import HeaderTimeoutProtocol
from tests.helpers.waiting import until


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


class Timed(HeaderTimeoutProtocol):
    # short, so that idling past it costs little; the gap between header pieces below stays well within it
    header_timeout_s = 0.3


@pytest.fixture
def server_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(hello, host="127.0.0.1", port=port, http=Timed, log_level="warning",
                            lifespan="off", timeout_keep_alive=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until(lambda: server.started or not thread.is_alive(), 30, "uvicorn's start")
    assert server.started, "uvicorn stopped before it started"
    yield port
    server.should_exit = True
    thread.join(10)


def response(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    data = b""
    while not data.endswith(b"ok"):
        data += sock.recv(4096)
    return data


def closed_after(sock: socket.socket, limit_s: float = 5.0) -> float | None:
    """Seconds until the server closes `sock` (None: still open after limit_s)."""
    sock.settimeout(limit_s)
    t0 = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return None
    return time.monotonic() - t0


def test_slow_headers_are_cut_off(server_port):
    with socket.create_connection(("127.0.0.1", server_port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        waited = closed_after(sock)
    assert waited is not None and waited < 2.0


def test_a_complete_request_and_a_slow_second_one_on_the_same_connection(server_port):
    with socket.create_connection(("127.0.0.1", server_port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert response(sock).startswith(b"HTTP/1.1 200")
        # the wait is the test: idle for longer than the header deadline, and only the keep-alive timeout applies
        time.sleep(Timed.header_timeout_s + 0.15)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.02)  # the wait is the test: headers in two pieces, well within the deadline
        sock.sendall(b"\r\n")
        assert response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET / HTTP/1.1\r\n")  # a keep-alive request whose headers stall
        waited = closed_after(sock)
    assert waited is not None and waited < 2.0
