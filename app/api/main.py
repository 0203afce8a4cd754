"""`app`, what `uvicorn app.api.main:app` and `faq serve` run, made by `create_app` (app/api/factory.py)."""
from __future__ import annotations

from typing import Any

from app.api.factory import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # made on first access (by uvicorn), not at import: importing this module (tests, `faq serve --help`)
    # must not read settings or log the admin warning
    if name == "app":
        globals()["app"] = application = create_app()
        return application
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
