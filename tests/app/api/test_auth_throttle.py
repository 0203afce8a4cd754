"""Failed token checks are throttled per client address and KB (app/api/auth_throttle.py): the /admin API,
/match with FAQ_MATCH_REQUIRES_KEY and the console's sign-in form, in the app and over real HTTP."""
from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from app.api.auth_throttle import CONSOLE, LIMIT, WINDOW_S, AuthThrottle
from app.api.main import create_app
from tests.helpers.api import bearer, two_built_kbs
from tests.helpers.console import csrf_of
from tests.helpers.server import LiveServer

ROOT = "throttle-root-token-of-32-characters"
GUESSES = 200


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    """The default KB and KB `shop` with an admin token each, FAQ_MATCH_REQUIRES_KEY on. Each test sends its
    wrong tokens from addresses of its own: the throttle lives as long as the app."""
    settings, store = two_built_kbs(tmp_path_factory.mktemp("auth_throttle"), encoder, ROOT)
    settings = settings.model_copy(update={"match_requires_key": True})
    tokens = {kb: store.catalog.issue_token(kb, "admin")[1] for kb in ("default", "shop")}
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as lifespan:
        yield lifespan, tokens, settings, store


def client_at(lifespan: TestClient, address: str) -> TestClient:
    """A client of the served app whose requests come from `address`, run in the event loop of the client
    that started the app (/match needs the batcher running in that loop)."""
    client = TestClient(lifespan.app, client=(address, 40000))
    client.portal = lifespan.portal
    return client


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the component -----------------------------------------------------------------------------------
def test_the_window_slides_and_retry_after_is_when_the_oldest_failure_leaves_it():
    clock = Clock()
    throttle = AuthThrottle(clock=clock)
    for _ in range(LIMIT - 1):
        throttle.failed("10.0.0.1", "shop")
        clock.now += 1.0
    assert throttle.retry_after("10.0.0.1", "shop") is None, "under the limit"
    throttle.failed("10.0.0.1", "shop")  # the 10th, 9 s after the first
    assert throttle.retry_after("10.0.0.1", "shop") == WINDOW_S - 9
    clock.now += 30.5
    assert throttle.retry_after("10.0.0.1", "shop") == 21  # 20.5 s left, rounded up
    clock.now += 20.5  # the first failure leaves the window: one more try
    assert throttle.retry_after("10.0.0.1", "shop") is None
    throttle.failed("10.0.0.1", "shop")
    assert throttle.retry_after("10.0.0.1", "shop") == 1  # now the second one, 1 s from leaving
    clock.now += WINDOW_S
    assert throttle.retry_after("10.0.0.1", "shop") is None
    assert len(throttle) == 0, "keys whose failures all left the window are dropped"


def test_keys_are_per_address_and_kb_with_a_backstop_per_address():
    clock = Clock()
    throttled = []
    throttle = AuthThrottle(clock=clock, address_limit=3 * LIMIT, on_throttled=lambda: throttled.append(1))
    for _ in range(LIMIT):
        throttle.failed("10.0.0.1", "a")
    assert throttle.retry_after("10.0.0.1", "a") is not None
    assert throttle.retry_after("10.0.0.2", "a") is None, "another address"
    assert throttle.retry_after("10.0.0.1", "b") is None, "another KB"
    assert throttle.retry_after("10.0.0.1", CONSOLE) is None, "the console's form"
    # rotating KB names in the path: the address's own limit stops it
    for kb in ("b", "c"):
        for _ in range(LIMIT):
            throttle.failed("10.0.0.1", kb)
    assert throttle.retry_after("10.0.0.1", "never-tried") == WINDOW_S
    assert throttle.retry_after("10.0.0.2", "never-tried") is None
    assert len(throttled) == 2, "each refusal counted once"


def test_memory_is_bounded_and_the_oldest_keys_go_first():
    throttle = AuthThrottle(clock=Clock(), max_keys=1000)
    for i in range(5000):
        throttle.failed(f"10.1.{i // 256}.{i % 256}", "shop")
    assert len(throttle) <= 1000
    for _ in range(LIMIT):
        throttle.failed("10.9.9.9", "shop")
    assert throttle.retry_after("10.9.9.9", "shop") is not None, "the newest keys are kept"
    assert AuthThrottle().max_keys == 100_000


