"""The console over plain HTTP: the CSRF token of a page, signing in, the security headers."""
from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from app.api.console import SECURITY_HEADERS


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def sign_in(served, token: str) -> tuple[TestClient, str]:
    """The module's client (the one running the app's lifespan, which /match needs), signed in afresh,
    and its session's CSRF token."""
    client = served[3]
    client.cookies.clear()
    page = client.get("/console/login")
    r = client.post("/console/login", data={"csrf": csrf_of(page.text), "token": token}, follow_redirects=False)
    assert r.status_code == 303, r.text
    landing = client.get(r.headers["location"])
    assert landing.status_code == 200, landing.text
    return client, csrf_of(landing.text)


def assert_headers(response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (response.url, name)


@contextmanager
def served_kbs(data_dir: Path, encoder, root: str, token_kb: str, kinds: tuple[str, ...] = ("admin",)):
    """(app, store, tokens, client): the default KB and `shop` built and served in process with the admin token
    `root`; `tokens` holds a new token of `token_kb` per kind in `kinds`."""
    from app.api.main import create_app
    from tests.helpers.api import two_built_kbs

    settings, store = two_built_kbs(data_dir, encoder, root)
    tokens = {kind: store.catalog.issue_token(token_kb, kind)[1] for kind in kinds}
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        yield app, store, tokens, client
