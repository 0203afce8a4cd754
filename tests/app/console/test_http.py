"""The console (/console) over plain HTTP: sessions, CSRF, the security headers and bad input.

What a browser shows is tested in test_browser.py; these run without one.
"""
from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from app.api.console.pages import COOKIE
from tests.helpers.api import bearer, make_settings
from tests.helpers.console import assert_headers, csrf_of, served_kbs, sign_in

ROOT = "console-root-token-of-32-characters"


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    with served_kbs(tmp_path_factory.mktemp("console_http"), encoder, ROOT, "shop", ("admin", "read")) as served:
        yield served


def test_every_console_answer_has_the_security_headers(served):
    app = served[0]
    anonymous = TestClient(app)
    client, _ = sign_in(served, ROOT)
    answers = [anonymous.get("/console/login"), anonymous.get("/console/kbs", follow_redirects=False),
               anonymous.get("/console/static/console.js"), anonymous.get("/console/static/nope.js"),
               client.get("/console/kbs"), client.get("/console/kbs/nope/faqs"), client.get("/console/kbs/Bad!/faqs"),
               client.post("/console/kbs/default/try", data={"query": "x"})]
    assert [r.status_code for r in answers] == [200, 303, 200, 404, 200, 404, 422, 403]
    for response in answers:
        assert_headers(response)
    assert answers[0].headers["cache-control"] == "no-store"
    assert "/match" not in [r.url.path for r in answers]
    assert "x-content-type-options" not in anonymous.post("/match", json={"query": "x"}).headers


def test_the_cookie_holds_a_random_id_never_the_token(served):
    app = served[0]
    client = TestClient(app, base_url="https://testserver")
    page = client.get("/console/login")
    r = client.post("/console/login", data={"csrf": csrf_of(page.text), "token": ROOT}, follow_redirects=False)
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith(COOKIE + "="))
    value = cookie.split(";")[0].split("=", 1)[1]
    assert ROOT not in cookie and len(value) >= 40
    attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "secure", "samesite=strict", "path=/console"} <= attributes
    plain, _ = sign_in(served, ROOT)  # over http the cookie cannot be Secure, or the browser would drop it
    assert plain.cookies.get(COOKIE)


