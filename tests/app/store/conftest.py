"""Fixtures of the store tests: `any_store`, the store on each backend."""
from __future__ import annotations

import pytest

from app.store import FaqStore
from migrations import runner


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(request):
    """The store on each backend (PostgreSQL skipped when unreachable)."""
    if request.param == "sqlite":
        yield request.getfixturevalue("store")
        return
    url = request.getfixturevalue("pg_url")
    runner.upgrade(url)
    with FaqStore(url) as pg_store:
        yield pg_store
