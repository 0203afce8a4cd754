"""People's roles (app/api/roles.py, docs/roles.md) on every admin-API route and every console page.

The routes are read from the app, so a new one is covered as soon as it exists: a GET needs the viewer role
unless NEEDS says more, and a route that changes something must be listed in NEEDS (the contract: what
docs/roles.md tells operators), or the matrix fails. Each route is called by every kind of caller, and a
refused call must change nothing. Then: the console shows who is signed in and only what their role may use,
and the request's actor (app/store/audit.py) is set inside sync routes, console pages and the compat routes.
"""
from __future__ import annotations

import html
import inspect
import re
import threading
from itertools import count

import pytest
from fastapi.testclient import TestClient

from app.api.roles import may
from app.store.audit import current_actor
from tests.helpers.api import bearer, two_built_kbs
from tests.helpers.console import csrf_of

ROOT = "roles-root-token-of-32-characters"
ROLES = ("viewer", "editor", "publisher", "admin")
#: the callers of the matrix: each role's token of KB default, FAQ_ADMIN_TOKEN, the read key, another KB's
#: admin token, and nobody
CALLERS = (*ROLES, "root", "read", "other-kb", "anonymous")

#: what each route that is not a plain read needs, the KB's prefix (/kbs/{kb}) left out
NEEDS = {
    ("POST", "/admin/faqs"): "editor",
    ("PUT", "/admin/faqs/{faq_id}"): "editor",
    ("PATCH", "/admin/faqs/{faq_id}"): "editor",
    ("DELETE", "/admin/faqs/{faq_id}"): "editor",
    ("POST", "/admin/index/reload"): "publisher",
    ("POST", "/admin/review/phrasings/{key}/accept"): "editor",
    ("POST", "/admin/review/dismissals"): "editor",
    ("DELETE", "/admin/review/dismissals/{queue}/{key}"): "editor",
    ("POST", "/admin/publish"): "publisher",
    ("POST", "/admin/rollback"): "publisher",
    ("POST", "/console/logout"): "viewer",
    ("POST", "/console/kbs/{kb}/try"): "viewer",
    ("POST", "/console/kbs/{kb}/feedback"): "viewer",
    ("POST", "/console/kbs/{kb}/faqs/new"): "editor",
    ("POST", "/console/kbs/{kb}/faqs/edit"): "editor",
    ("POST", "/console/kbs/{kb}/faqs/delete"): "editor",
    ("POST", "/console/kbs/{kb}/import"): "editor",
    ("POST", "/console/kbs/{kb}/import/apply"): "editor",
    ("POST", "/console/kbs/{kb}/review/accept"): "editor",
    ("POST", "/console/kbs/{kb}/review/dismiss"): "editor",
    ("POST", "/console/kbs/{kb}/review/restore"): "editor",
    ("POST", "/console/kbs/{kb}/smalltalk"): "editor",
    ("POST", "/console/kbs/{kb}/builds/new"): "publisher",
    ("POST", "/console/kbs/{kb}/builds/activate"): "publisher",
    ("POST", "/console/kbs/{kb}/publish"): "publisher",
    ("POST", "/console/kbs/{kb}/rollback"): "publisher",
}
KEY = "ab" * 32


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    """(app, store, tokens, client): the default KB and `shop` built and served, with one named token of KB default
    per role, its read key and an admin token of `shop`; `client` runs the app's lifespan, which /match needs."""
    from app.api.console.builds import BuildJob
    from app.api.main import create_app

    settings, store = two_built_kbs(tmp_path_factory.mktemp("roles"), encoder, ROOT)
    tokens = {role: store.catalog.issue_token("default", role, f"{role.title()} Person")[1] for role in ROLES}
    tokens.update(root=ROOT, read=store.catalog.issue_token("default", "read", "bot")[1],
                  **{"other-kb": store.catalog.issue_token("shop", "admin", "shop owner")[1]})
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        # a build that seems to run: Build now answers 409 instead of encoding the KB for each caller allowed it
        app.state.console_builds._latest["default"] = BuildJob("default")
        yield app, store, tokens, client


def routes(app) -> list[tuple[str, str]]:
    """(method, path) of every admin-API and console route, sign-in form aside."""
    found = set()
    for route in app.routes:
        for entry in route.effective_route_contexts() if hasattr(route, "effective_route_contexts") else [route]:
            path = getattr(entry, "path", "")
            methods = getattr(getattr(entry, "original_route", entry), "methods", None) or ()
            if "/admin/" in path + "/" or path == "/console" or path.startswith("/console/"):
                found |= {(m, path) for m in methods if m != "HEAD"}
    return sorted(found - {("GET", "/console/login"), ("POST", "/console/login")})


def needed(method: str, path: str) -> str:
    contract = (method, path.removeprefix("/kbs/{kb}"))
    if contract in NEEDS:
        return NEEDS[contract]
    assert method == "GET", f"{method} {path} changes something: say in NEEDS (and docs/roles.md) which role it needs"
    return "viewer"


