"""Property-based fuzzing of the whole HTTP API from its own OpenAPI schema (schemathesis).

Opt-in (`-m slow`, needs `pip install -e ".[fuzz]"`): every operation, the admin routes included, gets
generated valid and invalid requests, and each answer must be no 5xx and match the documented
response schema (our ErrorBody for 4xx). It found the /admin/faqs offset overflow (a 500) and the
admin routes documenting FastAPI's default error shape. The same checks against a running server:
`schemathesis run http://127.0.0.1:8000/openapi.json -H "Authorization: Bearer $FAQ_ADMIN_TOKEN"
-c not_a_server_error,response_schema_conformance`.
"""
from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="pip install -e '.[fuzz]'")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import response_schema_conformance  # noqa: E402

from app.api.main import create_app  # noqa: E402
from tests.helpers.api import build, make_settings, make_store  # noqa: E402

TOKEN = "fuzz-admin-token-of-32-characters"
EXAMPLES = 40  # per operation and mode: about a minute for the 14 operations on 2 cores
#: a KB of its own, whose admin token fuzzes every other KB's routes
OTHER = "other"


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("fuzz"), admin_token=TOKEN)
    store = make_store(settings)
    build(store, encoder, settings)
    store.catalog.create(OTHER)
    foreign = store.catalog.issue_token(OTHER, "admin")[1]
    app = create_app(settings, store=store, encoder=encoder)
    return schemathesis.openapi.from_asgi("/openapi.json", app), store, foreign


@pytest.fixture(scope="module")
def api_schema(fuzzed):
    return fuzzed[0]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_server_error_and_documented_responses(api_schema, mode):
    # Driven by hypothesis directly: schemathesis' own pytest plugin (from_fixture) breaks on pytest 9.
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 14, [op.label for op in operations]
    tested = []
    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"},
                                   checks=[not_a_server_error, response_schema_conformance])

        try:
            check()
            tested.append(operation.label)
        except Unsatisfiable:
            # no input to break (GET /healthz, DELETE /admin/faqs/{faq_id} with a plain string id, ...)
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert len(tested) >= (14 if mode is GenerationMode.POSITIVE else 7), tested


def _kb_of_case(case) -> str:
    return (case.path_parameters or {}).get("kb", "default")


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_a_foreign_token_reaches_nothing(fuzzed, mode):
    """KB `other`'s admin token on generated requests to every admin operation: no 5xx, and nothing
    but 4xx unless the request was for KB `other` itself; afterwards the default KB is unchanged."""
    api_schema, store, foreign = fuzzed
    before = (sorted(map(repr, store.export_records())), store.revision())
    operations = [result.ok() for result in api_schema.get_all_operations() if "/admin" in result.ok().path]
    assert len(operations) >= 16, [op.label for op in operations]
    leaks: list[str] = []
    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES // 2, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case):
            response = case.call(headers={"Authorization": f"Bearer {foreign}"})
            assert response.status_code < 500, (case.path, response.status_code, response.text[:200])
            if response.status_code < 400 and _kb_of_case(case) != OTHER:
                leaks.append(f"{case.method} {case.formatted_path}: {response.status_code}")

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert not leaks, leaks[:10]
    assert (sorted(map(repr, store.export_records())), store.revision()) == before
