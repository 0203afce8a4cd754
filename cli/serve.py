"""`faq serve [--host 127.0.0.1] [--port 8000] [--workers 1]`: run the HTTP API with uvicorn.

Settings come from the environment (FAQ_ prefix, see app/settings.py). Each worker process loads its
own encoder and memory-maps the same Annoy file, so the OS page cache holds one copy of the index.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.settings import Settings

APP_PATH = "app.api.main:app"
#: uvicorn's HTTP/1.1 protocol with a deadline for request headers (by import path: workers import it)
HTTP_PROTOCOL = "app.api.server:HeaderTimeoutProtocol"


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--port must be an integer, got {value!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port must be in 1..65535, got {port}")
    return port


def _workers(value: str) -> int:
    try:
        workers = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers must be an integer, got {value!r}") from None
    if not 1 <= workers <= 64:
        raise argparse.ArgumentTypeError(f"--workers must be in 1..64, got {workers}")
    return workers


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the HTTP API (POST /match, /admin, /metrics, docs at /docs)",
        description="Run the FastAPI service with uvicorn. Configure it with FAQ_* environment variables "
        "(FAQ_DATA_DIR, FAQ_DATABASE_URL, FAQ_ENCODER, FAQ_ADMIN_TOKEN, FAQ_ENCODE_WORKERS, FAQ_TORCH_THREADS, ...). "
        "Without FAQ_ADMIN_TOKEN the /admin API is not mounted.",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; 0.0.0.0 exposes it)")
    p.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    p.add_argument("--workers", type=_workers, default=1, help="server processes (default 1)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.settings import get_settings
    from migrations.runner import migrated_store

    settings = get_settings()
    # migrations belong to the entry point: once here, before any worker process opens the store
    migrated_store(settings).close()
    print(
        f"serving {APP_PATH} on http://{args.host}:{args.port} (workers={args.workers}, encoder={settings.encoder or 'from the current build'}, "
        f"data_dir={settings.data_dir}, admin API {'on' if settings.admin_token else 'off: set FAQ_ADMIN_TOKEN'})",
        file=sys.stderr,
    )
    uvicorn.run(APP_PATH, host=args.host, port=args.port, workers=args.workers, log_level=args.log_level,
                **uvicorn_options(settings))
    return 0


def uvicorn_options(settings: Settings) -> dict:
    """What uvicorn gets besides the app, address, workers and log level: one place, so that
    bench/floor.py serves its constant route exactly as `faq serve` serves the API."""
    # limit_concurrency: connections beyond it get 503 before any app code runs. On SIGTERM uvicorn
    # stops accepting, lets in-flight requests finish (bounded: one request deadline plus margin),
    # then the lifespan flushes the query log.
    # proxy_headers: X-Forwarded-For / -Proto are believed from FAQ_TRUSTED_PROXIES only (never from the
    # FORWARDED_ALLOW_IPS uvicorn would read from the environment: one setting, one place)
    return {"http": HTTP_PROTOCOL, "limit_concurrency": settings.max_connections,
            "timeout_graceful_shutdown": int(settings.request_timeout_ms / 1000) + 5,
            "proxy_headers": True, "forwarded_allow_ips": settings.trusted_proxies}
