"""Schema-driven fuzzing of the QnA Maker and Azure routes (schemathesis on their documented bodies, query
strings and headers): no generated request, valid or not, gets a 5xx, and every refusal is a 4xx in the
service's own error shape, worded without pydantic's internals; only the request guard's (a body too large,
too slow or not JSON) come in the API's own shape, and are counted apart. The KBs are the migration fixtures (metadata,
prompts, context-only pairs), so qnaId lookups, filters and context reach real pairs. Opt-in (`-m slow`,
`pip install -e ".[fuzz]"`); FAQ_FUZZ_EXAMPLES sets the examples per operation and mode; its last run is in
docs/results.md."""
from __future__ import annotations

import os

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="pip install -e '.[fuzz]'")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

from app.api.main import create_app  # noqa: E402
from tests.helpers.compat import imported_kbs  # noqa: E402

TOKEN = "fuzz-compat-admin-token-of-32-characters"
EXAMPLES = int(os.environ.get("FAQ_FUZZ_EXAMPLES", "150"))  # per operation and mode
QNA, AZURE = "/qnamaker/knowledgebases/{kb}/generateAnswer", "/language/:query-knowledgebases"
#: the request guard's refusals (a body too large, too slow or not JSON: app/api/middleware/request_guard.py),
#: raised when a route reads its body and answered by the app's handlers in the API's own shape
GUARD_STATUSES = (408, 413, 415)
#: pydantic's words, which a client must never see
PYDANTIC_WORDS = ("Input should", "instance of", "Value error", "pydantic", "valid dictionary", "[type=")


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory, encoder):
    settings_, store, _ = imported_kbs(tmp_path_factory.mktemp("fuzz-compat"), encoder, TOKEN)
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(settings_, store=store, encoder=encoder))


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_server_error_and_the_services_error_shape(fuzzed, mode):
    operations = [r.ok() for r in fuzzed.get_all_operations() if r.ok().path in (QNA, AZURE)]
    assert len(operations) == 2, "both compat routes are in the OpenAPI schema"
    seen: dict[int, int] = {}
    guard: dict[int, int] = {}
    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case):
            # a KB that exists and a version the route serves, so that every body, valid or not, reaches the
            # body's own checks and the matching instead of stopping at the gate (which the gate tests cover)
            if case.path_parameters is not None:
                case.path_parameters["kb"] = "bikes"
            if case.query is not None:
                case.query.update({"projectName": "gym", "deploymentName": "production", "api-version": "2023-04-01"})
            headers = {"Authorization": f"EndpointKey {TOKEN}", "Ocp-Apim-Subscription-Key": TOKEN}
            response = case.call(headers=headers)
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            assert response.status_code < 500, (case.path, case.body, response.status_code, response.text[:300])
            if response.status_code >= 400:
                error = response.json()["error"]
                if response.status_code in GUARD_STATUSES and isinstance(error, str):
                    guard[response.status_code] = guard.get(response.status_code, 0) + 1
                    return
                assert isinstance(error, dict), (response.status_code, case.headers, response.text[:300])
                assert isinstance(error["code"], str) and isinstance(error["message"], str)
                assert not any(w in error["message"] for w in PYDANTIC_WORDS), (case.body, error["message"])

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, operation.label
    print(f"fuzz {mode.name}: status counts {dict(sorted(seen.items()))}, of which in the API's own shape "
          f"(the request guard's) {dict(sorted(guard.items()))}")