def expected(caller: str, method: str, path: str) -> str:
    """"allow", "403", "401" (the API without a token) or "sign-in" (the console without a session)."""
    console = path.startswith("/console")
    if caller == "anonymous" or (console and caller == "read"):  # a read key cannot sign in to the console
        return "sign-in" if console else "401"
    if caller == "root":
        return "allow"
    if caller in ("read", "other-kb"):
        return "allow" if console and "{kb}" not in path else "403"  # the console's KB-less pages send it home
    return "allow" if may(caller, needed(method, path)) else "403"


def state_of(store) -> tuple:
    """What a refused call must leave as it was."""
    kb = store.for_kb("default")
    return kb.revision(), kb.count_faqs(), len(kb.reviews.dismissed()), store.catalog.settings("default")


_planted = count()


def api_call(store, method: str, path: str) -> tuple[str, dict | None]:
    """The concrete URL (KB default) and a body that does what the route is for."""
    target = "shipping_time" if method == "DELETE" else "refund"
    url = path.replace("{kb}", "default").replace("{faq_id}", target).replace("{key}", KEY).replace("{queue}", "lint")
    bodies = {
        ("POST", "/admin/faqs"): {"faq_id": f"planted-{next(_planted)}", "answer": "Planted.",
                                  "questions": ["a planted question"]},
        ("PUT", "/admin/faqs/{faq_id}"): {"answer": "Overwritten.", "questions": ["overwritten"]},
        ("PATCH", "/admin/faqs/{faq_id}"): {"answer": "Patched."},
        ("POST", "/admin/review/dismissals"): {"queue": "lint", "faq_id": "refund", "reason": "planted"},
        ("POST", "/admin/rollback"): {"to": 1},
    }
    body = bodies.get((method, path.removeprefix("/kbs/{kb}")), {} if method in ("POST", "PUT", "PATCH") else None)
    return url, body


def console_fields(store, path: str, csrf: str) -> dict[str, str]:
    kb = store.for_kb("default")
    version = lambda faq_id: kb.get_faq(faq_id).updated_at.isoformat() if kb.get_faq(faq_id) else ""  # noqa: E731
    fields = {
        "/faqs/new": {"faq_id": f"planted-{next(_planted)}", "answer": "Planted.", "questions": "a planted question"},
        "/faqs/edit": {"id": "refund", "answer": "Overwritten.", "questions": "overwritten", "version": version("refund")},
        "/faqs/delete": {"id": "shipping_time", "version": version("shipping_time")},
        "/smalltalk": {"enabled": "on", "persona": "friendly"},
        "/review/dismiss": {"queue": "lint", "key": KEY, "reason": "planted"},
        "/try": {"query": "How do I get a refund?"},
        "/feedback": {"request_id": "no-such-request", "correct": "true"},
        "/builds/activate": {"version": "20990101T000000Z-000000"},
    }
    return {"csrf": csrf, **next((f for tail, f in fields.items() if path.endswith(tail)), {})}


def signed_in(client: TestClient, token: str | None) -> tuple[TestClient, str]:
    """`client` (the one running the lifespan: the batcher answering /match lives in its event loop) signed in
    afresh with `token` (not at all for None), and its CSRF token."""
    client.cookies.clear()
    if token is None:
        return client, ""
    page = client.get("/console/login")
    r = client.post("/console/login", data={"csrf": csrf_of(page.text), "token": token}, follow_redirects=False)
    if r.status_code != 303:
        return client, ""
    return client, csrf_of(client.get(r.headers["location"]).text)


def outcome(response) -> str:
    if response.status_code == 303 and response.headers["location"] == "/console/login":
        return "sign-in"
    return str(response.status_code) if response.status_code in (401, 403) else "allow"


@pytest.mark.parametrize("caller", CALLERS)
def test_every_route_answers_each_caller_as_its_role_allows(served, caller):
    app, store, tokens, client = served
    token = tokens.get(caller)
    listed = routes(app)
    assert {p for _, p in listed} >= {"/admin/faqs", "/kbs/{kb}/admin/faqs", "/console/kbs/{kb}/faqs"}
    api = client  # the console's cookie goes to /console only
    console, csrf = signed_in(client, token)
    wrong = []
    # signing out ends the session the other console calls need: it goes last
    for method, path in sorted(listed, key=lambda r: r == ("POST", "/console/logout")):
        want = expected(caller, method, path)
        before = state_of(store)
        if path.startswith("/console"):
            url = path.replace("{kb}", "default")
            data = console_fields(store, path, csrf) if method == "POST" else None
            response = console.request(method, url, data=data, follow_redirects=False)
        else:
            url, body = api_call(store, method, path)
            response = api.request(method, url, json=body, headers=bearer(token) if token else {})
        got = outcome(response)
        if (method, path) == ("POST", "/console/logout") and csrf and got == "sign-in":
            # signing out is answered with the sign-in page: it was allowed when the session is gone
            got = "allow" if outcome(console.get("/console/kbs", follow_redirects=False)) == "sign-in" else "kept"
        if got != want:
            wrong.append(f"{method} {path}: {got} (expected {want}): {response.text[:200]}")
        elif got != "allow" and state_of(store) != before:
            wrong.append(f"{method} {path}: refused ({got}) but the KB changed")
        elif got == "403" and caller in ROLES:
            article = "an" if caller[0] in "aeiou" else "a"
            message = f"this needs the {needed(method, path)} role; your token is {article} {caller} token of KB 'default'"
            if message not in html.unescape(response.text):
                wrong.append(f"{method} {path}: the 403 does not say {message!r}: {response.text[:200]}")
    assert not wrong, "\n".join(wrong)