def test_pages_need_a_session(served):
    app = served[0]
    client = TestClient(app)
    for path in ("/console", "/console/kbs", "/console/kbs/default/faqs", "/console/kbs/default/try",
                 "/console/kbs/default/faqs/edit?id=refund"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/console/login", path
    client.cookies.set(COOKIE, "made-up", path="/console")
    assert client.get("/console/kbs", follow_redirects=False).headers["location"] == "/console/login"


@pytest.mark.parametrize("path", ["/console/logout", "/console/kbs/default/try", "/console/kbs/default/feedback",
                                  "/console/kbs/default/faqs/new", "/console/kbs/default/faqs/edit",
                                  "/console/kbs/default/faqs/delete", "/console/kbs/default/builds/new",
                                  "/console/kbs/default/builds/activate", "/console/kbs/default/import/apply"])
def test_every_post_needs_the_csrf_token(served, path):
    app, store = served[:2]
    client, csrf = sign_in(served, ROOT)
    before = store.revision()
    fields = {"id": "refund", "faq_id": "planted", "answer": "x", "questions": "planted", "query": "refund",
              "request_id": "r", "correct": "true"}
    for sent in ({}, {"csrf": ""}, {"csrf": csrf[:-1] + ("A" if csrf[-1] != "A" else "B")}):
        r = client.post(path, data={**fields, **sent}, follow_redirects=False)
        assert r.status_code == 403 and "CSRF" in r.text, (path, sent, r.text)
    assert store.revision() == before
    assert app.state.console_builds.get("default") is None, "no build was started"
    assert client.get("/console/kbs").status_code == 200, "the refused posts did not sign out"


def test_sign_in_is_csrf_checked_and_refuses_read_and_wrong_tokens(served):
    app, tokens = served[0], served[2]
    client = TestClient(app)
    assert client.post("/console/login", data={"token": ROOT}).status_code == 403
    csrf = csrf_of(client.get("/console/login").text)
    for token, status in [("wrong", 401), (tokens["read"], 403), ("", 422), ("a\x00b", 422), ("x" * 600, 422)]:
        r = client.post("/console/login", data={"csrf": csrf, "token": token}, follow_redirects=False)
        assert r.status_code == status and "token" in r.text, (token, r.text)
        csrf = csrf_of(r.text)
    assert COOKIE not in client.cookies


def test_kb_token_reaches_only_its_kb_and_ends_when_revoked(served):
    app, store = served[:2]
    token_id, token = store.catalog.issue_token("shop", "admin")
    client, _ = sign_in(served, token)
    assert client.get("/console", follow_redirects=False).headers["location"] == "/console/kbs/shop/faqs"
    assert client.get("/console/kbs", follow_redirects=False).headers["location"] == "/console/kbs/shop/faqs"
    for kb in ("default", "nope"):  # 403 whether or not the KB exists, as in the API
        r = client.get(f"/console/kbs/{kb}/faqs")
        assert r.status_code == 403 and "another KB" in r.text, kb
    assert client.get("/console/kbs/shop/faqs").status_code == 200
    store.catalog.revoke_token("shop", token_id)
    app.state.resident_kbs._tokens.clear()  # skip the token cache's few seconds
    r = client.get("/console/kbs/shop/faqs", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/login"



def console_routes(app) -> list[tuple[str, str]]:
    """(method, path) of every console route the app's router holds, sign-in form aside."""
    found = []
    for route in app.routes:
        # FastAPI keeps an included router as one entry that lists its routes with their full paths
        listed = route.effective_route_contexts() if hasattr(route, "effective_route_contexts") else [route]
        for entry in listed:
            path = getattr(entry, "path", "")
            methods = getattr(getattr(entry, "original_route", entry), "methods", None) or ()
            found += [(method, path) for method in methods if path == "/console" or path.startswith("/console/")]
    return sorted((m, p) for m, p in set(found) if p != "/console/login" and m in ("GET", "POST"))


def test_every_console_page_checks_the_session_again(served):
    """A session whose FAQ_ADMIN_TOKEN changed, or whose KB token was revoked, is sent to sign-in on every
    page (the KB picker included), sees no KB name, and is closed rather than kept alive."""
    app, store = served[:2]
    sessions = app.state.console_sessions
    revoked_id = store.catalog.issue_token("shop", "admin")[0]
    store.catalog.revoke_token("shop", revoked_id)
    app.state.resident_kbs._tokens.clear()  # skip the token cache's few seconds
    routes = console_routes(app)
    assert {("GET", "/console"), ("GET", "/console/kbs"), ("GET", "/console/kbs/{kb}/faqs"),
            ("POST", "/console/logout")} <= set(routes) and len(routes) > 20
    client = TestClient(app)
    for method, route in routes:
        path = route.replace("{kb}", "shop")
        for stale in (sessions.open(None, admin_token="the-root-token-before-it-changed"),
                      sessions.open("shop", revoked_id)):
            client.cookies.clear()
            client.cookies.set(COOKIE, stale.id, path="/console")
            r = client.request(method, path, data={"csrf": stale.csrf} if method == "POST" else None,
                               follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"] == "/console/login", (method, path, r.text)
            assert "shop" not in r.text and "default" not in r.text
            assert sessions.get(stale.id) is None, f"{method} {path} kept a failed session"
            assert_headers(r)
    # the sign-in form shows itself to a failed session (and closes it) instead of sending it on
    stale = sessions.open(None, admin_token="the-root-token-before-it-changed")
    client.cookies.set(COOKIE, stale.id, path="/console")
    r = client.get("/console/login", follow_redirects=False)
    assert r.status_code == 200 and 'name="token"' in r.text
    assert sessions.get(stale.id) is None


def test_one_kbs_flood_of_sign_ins_ends_no_other_session(served, monkeypatch):
    from app.api.console import sessions as sessions_module

    monkeypatch.setattr(sessions_module, "MAX_SESSIONS", 20)
    app, store, tokens = served[:3]
    default_token = store.catalog.issue_token("default", "admin")[1]

    def signed_in_client(token: str) -> TestClient:
        client = TestClient(app)
        page = client.get("/console/login")
        r = client.post("/console/login", data={"csrf": csrf_of(page.text), "token": token}, follow_redirects=False)
        assert r.status_code == 303, r.text
        return client

    admin, other_kb = signed_in_client(ROOT), signed_in_client(default_token)
    flood = [signed_in_client(tokens["admin"]).cookies.get(COOKIE) for _ in range(100)]
    assert admin.get("/console/kbs").status_code == 200
    assert other_kb.get("/console/kbs/default/faqs").status_code == 200
    with store.engine.connect() as conn:
        shop = conn.exec_driver_sql("SELECT count(*) FROM console_sessions WHERE kb = 'shop'").scalar()
    assert shop == 20
    assert [app.state.console_sessions.get(c) is not None for c in flood] == [False] * 80 + [True] * 20


def assert_problem_page(r, status: int) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("text/html"), r.headers
    assert f"<h1>{status}</h1>" in r.text and 'id="problem"' in r.text
    assert r.headers["cache-control"] == "no-store"
    assert_headers(r)


def test_console_errors_are_html_pages(served):
    app = served[0]
    anonymous = TestClient(app)
    r = anonymous.get("/console/nope")
    assert_problem_page(r, 404)
    assert "no console page" in r.text
    hostile = anonymous.get("/console/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    assert_problem_page(hostile, 404)
    assert "<script>alert" not in hostile.text and "alert(1)" not in hostile.text
    r = anonymous.delete("/console")
    assert_problem_page(r, 405)
    assert "GET" in r.headers["allow"]
    assert_problem_page(anonymous.put("/console/kbs/default/faqs/new", data={"a": "b"}), 405)
    client, csrf = sign_in(served, ROOT)
    r = client.post("/console/kbs/default/try", content=b"csrf=" + csrf.encode() + b"&query=" + b"x" * 2_000_000,
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert_problem_page(r, 413)
    assert "FAQ_MAX_BODY_BYTES" in r.text
    r = client.post("/console/kbs/default/try", content=b"query=x",
                    headers={"Content-Type": "application/x-www-form-urlencoded", "Content-Length": "lots"})
    assert_problem_page(r, 400)
    assert_problem_page(client.post("/console/kbs/default/try", content=b"a=b", headers={"Content-Type": "text/plain"}),
                        415)
    # the JSON API keeps its error bodies, without the console's headers
    for r, status in [(anonymous.get("/nope"), 404), (anonymous.delete("/match"), 405),
                      (anonymous.post("/match", content=b"x" * 2_000_000, headers={"Content-Type": "application/json"}),
                       413), (anonymous.get("/consolex"), 404)]:
        assert r.status_code == status and r.headers["content-type"] == "application/json", r.text
        assert "error" in r.json() and "content-security-policy" not in r.headers


def test_a_console_500_is_the_problem_page(served, encoder):  # noqa: F811
    """An unexpected error on a console path is the problem page with the headers, though Starlette answers
    it outside every middleware; the API's stays JSON."""
    from app.api.main import create_app

    app, store = served[:2]
    other = create_app(app.state.service.settings, store=store, encoder=encoder)

    async def boom() -> None:
        raise RuntimeError("a bug")

    other.add_api_route("/console/boom", boom)
    other.add_api_route("/boom", boom)
    client = TestClient(other, raise_server_exceptions=False)
    r = client.get("/console/boom")
    assert_problem_page(r, 500)
    assert "internal server error" in r.text and "request id" in r.text and "a bug" not in r.text
    assert client.get("/boom").json()["error"] == "internal server error"

@pytest.mark.parametrize("path, field", [
    ("/console/kbs/default/faqs?q=%00", "q"), ("/console/kbs/default/faqs?q=" + "x" * 201, "q"),
    ("/console/kbs/default/faqs?page=abc", "page"), ("/console/kbs/default/faqs?page=0", "page"),
    ("/console/kbs/default/faqs?page=00000000001", "page"), ("/console/kbs/default/faqs?page=%C2%B2", "page"),
    ("/console/kbs/default/faqs/edit", "id"), ("/console/kbs/default/faqs/edit?id=%00", "id"),
    ("/console/kbs/default/faqs/edit?id=" + "x" * 201, "id"), ("/console/kbs/Shop/faqs", "kb"),
])
def test_bad_query_input_is_a_4xx_naming_the_field(served, path, field):
    client, _ = sign_in(served, ROOT)
    r = client.get(path)
    assert r.status_code == 422 and f"{field}:" in r.text, (path, r.text)


@pytest.mark.parametrize("fields, status, field", [
    ({"query": ""}, 422, "query"), ({"query": "   "}, 422, "query"), ({"query": "a\x00"}, 422, "query"),
    ({"query": "x" * 1001}, 422, "query"), ({"query": "refund", "top_k": "abc"}, 422, "top_k"),
    ({"query": "refund", "top_k": "99"}, 422, "top_k"), ({"query": "refund", "top_k": "0"}, 422, "top_k"),
    ({"query": "refund", "top_k": "9" * 40}, 422, "top_k"), ({"query": "refund", "top_k": "-1"}, 422, "top_k"),
    ({"query": "refund", "filter": "{not json"}, 422, "filter"), ({"query": "refund", "filter": "[" * 5000}, 422, "filter"),
    ({"query": "refund", "filter": '{"all": [{"tag": ""}]}'}, 422, "filter"),
])
def test_bad_question_input_is_shown_next_to_the_field(served, fields, status, field):
    client, csrf = sign_in(served, ROOT)
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, **fields})
    assert r.status_code == status and f'id="{field}-error"' in r.text, r.text


def test_bad_faq_input_is_shown_next_to_the_field_and_keeps_the_text(served):
    app, store = served[:2]
    client, csrf = sign_in(served, ROOT)
    cases = [({"faq_id": "", "answer": "a", "questions": "q"}, "faq_id"),
             ({"faq_id": "n1", "answer": "  ", "questions": "my kept phrasing"}, "answer"),
             ({"faq_id": "n1", "answer": "a", "questions": "\n \n"}, "questions"),
             ({"faq_id": "n1", "answer": "a", "questions": "ok\nbad\x00"}, "questions"),
             ({"faq_id": "n1", "answer": "a", "questions": "q", "tags": "a;b"}, "tags"),
             ({"faq_id": "refund", "answer": "a", "questions": "q"}, "faq_id")]
    for fields, field in cases:
        r = client.post("/console/kbs/default/faqs/new", data={"csrf": csrf, **fields})
        assert r.status_code in (409, 422) and f'id="{field}-error"' in r.text, (fields, r.text)
        assert "my kept phrasing" in r.text or "my kept phrasing" not in fields["questions"]
    assert store.get_faq("n1") is None


def test_malformed_bodies_are_4xx(served):
    client, csrf = sign_in(served, ROOT)
    path = "/console/kbs/default/try"
    r = client.post(path, content=b"csrf=" + csrf.encode() + b"&query=%FF%FE",
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400, r.text
    r = client.post(path, json={"csrf": csrf, "query": "x"})
    assert r.status_code == 415, r.text
    r = client.post(path, content=b"x" * 2_000_000, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413, r.text
    r = client.post(path, content=b"a=b", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415, "only /console takes form bodies, and only urlencoded ones"
    assert client.post("/match", content=b"query=x",
                       headers={"Content-Type": "application/x-www-form-urlencoded"}).status_code == 415


def test_feedback_input_and_once_per_request(served):
    client, csrf = sign_in(served, ROOT)
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "How do I get my money back?"})
    assert r.status_code == 200 and 'data-faq-id="refund"' in r.text
    request_id = re.search(r'name="request_id" value="([^"]+)"', r.text).group(1)
    for fields, status in [({"request_id": request_id, "correct": "maybe"}, 422), ({"correct": "true"}, 422),
                           ({"request_id": "nope", "correct": "true"}, 404),
                           ({"request_id": "\x00", "correct": "true"}, 422)]:
        r = client.post("/console/kbs/default/feedback", data={"csrf": csrf, **fields})
        assert r.status_code == status, (fields, r.text)
    ok = client.post("/console/kbs/default/feedback", data={"csrf": csrf, "request_id": request_id, "correct": "true"})
    assert ok.status_code == 200 and "Feedback recorded" in ok.text
    again = client.post("/console/kbs/default/feedback", data={"csrf": csrf, "request_id": request_id,
                                                               "correct": "false"})
    assert again.status_code == 409


def test_sign_out_ends_the_session_on_the_server(served):
    app = served[0]
    client, csrf = sign_in(served, ROOT)
    stolen = client.cookies.get(COOKIE)
    r = client.post("/console/logout", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/login"
    replay = TestClient(app)
    replay.cookies.set(COOKIE, stolen, path="/console")
    assert replay.get("/console/kbs", follow_redirects=False).status_code == 303


def test_saves_and_deletes_check_the_version_they_were_shown(served):
    app, store = served[:2]
    client, csrf = sign_in(served, ROOT)
    store.create_faq("versioned", "first answer", ["a versioned question"])
    page = client.get("/console/kbs/default/faqs/edit?id=versioned")
    version = re.search(r'name="version" value="([^"]+)"', page.text).group(1)
    edit = {"csrf": csrf, "id": "versioned", "answer": "mine", "questions": "a versioned question"}
    r = client.post("/console/kbs/default/faqs/edit", data=edit)  # no version: never a blind overwrite
    assert r.status_code == 409 and "nothing was saved" in r.text
    store.update_faq("versioned", answer="theirs")
    for path, fields in [("/console/kbs/default/faqs/edit", edit), ("/console/kbs/default/faqs/delete", {"csrf": csrf})]:
        r = client.post(path, data={**fields, "id": "versioned", "version": version})
        assert r.status_code == 409, (path, r.text)
    assert store.get_faq("versioned").answer == "theirs"
    fresh = re.search(r'name="version" value="([^"]+)"',
                      client.get("/console/kbs/default/faqs/edit?id=versioned").text).group(1)
    r = client.post("/console/kbs/default/faqs/delete", data={"csrf": csrf, "id": "versioned", "version": fresh},
                    follow_redirects=False)
    assert r.status_code == 303 and store.get_faq("versioned") is None
    r = client.post("/console/kbs/default/faqs/delete", data={"csrf": csrf, "id": "versioned", "version": fresh})
    assert r.status_code == 404


def test_faq_list_searches_and_pages(served):
    store = served[1]
    client, _ = sign_in(served, ROOT)
    added = [f"paged_{i:02d}" for i in range(25)]
    for faq_id in added:
        store.create_faq(faq_id, f"answer {faq_id}", [f"pageable question {faq_id}"])
    try:
        first = client.get("/console/kbs/default/faqs?q=pageable")
        assert "(25)" in first.text and "page 1 of 2" in first.text
        assert re.findall(r'<tr data-faq-id="([^"]+)"', first.text) == added[:20]
        assert 'href="/console/kbs/default/faqs?q=pageable&amp;page=2"' in first.text
        second = client.get("/console/kbs/default/faqs?q=pageable&page=2")
        assert re.findall(r'<tr data-faq-id="([^"]+)"', second.text) == added[20:]
        beyond = client.get("/console/kbs/default/faqs?q=pageable&page=3")
        assert beyond.status_code == 200 and "No FAQs match that search" in beyond.text
    finally:
        for faq_id in added:
            store.delete_faq(faq_id)


@pytest.mark.parametrize("value", ["\x00", "\ud800", "%", "'\"<>", "\u202e", "x" * 5000, "..", "/", "a\nb"])
def test_no_client_string_reaches_a_500(served, value):
    client, csrf = sign_in(served, ROOT)
    quoted = quote(value.encode("utf-8", "surrogatepass"), safe="")  # a lone surrogate: bytes that are not UTF-8
    for path in (f"/console/kbs/default/faqs?q={quoted}", f"/console/kbs/default/faqs?page={quoted}",
                 f"/console/kbs/default/faqs/edit?id={quoted}"):
        assert client.get(path).status_code < 500, path
    for path in (f"/console/kbs/default/builds/curve?version={quoted}",):
        assert client.get(path).status_code < 500, path
    for path in ("/console/kbs/default/try", "/console/kbs/default/feedback", "/console/kbs/default/faqs/new",
                 "/console/kbs/default/faqs/edit", "/console/kbs/default/faqs/delete", "/console/login",
                 "/console/kbs/default/builds/activate", "/console/kbs/default/import/apply"):
        for name in ("query", "top_k", "request_id", "correct", "faq_id", "answer", "questions", "tags", "id",
                     "version", "token", "import_id"):
            body = f"csrf={csrf}&{name}={quoted}".encode()
            r = client.post(path, content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert r.status_code < 500, (path, name, r.text)
    # multipart: httpx cannot send a lone surrogate in a name or field, so those go percent-encoded
    for fields, upload in (({}, (quoted, value.encode("utf-8", "surrogatepass"))),
                           ({}, ("x.jsonl", value.encode("utf-8", "surrogatepass"))),
                           ({"sync": quoted}, ("x.jsonl", b"")), ({"csrf": quoted}, ("x.jsonl", b""))):
        r = client.post("/console/kbs/default/import", data={"csrf": csrf, **fields},
                        files={"file": (*upload, "text/plain")})
        assert r.status_code < 500, (fields, upload, r.text)
    assert store_unchanged(served)


def store_unchanged(served) -> bool:
    return served[1].get_faq("refund") is not None


def test_sessions_end_when_idle_or_old(tmp_path):
    from datetime import datetime, timedelta, timezone

    from app.api.console import sessions as sessions_module
    from migrations.runner import migrated_store

    settings = make_settings(tmp_path)
    store = migrated_store(settings)
    token_id = store.catalog.issue_token("default", "admin")[0]
    now = [datetime(2026, 1, 1, tzinfo=timezone.utc)]
    sessions = sessions_module.Sessions(store.console_sessions, clock=lambda: now[0])
    idle, busy = sessions.open(None, admin_token="t"), sessions.open("default", token_id)
    now[0] += timedelta(seconds=sessions_module.IDLE_S - 1)
    assert sessions.get(busy.id).csrf == busy.csrf
    now[0] += timedelta(seconds=2)
    assert sessions.get(idle.id) is None and sessions.get(busy.id) is not None
    while now[0] - busy.created <= timedelta(seconds=sessions_module.MAX_AGE_S):
        now[0] += timedelta(seconds=sessions_module.IDLE_S / 2)
        sessions.get(busy.id)
    assert sessions.get(busy.id) is None, "used all along, still ended after MAX_AGE_S"
    assert len(sessions) == 0
    # the table holds neither the cookie nor a token
    kept = sessions.open(None, admin_token="the-admin-token")
    with store.engine.connect() as conn:
        rows = [tuple(map(str, r)) for r in conn.exec_driver_sql("SELECT * FROM console_sessions")]
    assert not any(kept.id in cell or "the-admin-token" in cell for row in rows for cell in row)
    store.close()


def test_a_sign_in_holds_across_a_restart_and_on_every_replica(served, encoder):  # noqa: F811
    """Two apps on one database (two replicas, or one before and after a restart): a session opened on
    one works on the other, with its flash message and its pending import; signing out ends it on both."""
    from app.api.main import create_app

    app, store = served[0], served[1]
    first, csrf = sign_in(served, ROOT)
    data = b'{"faq_id": "replica_faq", "question": "Replica?", "answer": "Yes."}\n'
    r = first.post("/console/kbs/default/import", data={"csrf": csrf}, files={"file": ("r.jsonl", data, "text/plain")})
    assert r.status_code == 200, r.text
    import_id = re.search(r'name="import_id" value="([^"]+)"', r.text).group(1)
    cookie = first.cookies.get(COOKIE)
    other = create_app(app.state.service.settings, store=store, encoder=encoder)
    with TestClient(other) as second:
        second.cookies.set(COOKIE, cookie, path="/console")
        page = second.get("/console/kbs/default/faqs")
        assert page.status_code == 200 and "Sign out" in page.text
        r = second.post("/console/kbs/default/import/apply", data={"csrf": csrf, "import_id": import_id},
                        follow_redirects=False)
        assert r.status_code == 303, r.text
        assert "Imported r.jsonl" in second.get("/console/kbs/default/faqs").text
        assert store.get_faq("replica_faq") is not None
        assert second.post("/console/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    first.cookies.set(COOKIE, cookie, path="/console")
    assert first.get("/console/kbs/default/faqs", follow_redirects=False).status_code == 303
    store.delete_faq("replica_faq")


def test_a_changed_admin_token_ends_its_sessions(served, encoder):  # noqa: F811
    from app.api.main import create_app

    app, store = served[0], served[1]
    client, _ = sign_in(served, ROOT)
    cookie = client.cookies.get(COOKIE)
    rotated = app.state.service.settings.model_copy(update={"admin_token": "a-new-root-token-of-32-characters"})
    with TestClient(create_app(rotated, store=store, encoder=encoder)) as restarted:
        restarted.cookies.set(COOKIE, cookie, path="/console")
        r = restarted.get("/console/kbs/default/faqs", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/console/login"


def test_two_sign_in_pages_open_at_once_both_work(served):
    client = TestClient(served[0])
    first, second = (csrf_of(client.get("/console/login").text) for _ in range(2))
    assert first == second
    forged = client.post("/console/login", data={"csrf": "A" * 43, "token": ROOT}, follow_redirects=False)
    assert forged.status_code == 403
    r = client.post("/console/login", data={"csrf": first, "token": ROOT}, follow_redirects=False)
    assert r.status_code == 303


def weights_of(html: str) -> dict[str, float]:
    return {word: float(weight) for weight, word in
            re.findall(r'<span class="word w\d" data-weight="(-?[0-9.]+)" title="[^"]*">([^<]+)</span>', html)}


def test_try_takes_a_filter(served):
    client, csrf = sign_in(served, ROOT)
    flt = '{"none": [{"tag": "nothing-has-it"}], "all": [{"source": "nowhere"}]}'
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "how do I get a refund", "filter": flt})
    assert r.status_code == 200 and 'data-faq-id="' not in r.text and 'id="decision" class="decision-abstain"' in r.text
    assert "nothing-has-it" in r.text, "the filter stays in its field"
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "how do I get a refund", "filter": "{}"})
    assert 'data-faq-id="refund"' in r.text
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "refund", "filter": '{"all": [{"tag": ""}]}'})
    assert "filter.all[0].tag" in r.text.split('id="filter-error"', 1)[1].split("</p>", 1)[0]


def test_try_shows_follow_up_buttons_and_goes_on_with_context(served):
    client, csrf = sign_in(served, ROOT)
    api = served[3]
    prompt = {"faq_id": "cancel_order", "text": "Cancel the order instead?"}
    assert api.patch("/admin/faqs/refund", headers=bearer(ROOT), json={"follow_ups": [prompt]}).status_code == 200
    try:
        r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "I want my money back"})
        buttons = r.text.split('id="follow-ups"', 1)[1].split("</form>", 1)[0]
        assert 'name="previous_faq_id" value="refund"' in buttons and 'value="Cancel the order instead?"' in buttons
        r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": prompt["text"],
                                                          "previous_faq_id": "refund"})
        assert r.status_code == 200 and 'id="decision" class="decision-answer"' in r.text
        assert '<tr data-faq-id="cancel_order">' in r.text and "follow_up" in r.text.split('id="context"', 1)[1][:300]
        r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "refund?", "previous_faq_id": "gone"})
        assert r.status_code == 200 and "unknown_previous" in r.text
        r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "refund?", "previous_faq_id": "x" * 300})
        assert r.status_code == 422 and 'id="context-error"' in r.text
    finally:
        api.patch("/admin/faqs/refund", headers=bearer(ROOT), json={"follow_ups": []})