# -- the API -----------------------------------------------------------------------------------------
def test_wrong_admin_tokens_get_429_after_the_limit_and_others_still_get_in(served):
    lifespan, tokens = served[:2]
    attacker = client_at(lifespan, "10.0.0.1")
    answers = [attacker.get("/admin/faqs", headers=bearer(f"guess-{i}")) for i in range(GUESSES)]
    codes = [r.status_code for r in answers]
    assert codes == [401] * LIMIT + [429] * (GUESSES - LIMIT)
    refused = answers[-1]
    assert 1 <= int(refused.headers["Retry-After"]) <= WINDOW_S
    assert "too many wrong admin tokens" in refused.json()["error"] and "try again in" in refused.json()["error"]
    # the right token from the guessing address is refused too, unchecked: a guesser learns nothing
    assert attacker.get("/admin/faqs", headers=bearer(ROOT)).status_code == 429
    # another address with the right token gets in, and the attacker's other KB is untouched
    assert client_at(lifespan, "10.0.0.2").get("/admin/faqs", headers=bearer(ROOT)).status_code == 200
    assert attacker.get("/kbs/shop/admin/faqs", headers=bearer(tokens["shop"])).status_code == 200
    assert attacker.get("/kbs/shop/admin/faqs", headers=bearer("guess")).status_code == 401
    assert "faq_auth_throttled_total" in attacker.get("/metrics").text


def test_kb_a_failures_do_not_throttle_kb_b(served):
    lifespan, tokens = served[:2]
    client = client_at(lifespan, "10.0.1.1")
    codes = [client.get("/kbs/shop/admin/faqs", headers=bearer(f"guess-{i}")).status_code for i in range(LIMIT + 5)]
    assert codes == [401] * LIMIT + [429] * 5
    assert client.get("/kbs/default/admin/faqs", headers=bearer(tokens["default"])).status_code == 200
    assert client.get("/admin/faqs", headers=bearer("another-guess")).status_code == 401, "KB default counts apart"


def test_read_keys_on_match_are_throttled_and_real_tokens_are_not_counted(served):
    lifespan, tokens = served[:2]
    client = client_at(lifespan, "10.0.2.1")
    query = {"query": "where can I park"}
    # no token, and a real token of another KB: not guesses
    for _ in range(2 * LIMIT):
        assert client.post("/kbs/shop/match", json=query).status_code == 401
        assert client.post("/kbs/shop/match", json=query, headers=bearer(tokens["default"])).status_code == 403
    assert client.post("/kbs/shop/match", json=query, headers=bearer(tokens["shop"])).status_code == 200
    codes = [client.post("/kbs/shop/match", json=query, headers=bearer(f"faqkb_{i}")).status_code
             for i in range(LIMIT + 3)]
    assert codes == [401] * LIMIT + [429] * 3
    batch = client.post("/kbs/shop/match/batch", json={"queries": [query]}, headers=bearer(tokens["shop"]))
    assert batch.status_code == 429 and "Retry-After" in batch.headers
    assert client_at(lifespan, "10.0.2.2").post("/kbs/shop/match", json=query,
                                           headers=bearer(tokens["shop"])).status_code == 200


# -- the console -------------------------------------------------------------------------------------
def sign_in_attempt(client: TestClient, token: str) -> httpx.Response:
    page = client.get("/console/login")
    return client.post("/console/login", data={"csrf": csrf_of(page.text), "token": token}, follow_redirects=False)


def test_console_sign_in_is_throttled_and_another_address_still_signs_in(served):
    lifespan, tokens = served[:2]
    attacker = client_at(lifespan, "10.0.3.1")
    page = attacker.get("/console/login")
    csrf = csrf_of(page.text)
    answers = [attacker.post("/console/login", data={"csrf": csrf, "token": f"guess-{i}"}, follow_redirects=False)
               for i in range(GUESSES)]
    assert [r.status_code for r in answers] == [401] * LIMIT + [429] * (GUESSES - LIMIT)
    refused = answers[-1]
    assert 1 <= int(refused.headers["Retry-After"]) <= WINDOW_S
    assert refused.headers["content-type"].startswith("text/html") and "too many wrong tokens" in refused.text
    assert sign_in_attempt(attacker, ROOT).status_code == 429, "the right token, unchecked"
    # the bearer API of the same address is counted apart
    assert attacker.get("/admin/faqs", headers=bearer(ROOT)).status_code == 200
    for address in ("10.0.3.2", "10.0.3.3"):
        other = client_at(lifespan, address)
        token = ROOT if address.endswith("2") else tokens["shop"]
        r = sign_in_attempt(other, token)
        assert r.status_code == 303, r.text
        assert other.get(r.headers["location"]).status_code == 200


# -- over real HTTP ------------------------------------------------------------------------------------
def test_over_http_the_address_is_the_peers(served, encoder):  # noqa: F811
    """uvicorn's peer address decides: guesses from 127.0.0.1 do not lock out 127.0.0.2 (Linux routes all of
    127.0.0.0/8 to the loopback interface)."""
    settings, store = served[2:]
    with LiveServer(create_app(settings, store=store, encoder=encoder)) as server:
        with httpx.Client(base_url=server.url, timeout=30) as attacker:
            codes = [attacker.get("/kbs/shop/admin/faqs", headers=bearer(f"g{i}")).status_code for i in range(LIMIT + 2)]
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=server.url, timeout=30, transport=transport) as other:
            right = other.get("/kbs/shop/admin/faqs", headers=bearer(ROOT)).status_code
    assert codes == [401] * LIMIT + [429] * 2
    assert right == 200