def test_console_sign_in_refuses_the_read_key_with_403_and_names_what_it_is(served):
    app, _, tokens, _ = served
    client = TestClient(app)
    page = client.get("/console/login")
    r = client.post("/console/login", data={"csrf": csrf_of(page.text), "token": tokens["read"]})
    assert r.status_code == 403 and "read key of KB &#39;default&#39;" in r.text


@pytest.mark.parametrize("caller, shown, controls", [
    ("viewer", "Viewer Person (viewer)", set()),
    ("editor", "Editor Person (editor)", {"new-faq", "edit", "save", "delete", "dry-run"}),
    ("publisher", "Publisher Person (publisher)", {"new-faq", "edit", "save", "delete", "dry-run", "build-now"}),
    ("root", "admin (FAQ_ADMIN_TOKEN)", {"new-faq", "edit", "save", "delete", "dry-run", "build-now"}),
])
def test_the_console_names_who_is_signed_in_and_shows_only_what_their_role_may_use(served, caller, shown,
                                                                                   controls):
    _, _, tokens, client = served
    signed_in(client, tokens[caller])
    pages = {path: client.get(f"/console/kbs/default{path}") for path in ("/faqs", "/faqs/edit?id=refund", "/import",
                                                                          "/builds", "/smalltalk")}
    assert all(r.status_code == 200 for r in pages.values()), {p: r.status_code for p, r in pages.items()}
    for response in pages.values():
        found = re.search(r'id="signed-in-as">Signed in as <strong>([^<]+)</strong>', response.text)
        assert found and found.group(1).replace("&#39;", "'") == shown
    html = "".join(r.text for r in pages.values())
    present = {c for c in ("new-faq", "save", "delete", "dry-run", "build-now") if f'id="{c}"' in html}
    present |= {"edit"} if 'class="edit"' in html else set()
    assert present == controls
    if caller == "viewer":
        assert 'class="view"' in pages["/faqs"].text and 'id="read-only"' in pages["/faqs/edit?id=refund"].text


def _spy(monkeypatch, owner, name: str, seen: list) -> None:
    """`owner.name` records the actor and the thread it runs on, then does its work."""
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        seen.append((current_actor(), threading.current_thread() is threading.main_thread()))
        return original(*args, **kwargs)

    async def async_spy(*args, **kwargs):
        seen.append((current_actor(), False))
        return await original(*args, **kwargs)

    monkeypatch.setattr(owner, name, async_spy if inspect.iscoroutinefunction(original) else spy)


def test_the_request_acts_as_its_principal_inside_sync_routes_console_pages_and_compat_routes(served, monkeypatch):
    from app.api import compat
    from app.store.facade import FaqStore

    app, store, tokens, client = served
    app.state.console_lints.wait(120)  # the review pages' answer checks hold the encoder the compat route needs
    seen: list = []
    _spy(monkeypatch, FaqStore, "create_faq", seen)
    _spy(monkeypatch, FaqStore, "update_faq", seen)
    _spy(monkeypatch, compat, "respond", seen)
    new = {"faq_id": "actor-check", "answer": "Checked.", "questions": ["who is acting?"]}
    assert client.post("/admin/faqs", json=new, headers=bearer(tokens["editor"])).status_code == 201
    assert client.patch("/kbs/default/admin/faqs/actor-check", json={"answer": "Again."},
                        headers=bearer(ROOT)).status_code == 200
    console, csrf = signed_in(client, tokens["publisher"])
    r = console.post("/console/kbs/default/faqs/new", data={"csrf": csrf, "faq_id": "actor-check-2",
                                                             "answer": "Checked.", "questions": "who acts here?"},
                     follow_redirects=False)
    assert r.status_code == 303, r.text
    r = client.post("/qnamaker/knowledgebases/default/generateAnswer", json={"question": "refund"},
                    headers={"Authorization": f"EndpointKey {tokens['read']}"})
    assert r.status_code == 200, r.text

    actors = [(a.name, a.role, a.source) for a, _ in seen]
    assert actors == [("Editor Person", "editor", "api"), ("admin", "admin", "api"),
                      ("Publisher Person", "publisher", "console"), ("bot", "read", "compat")]
    assert not any(on_main for _, on_main in seen[:3]), "the store writes ran in the thread pool"
    ids = [a.request_id for a, _ in seen]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids) and len(set(ids)) == len(ids)
    assert current_actor().source == "cli", "no request's actor outlives it"