def test_try_shows_why_it_matched(served):
    client, csrf = sign_in(served, ROOT)
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "how do I get a refund please"})
    assert r.status_code == 200, r.text
    assert 'data-faq-id="refund"' in r.text
    first_row = r.text.split('<tr data-faq-id="refund">', 1)[1].split("</tr>", 1)[0]
    for cls in ("phrasing-cosine", "first-cosine"):
        assert re.search(rf'<td class="signal {cls}">-?\d\.\d{{3}}</td>', first_row), (cls, first_row)
    assert re.search(r'<td class="signal answer-cosine">(-?\d\.\d{3}|–)</td>', first_row), first_row
    assert '<td class="signal first-score">–</td>' in first_row, "the ann arm re-ranks nothing"
    assert re.search(r'<td class="signal shared-words">\d+: [^<]*refund', first_row), first_row
    weights = weights_of(r.text)
    assert list(weights) == ["how", "do", "I", "get", "a", "refund", "please"], r.text
    assert weights["refund"] > weights["please"]
    assert "<strong>refund</strong>" in r.text.split('id="top-words"', 1)[1].split("</p>", 1)[0]
    assert re.search(r'id="weights-time" class="note">Worked out in \d+ ms \(8 texts', r.text)


def test_the_word_weights_of_a_long_question_are_skipped(served):
    client, csrf = sign_in(served, ROOT)
    query = " ".join(["refund"] + ["please"] * 39)
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": query})
    assert r.status_code == 200, r.text
    assert 'id="weights-skipped"' in r.text and "40 words" in r.text and "skipped" in r.text
    assert weights_of(r.text) == {}
    assert 'class="signal phrasing-cosine"' in r.text, "the signals are still shown"


