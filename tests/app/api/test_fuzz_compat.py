"""Schema-driven fuzzing of the QnA Maker and Azure routes (schemathesis on their documented bodies, query
strings and headers): no generated request, valid or not, gets a 5xx, and every refusal is a 4xx in the
service's own error shape. Opt-in (`-m slow`, `pip install -e ".[fuzz]"`); its last run is in docs/results.md."""
from __future__ import annotations

import os

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="pip install -e '.[fuzz]'")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

from app.api.main import create_app  # noqa: E402
from tests.helpers.api import build, make_settings, make_store  # noqa: E402

TOKEN = "fuzz-compat-admin-token-of-32-characters"
EXAMPLES = int(os.environ.get("FAQ_FUZZ_EXAMPLES", "150"))  # per operation and mode
PATHS = ("/qnamaker/knowledgebases/{kb}/generateAnswer", "/language/:query-knowledgebases")


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory, encoder):
    settings = make_settings(tmp_path_factory.mktemp("fuzz-compat"), admin_token=TOKEN)
    store = make_store(settings)
    build(store, encoder, settings)
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(settings, store=store, encoder=encoder))


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_server_error_and_the_services_error_shape(fuzzed, mode):
    operations = [r.ok() for r in fuzzed.get_all_operations() if r.ok().path in PATHS]
    assert len(operations) == 2
    seen: dict[int, int] = {}
    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case):
            # the KB `default` (the generated kb name sometimes), the admin token as each service's key
            if mode is GenerationMode.POSITIVE:  # valid requests reach the matching, not only the gate
                if case.path_parameters is not None:
                    case.path_parameters["kb"] = "default"
                if case.query is not None:
                    case.query.update({"projectName": "default", "deploymentName": "production",
                                       "api-version": "2023-04-01"})
            headers = {"Authorization": f"EndpointKey {TOKEN}", "Ocp-Apim-Subscription-Key": TOKEN}
            response = case.call(headers=headers)
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            assert response.status_code < 500, (case.path, case.body, response.status_code, response.text[:300])
            if response.status_code >= 400:
                error = response.json()["error"]
                assert isinstance(error["code"], str) and isinstance(error["message"], str)

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, operation.label
    print(f"fuzz {mode.name}: status counts {dict(sorted(seen.items()))}")
