"""The service's errors, one table (app/api/errors.py `problem_of`): each error the core raises maps to one status,
message and headers, which /match, the compat routes and the console all answer with; and each message is
written once, in the code that raises it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.api.errors import SERVICE_ERRORS, problem_of
from app.settings import KbSettingsRefused
from app.api.workers import DeadlineExceeded, Overloaded
from app.match import NO_INDEX, NO_STAGES, NoIndexError, NoStagesError
from app.settings import KbSettings
from index.elasticsearch.vectors import VectorStoreUnavailable
from index.lexical import LexicalUnavailable

REPO = Path(__file__).resolve().parents[3]


def refused_settings() -> KbSettingsRefused:
    from pydantic import ValidationError

    try:
        KbSettings.model_validate({"default_threshold": 7})
    except ValidationError as exc:
        return KbSettingsRefused("shop", exc)
    raise AssertionError("7 is no threshold")


@pytest.mark.parametrize("exc, status, retry_after, words", [
    (NoIndexError(), 503, "30", NO_INDEX),
    (NoIndexError("could not load the current index build: gone"), 503, "30", "could not load"),
    (NoStagesError(None, "ann+rerank"), 409, None, NO_STAGES),
    (Overloaded("queue full", 429, 4), 429, "4", "queue full"),
    (DeadlineExceeded("not answered within 500 ms"), 503, "1", "500 ms"),
    (LexicalUnavailable("tantivy index missing"), 503, "10", "the ann arms keep serving"),
    (VectorStoreUnavailable("es down"), 503, "10", "the vector store is unavailable: es down"),
])
def test_each_service_error_has_one_status_message_and_headers(exc, status, retry_after, words):
    assert isinstance(exc, SERVICE_ERRORS)
    problem = problem_of(exc)
    assert problem.status == status and words in problem.message
    assert problem.headers.get("Retry-After") == retry_after


def test_a_kb_with_refused_settings_is_the_operators_to_fix():
    problem = problem_of(refused_settings())
    assert problem.status == 503 and "default_threshold" in problem.message and "--unset" in problem.message


def test_anything_else_is_not_the_tables():
    assert problem_of(ValueError("a bug")) is None and problem_of(KeyError("x")) is None


def test_each_error_message_is_written_once_in_product_code():
    """NO_INDEX's and NO_STAGES' words appear in product code only where they are defined."""
    sources = [p for top in ("app", "index", "models", "kb") for p in (REPO / top).rglob("*.py")]
    for message in (NO_INDEX, NO_STAGES[:40]):
        where = [p.relative_to(REPO).as_posix() for p in sources if message in p.read_text(encoding="utf-8")]
        assert where == ["app/match/request.py"], (message, where)


def test_no_http_types_below_the_api():
    imports = re.compile(r"^\s*(from|import)\s+(fastapi|starlette)\b", re.M)
    below = [p.relative_to(REPO).as_posix() for top in ("app", "index", "models", "kb") for p in (REPO / top).rglob("*.py")
             if "app/api/" not in p.as_posix() and imports.search(p.read_text(encoding="utf-8"))]
    assert below == []