def test_the_explanation_matches_once_and_leaves_match_as_it_was(served):
    app, store = served[:2]
    client, csrf = sign_in(served, ROOT)
    query = "refund explained once"
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": query})
    assert r.status_code == 200 and 'id="weights"' in r.text, r.text
    app.state.service.query_log.flush()
    assert [row["query"] for row in store.read_query_log()].count(query) == 1
    body = client.post("/match", json={"query": query}).json()
    assert set(body["matches"][0]) == {"faq_id", "question", "answer", "score", "metadata", "tags", "source",
                                       "follow_ups"}


@pytest.mark.parametrize("query", ["<script>alert(1)</script> refund", "refund \u202e please", "\u00a0refund\u2003now\u00a0",
                                   "'\"<> & %", "😀 refund 😀", "x", "- - -", "refund " * 32, "a\tb\nc"])
def test_hostile_questions_are_explained_not_a_500(served, query):
    client, csrf = sign_in(served, ROOT)
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": query})
    assert r.status_code < 500, r.text
    if r.status_code == 200:
        assert "<script>alert" not in r.text
        assert 'id="weights"' in r.text or 'id="weights-skipped"' in r.text, r.text


def test_the_editor_writes_metadata_source_follow_ups_and_context_only(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    fields = {"csrf": csrf, "faq_id": "gifts", "answer": "Gift cards never expire.", "questions": "Do gift cards expire?",
              "metadata": "Lang = en\nteam=billing\n", "source": " terms.pdf ",
              "follow_ups": "refund | Want a refund instead?\n\nshipping_time|How long is shipping?",
              "context_only": "on"}
    r = client.post("/console/kbs/default/faqs/new", data=fields, follow_redirects=False)
    assert r.status_code == 303, r.text
    faq = store.get_faq("gifts")
    assert (faq.metadata, faq.source, faq.follow_ups, faq.context_only) == (
        {"lang": "en", "team": "billing"}, "terms.pdf",
        [{"faq_id": "refund", "text": "Want a refund instead?"}, {"faq_id": "shipping_time", "text": "How long is shipping?"}],
        True)
    page = client.get("/console/kbs/default/faqs/edit?id=gifts").text
    assert "lang=en\nteam=billing" in page and "refund | Want a refund instead?" in page
    assert 'id="context_only" name="context_only" checked' in page and 'value="terms.pdf"' in page
    version = re.search(r'name="version" value="([^"]+)"', page).group(1)
    save = {"csrf": csrf, "id": "gifts", "version": version, "answer": "Gift cards never expire.",
            "questions": "Do gift cards expire?", "metadata": "", "source": "", "follow_ups": "refund | Refund?"}
    assert client.post("/console/kbs/default/faqs/edit", data=save, follow_redirects=False).status_code == 303
    faq = store.get_faq("gifts")
    assert (faq.metadata, faq.source, faq.follow_ups, faq.context_only) == (
        {}, None, [{"faq_id": "refund", "text": "Refund?"}], False)

    # lines of the wrong shape, and values the store's rules refuse, are shown next to their field
    for bad, field in [({"metadata": "no equals sign"}, "metadata"), ({"metadata": "A=1\na =2"}, "metadata"),
                       ({"follow_ups": "refund Refund?"}, "follow_ups"), ({"follow_ups": "nowhere | t"}, "follow_ups"),
                       ({"follow_ups": "gifts2 | me"}, "follow_ups"), ({"source": "s" * 501}, "source"),
                       ({"context_only": "yes"}, "context_only")]:
        r = client.post("/console/kbs/default/faqs/new", data={**fields, "faq_id": "gifts2", **bad})
        assert r.status_code == 422 and f'id="{field}-error"' in r.text, (bad, r.text)
    assert store.get_faq("gifts2") is None
    # deleting an FAQ takes it out of the follow-ups naming it, and the page says so
    store.create_faq("gifts3", "Three.", ["A third gift question"], follow_ups=[{"faq_id": "gifts", "text": "t"}])
    version = re.search(r'name="version" value="([^"]+)"', client.get("/console/kbs/default/faqs/edit?id=gifts").text)
    r = client.post("/console/kbs/default/faqs/delete", data={"csrf": csrf, "id": "gifts", "version": version.group(1)})
    assert r.status_code == 200 and "It is no longer a follow-up of &#39;gifts3&#39;." in r.text, r.text
    assert store.get_faq("gifts3").follow_ups == [] and store.delete_faq("gifts3")
