"""Every way to change a KB leaves exactly one audit row naming who, in which role, through what, and the state
before and after: each mutating route of the admin API (from the app's OpenAPI schema, bare for the default KB and
under /kbs/{kb} for `shop`), each form of the console, and each mutating `faq` command.

A route, form or command the walk does not know fails it: add its case (what it records, or that it changes no
KB) with it. Who acts comes from the roles' wiring (app/api/roles.py `acting_as` with the token's name and role);
`source`, `actor`, `role` and `request_id` of the API and console rows rely on it.
"""
from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from app.store.audit import operator
from app.store.reviews import lint_key, phrasing_key
from index.artifacts import BuildRegistry
from tests.helpers.api import bearer, build, two_built_kbs
from tests.helpers.console import csrf_of

ROOT = "audit-walk-root-token-of-32-characters"
#: the name of the tokens the walk acts with, as the rows must record it
WALKER = "walker"
MUTATING = ("POST", "PUT", "PATCH", "DELETE")
#: whether an action's row holds a state before and after it
SHAPE = {"faq.create": (False, True), "faq.update": (True, True), "faq.delete": (True, False),
         "kb.import": (True, True), "kb.settings": (True, True), "small_talk.update": (True, True),
         "kb.create": (False, True), "kb.delete": (True, False), "token.create": (False, True),
         "token.revoke": (True, True), "index.build": (True, True), "index.activate": (True, True),
         "index.reload": (True, True), "review.accept": (True, True), "review.dismiss": (False, True),
         "review.restore": (True, False), "publish": (True, True), "rollback": (True, True)}


def audit_rows(store, kb: str) -> list:
    return store.for_kb(kb).audit.read(limit=100_000)


def new_rows(store, kb: str, last_id: int) -> list:
    return [r for r in audit_rows(store, kb) if r.id > last_id]


def last_id(store, kb: str) -> int:
    found = audit_rows(store, kb)
    return found[0].id if found else 0


def check_one(rows: list, action: str | None, actor: str, role: str, source: str, what: str) -> None:
    if action is None:
        assert rows == [], f"{what}: changes no KB, but left {[r.action for r in rows]}"
        return
    assert [r.action for r in rows] == [action], f"{what}: expected one {action} row, got {[r.as_dict() for r in rows]}"
    row = rows[0]
    assert (row.actor, row.role, row.source) == (actor, role, source), f"{what}: {row.as_dict()}"
    if source != "cli":
        assert row.request_id, f"{what}: no request id"
    has_before, has_after = SHAPE[action]
    assert (row.before is not None, row.after is not None) == (has_before, has_after), f"{what}: {row.as_dict()}"


# ---------------------------------------------------------------- a served app, its proposals

@dataclass
class Walk:
    app: Any
    client: TestClient
    store: Any
    settings: Any
    encoder: Any
    tokens: dict[str, str]
    counter: list[int] = field(default_factory=lambda: [0])

    def unique(self, stem: str) -> str:
        self.counter[0] += 1
        return f"{stem}-{self.counter[0]}"

    def prefix(self, kb: str) -> str:
        return "" if kb == "default" else f"/kbs/{kb}"

    def propose(self, kb: str, faq_id: str) -> str:
        """A phrasing proposed for `faq_id` (a query whose feedback names it); its review key."""
        query = self.unique(f"walk words for {faq_id} number")
        r = self.client.post(f"{self.prefix(kb)}/match", json={"query": query})
        assert r.status_code == 200, r.text
        done = self.client.post(f"{self.prefix(kb)}/feedback",
                                json={"request_id": r.json()["request_id"], "faq_id": faq_id})
        assert done.status_code == 200, done.text
        return phrasing_key(faq_id, query)

    def new_build(self, kb: str) -> str:
        """A new version made current behind the served app's back."""
        settings = self.settings if kb == "default" else self.settings.for_kb(kb)
        return build(self.store.for_kb(kb), self.encoder, settings)["version"]


@pytest.fixture
def walk(tmp_path, encoder):  # noqa: F811
    from app.api.main import create_app

    settings, store = two_built_kbs(tmp_path, encoder, ROOT)
    tokens = {kb: store.catalog.issue_token(kb, "admin", WALKER)[1] for kb in ("default", "shop")}
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        yield Walk(app, client, store, settings, encoder, tokens)


# ---------------------------------------------------------------- the admin API

#: a KB's FAQ each case may edit
SOME_FAQ = {"default": "refund", "shop": "parking"}

Request = dict[str, Any]
ApiCase = Callable[[Walk, str], tuple[str, Request, "str | Callable[[Any], str | None]"]]


def _create(w: Walk, kb: str):
    faq_id = w.unique("walk-new")
    return "/admin/faqs", {"json": {"faq_id": faq_id, "answer": "A new answer.", "questions": ["a new question"]}}, \
        "faq.create"


def _replace(w: Walk, kb: str):
    faq = w.store.for_kb(kb).get_faq(SOME_FAQ[kb])
    return f"/admin/faqs/{faq.faq_id}", {"json": {"answer": w.unique("Replaced answer"), "questions": faq.questions,
                                                  "tags": faq.tags}}, "faq.update"


def _patch(w: Walk, kb: str):
    return f"/admin/faqs/{SOME_FAQ[kb]}", {"json": {"answer": w.unique("Patched answer")}}, "faq.update"


def _delete(w: Walk, kb: str):
    faq_id = w.unique("walk-doomed")
    w.store.for_kb(kb).create_faq(faq_id, "Soon gone.", ["a doomed question"])
    return f"/admin/faqs/{faq_id}", {}, "faq.delete"


def _reload(w: Walk, kb: str):
    assert w.client.get(f"{w.prefix(kb)}/admin/index", headers=bearer(w.tokens[kb])).status_code == 200  # served
    w.new_build(kb)
    return "/admin/index/reload", {}, "index.reload"


def _accept(w: Walk, kb: str):
    return f"/admin/review/phrasings/{w.propose(kb, SOME_FAQ[kb])}/accept", {}, "review.accept"


def _dismiss(w: Walk, kb: str):
    return "/admin/review/dismissals", {"json": {"queue": "lint", "faq_id": SOME_FAQ[kb], "reason": "walked"}}, \
        "review.dismiss"


def _restore(w: Walk, kb: str):
    faq = w.store.for_kb(kb).get_faq(SOME_FAQ[kb])
    key = lint_key(faq.faq_id, faq.answer + w.unique(" "))
    assert w.store.for_kb(kb).reviews.dismiss("lint", key, faq.faq_id, "to be restored")
    return f"/admin/review/dismissals/lint/{key}", {}, "review.restore"


def _published(action: str) -> Callable[[Any], str | None]:
    # app/release/publishing.py records these; a refusal (409), or nothing new to publish, changes nothing
    return lambda r: action if r.status_code == 200 and r.json().get("published") else None


def _publish(w: Walk, kb: str):
    return "/admin/publish", {"json": {"note": "walked"}}, _published("publish")


def _rollback(w: Walk, kb: str):
    from app.release.publishing import NothingToPublish, publish

    scoped = w.store.for_kb(kb)
    reviewed = {**scoped.catalog.settings(kb), "publishing": "reviewed"}  # a KB that publishes immediately has none
    scoped.catalog.set_settings(kb, reviewed)
    w.app.state.resident_kbs.get(kb).apply_settings(reviewed)
    try:
        first = publish(scoped, "walk: first").publication.id
    except NothingToPublish as nothing:
        first = nothing.latest
    scoped.update_faq(SOME_FAQ[kb], answer=w.unique("Published later"))
    publish(scoped, "walk: second")
    return "/admin/rollback", {"json": {"to": first, "note": "walked"}}, _published("rollback")


API_CASES: dict[tuple[str, str], ApiCase] = {
    ("POST", "/admin/faqs"): _create,
    ("PUT", "/admin/faqs/{faq_id}"): _replace,
    ("PATCH", "/admin/faqs/{faq_id}"): _patch,
    ("DELETE", "/admin/faqs/{faq_id}"): _delete,
    ("POST", "/admin/index/reload"): _reload,
    ("POST", "/admin/review/phrasings/{key}/accept"): _accept,
    ("POST", "/admin/review/dismissals"): _dismiss,
    ("DELETE", "/admin/review/dismissals/{queue}/{key}"): _restore,
    ("POST", "/admin/publish"): _publish,
    ("POST", "/admin/rollback"): _rollback,
}


def admin_routes(app) -> list[tuple[str, str]]:
    """(method, path) of every mutating route of the admin API in the OpenAPI schema."""
    paths = app.openapi()["paths"]
    return [(method.upper(), path) for path, item in paths.items() if "/admin" in path
            for method in item if method.upper() in MUTATING]


def test_every_admin_route_that_changes_a_kb_leaves_one_row(walk):
    routes = admin_routes(walk.app)
    unknown = sorted({(m, p.removeprefix("/kbs/{kb}")) for m, p in routes} - set(API_CASES))
    assert not unknown, f"mutating admin routes the walk does not know: {unknown}"
    recorded = set()
    for method, path in routes:
        kb = "shop" if path.startswith("/kbs/{kb}") else "default"
        url, request, expected = API_CASES[(method, path.removeprefix("/kbs/{kb}"))](walk, kb)
        since = last_id(walk.store, kb)
        r = walk.client.request(method, walk.prefix(kb) + url, headers=bearer(walk.tokens[kb]), **request)
        action = expected(r) if callable(expected) else expected
        if not callable(expected):
            assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
        check_one(new_rows(walk.store, kb, since), action, WALKER, "admin", "api", f"{method} {path}")
        recorded.add(action)
    assert {"faq.create", "faq.update", "faq.delete", "index.reload", "review.accept", "review.dismiss",
            "review.restore", "publish", "rollback"} <= recorded


def test_the_audit_route(walk):
    auth = bearer(walk.tokens["shop"])
    walk.client.patch("/kbs/shop/admin/faqs/pets", headers=auth, json={"answer": "Cats too."})
    r = walk.client.get("/kbs/shop/admin/audit", headers=auth, params={"faq_id": "pets"})
    assert r.status_code == 200, r.text
    [entry] = r.json()["entries"]
    assert (entry["action"], entry["subject"], entry["actor"], entry["source"]) == ("faq.update", "pets", WALKER, "api")
    assert entry["after"]["answer"] == "Cats too." and entry["before"]["answer"] != "Cats too."
    newest_first = walk.client.get("/kbs/shop/admin/audit", headers=auth).json()["entries"]
    assert [e["id"] for e in newest_first] == sorted((e["id"] for e in newest_first), reverse=True)
    assert len(walk.client.get("/kbs/shop/admin/audit", headers=auth, params={"limit": 1}).json()["entries"]) == 1
    assert walk.client.get("/kbs/shop/admin/audit", headers=auth,
                           params={"actor": "nobody"}).json()["entries"] == []
    assert walk.client.get("/admin/audit", headers=bearer(ROOT)).json()["entries"][0]["kb"] == "default"
    for params, name in [({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"since": "yesterday"}, "since"),
                         ({"faq_id": "x" * 201}, "faq_id")]:
        bad = walk.client.get("/kbs/shop/admin/audit", headers=auth, params=params)
        assert bad.status_code in (400, 422) and name in bad.text, (params, bad.text)
    assert walk.client.get("/kbs/shop/admin/audit").status_code == 401
    assert walk.client.get("/admin/audit", headers=auth).status_code == 403  # another KB's token


# ---------------------------------------------------------------- the console

def _post(w: Walk, path: str, data: dict[str, str], csrf: str):
    return w.client.post(path, data={"csrf": csrf, **data}, follow_redirects=False)


def _import_dry_run(w: Walk, csrf: str, kb: str = "default"):
    body = b'{"faq_id": "walk-imported", "question": "an imported question", "answer": "Imported."}\n'
    return w.client.post(f"/console/kbs/{kb}/import", data={"csrf": csrf},
                         files={"file": ("walk.jsonl", body, "application/x-ndjson")}, follow_redirects=False), body


def _finish_build(kb: str) -> None:
    for thread in threading.enumerate():
        if thread.name == f"console-build-{kb}":
            thread.join(timeout=300)
            assert not thread.is_alive(), "the console build did not end"


ConsoleCase = Callable[[Walk, str], "tuple[Callable[[], Any], str | None]"]


def _console_case(path: str) -> ConsoleCase | None:
    """What a console form does in the walk: (send it, the action it must record), its setup done."""
    kb = "default"
    faq = SOME_FAQ[kb]

    def faq_new(w: Walk, csrf: str):
        data = {"faq_id": w.unique("console-new"), "answer": "From the console.", "questions": "a console question"}
        return lambda: _post(w, path.format(kb=kb), data, csrf), "faq.create"

    def faq_edit(w: Walk, csrf: str):
        stored = w.store.get_faq(faq)
        data = {"id": faq, "version": stored.updated_at.isoformat(), "answer": w.unique("Console answer"),
                "questions": "\n".join(stored.questions), "tags": ", ".join(stored.tags)}
        return lambda: _post(w, path.format(kb=kb), data, csrf), "faq.update"

    def faq_delete(w: Walk, csrf: str):
        doomed = w.store.create_faq(w.unique("console-doomed"), "Soon gone.", ["a doomed console question"])
        data = {"id": doomed.faq_id, "version": doomed.updated_at.isoformat()}
        return lambda: _post(w, path.format(kb=kb), data, csrf), "faq.delete"

    def import_dry(w: Walk, csrf: str):
        return lambda: _import_dry_run(w, csrf)[0], None

    def import_apply(w: Walk, csrf: str):
        page, body = _import_dry_run(w, csrf)
        assert page.status_code == 200, page.text
        import_id = re.search(r'name="import_id" value="([^"]+)"', page.text).group(1)

        def send():
            r = _post(w, path.format(kb=kb), {"import_id": import_id}, csrf)
            row = audit_rows(w.store, kb)[0]
            assert row.after["sha256"] == hashlib.sha256(body).hexdigest() and row.subject == "walk.jsonl"
            return r

        return send, "kb.import"

    def accept(w: Walk, csrf: str):
        key = w.propose(kb, "shipping_time")
        return lambda: _post(w, path.format(kb=kb), {"key": key}, csrf), "review.accept"

    def dismiss(w: Walk, csrf: str):
        data = {"queue": "phrasing", "key": w.propose(kb, "opening_hours"), "reason": "walked"}
        return lambda: _post(w, path.format(kb=kb), data, csrf), "review.dismiss"

    def restore(w: Walk, csrf: str):
        key = hashlib.sha256(w.unique("restore").encode()).hexdigest()
        assert w.store.reviews.dismiss("phrasing", key, "refund: a dismissed phrasing")
        return lambda: _post(w, path.format(kb=kb), {"queue": "phrasing", "key": key}, csrf), "review.restore"

    def small_talk(w: Walk, csrf: str):
        data = {"enabled": "on", "persona": "witty", "answers_thanks": w.unique("Any time")}
        return lambda: _post(w, path.format(kb=kb), data, csrf), "small_talk.update"

    def build_now(w: Walk, csrf: str):
        def send():
            r = _post(w, path.format(kb=kb), {}, csrf)
            _finish_build(kb)
            return r

        return send, "index.build"

    def activate(w: Walk, csrf: str):
        registry = BuildRegistry(w.settings.index_dir)
        older = next(v for v in reversed(registry.versions()) if v != registry.current())
        return lambda: _post(w, path.format(kb=kb), {"version": older}, csrf), "index.activate"

    def publish_draft(w: Walk, csrf: str):
        w.store.update_faq(faq, answer=w.unique("To be published from the console"))
        return lambda: _post(w, path.format(kb=kb), {"note": "console walk"}, csrf), "publish"

    def roll_back(w: Walk, csrf: str):
        _, body, _ = _rollback(w, kb)
        return lambda: _post(w, path.format(kb=kb), {"to": str(body["json"]["to"])}, csrf), "rollback"

    def try_question(w: Walk, csrf: str):
        return lambda: _post(w, path.format(kb=kb), {"query": "How do I get a refund?"}, csrf), None

    def feedback(w: Walk, csrf: str):
        asked = w.client.post("/match", json={"query": "How do I get a refund?"}).json()["request_id"]
        return lambda: _post(w, path.format(kb=kb), {"request_id": asked, "correct": "true"}, csrf), None

    return {
        "/console/kbs/{kb}/faqs/new": faq_new, "/console/kbs/{kb}/faqs/edit": faq_edit,
        "/console/kbs/{kb}/faqs/delete": faq_delete, "/console/kbs/{kb}/import": import_dry,
        "/console/kbs/{kb}/import/apply": import_apply, "/console/kbs/{kb}/review/accept": accept,
        "/console/kbs/{kb}/review/dismiss": dismiss, "/console/kbs/{kb}/review/restore": restore,
        "/console/kbs/{kb}/smalltalk": small_talk, "/console/kbs/{kb}/builds/new": build_now,
        "/console/kbs/{kb}/builds/activate": activate, "/console/kbs/{kb}/try": try_question,
        "/console/kbs/{kb}/feedback": feedback, "/console/kbs/{kb}/publish": publish_draft,
        "/console/kbs/{kb}/rollback": roll_back,
    }.get(path)


#: console forms that change no KB, walked apart: signing in and out
SESSION_FORMS = {"/console/login", "/console/logout"}


def console_forms() -> list[str]:
    """Every form the console's pages take (app/api/console PAGES: what `mount_console` includes)."""
    from app.api.console import PAGES

    return [route.path for page in PAGES for route in page.router.routes
            if isinstance(route, APIRoute) and route.methods & {"POST"}]


def sign_in(w: Walk, token: str) -> str:
    w.client.cookies.clear()
    page = w.client.get("/console/login")
    r = w.client.post("/console/login", data={"csrf": csrf_of(page.text), "token": token}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return csrf_of(w.client.get(r.headers["location"]).text)


def test_every_console_form_that_changes_a_kb_leaves_one_row(walk):
    forms = console_forms()
    assert len(forms) > 10 and set(forms) > SESSION_FORMS
    unknown = sorted(p for p in forms if p not in SESSION_FORMS and _console_case(p) is None)
    assert not unknown, f"console forms the walk does not know: {unknown}"
    since = last_id(walk.store, "default")
    csrf = sign_in(walk, walk.tokens["default"])
    check_one(new_rows(walk.store, "default", since), None, WALKER, "admin", "console", "sign-in")
    walk.new_build("default")  # an older version for Activate
    order = sorted((p for p in forms if p not in SESSION_FORMS), key=lambda p: p.endswith("/activate"))
    for path in order:
        send, action = _console_case(path)(walk, csrf)
        since = last_id(walk.store, "default")
        r = send()
        assert r.status_code < 400 if action else r.status_code < 500, f"{path}: {r.status_code} {r.text[:500]}"
        check_one(new_rows(walk.store, "default", since), action, WALKER, "admin", "console", path)
    since = last_id(walk.store, "default")
    assert _post(walk, "/console/logout", {}, csrf).status_code == 303
    check_one(new_rows(walk.store, "default", since), None, WALKER, "admin", "console", "sign-out")


def test_the_history_page_lists_the_rows_escaped(walk):
    hostile = "<script>window.__pwned = 1</script>"
    walk.client.patch("/admin/faqs/refund", headers=bearer(walk.tokens["default"]), json={"answer": hostile})
    csrf_of_page = sign_in(walk, walk.tokens["default"])
    assert csrf_of_page
    page = walk.client.get("/console/kbs/default/history")
    assert page.status_code == 200, page.text
    assert 'id="nav-history"' in page.text and 'data-action="faq.update"' in page.text
    assert hostile not in page.text and "&lt;script&gt;" in page.text
    one = walk.client.get("/console/kbs/default/history", params={"faq_id": "refund"})
    assert one.status_code == 200 and "<h1>History of <code>refund</code></h1>" in one.text
    assert one.text.count("<tr data-action=") == len(walk.store.audit.read(faq_id="refund"))
    editor = walk.client.get("/console/kbs/default/faqs/edit", params={"id": "refund"})
    assert 'id="faq-history"' in editor.text and "/history?faq_id=refund" in editor.text
    assert walk.client.get("/console/kbs/default/history", params={"faq_id": "x\x00"}).status_code == 422


# ---------------------------------------------------------------- the CLI

#: `faq` commands that change no KB (read, export, lint, mine, retention, housekeeping of the build folder)
CLI_READ_ONLY = {("kb", "audit"), ("kb", "diff"), ("kb", "export"), ("kb", "lint"), ("kb", "list"), ("kb", "mine"),
                 ("kb", "published"), ("kb", "stats"), ("index", "list"), ("index", "verify"), ("index", "sweep"),
                 ("index", "calibrate")}
CLI_WALKED = {("kb", "create"), ("kb", "settings"), ("kb", "import"), ("kb", "token"), ("kb", "publish"),
              ("kb", "rollback"), ("kb", "delete"), ("index", "build"), ("index", "activate")}


def cli_commands() -> set[tuple[str, str]]:
    import argparse

    from cli.main import build_parser

    found = set()
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for group in ("kb", "index"):
                for inner in action.choices[group]._actions:
                    if isinstance(inner, argparse._SubParsersAction):
                        found |= {(group, name) for name in inner.choices}
    return found


def test_every_cli_command_that_changes_a_kb_leaves_one_row(faq_env, tmp_path, capsys, monkeypatch):
    from cli.main import main
    from migrations.runner import migrated_store

    unknown = sorted(cli_commands() - CLI_READ_ONLY - CLI_WALKED)
    assert not unknown, f"`faq` commands the walk does not know: {unknown}"
    monkeypatch.setenv("FAQ_ENCODER", "minilm")
    from app.settings import get_settings

    get_settings.cache_clear()
    me = operator().name
    kb_file = tmp_path / "walk.jsonl"
    kb_file.write_text('{"faq_id": "a", "question": "first question", "answer": "First."}\n'
                       '{"faq_id": "b", "question": "second question", "answer": "Second."}\n')
    store = migrated_store(get_settings())
    kb = "walk-cli"

    def run(argv: list[str], action: str | None, rc: int = 0) -> list:
        since = last_id(store, kb)
        assert main(argv) == rc, capsys.readouterr()
        out = capsys.readouterr().out
        rows = new_rows(store, kb, since)
        check_one(rows, action, me, "admin", "cli", " ".join(argv))
        return [out, *rows]

    try:
        run(["kb", "create", kb], "kb.create")
        run(["kb", "settings", "--kb", kb, "--set", "default_threshold=0.6"], "kb.settings")
        run(["kb", "settings", "--kb", kb, "--set", "default_threshold=0.6"], None)  # no change
        imported = run(["kb", "import", str(kb_file), "--kb", kb], "kb.import")[1]
        assert imported.after["sha256"] == hashlib.sha256(kb_file.read_bytes()).hexdigest()
        assert imported.after["faqs_created"] == 2 and imported.subject == str(kb_file)
        run(["kb", "import", str(kb_file), "--kb", kb, "--dry-run"], None)
        issued = run(["kb", "token", "--kb", kb, "--role", "editor", "--name", "walk token"], "token.create")
        token = issued[0].strip()
        assert issued[1].after == {"id": int(issued[1].subject), "role": "editor", "name": "walk token"}
        assert token not in str(issued[1].as_dict())
        run(["kb", "token", "--kb", kb, "--revoke", issued[1].subject], "token.revoke")
        first = run(["index", "build", "--kb", kb, "--no-lexical", "--no-progress"], "index.build")[1]
        assert first.after["made_current"] is True and first.after["current"] == first.subject
        run(["index", "build", "--kb", kb, "--no-lexical", "--no-progress"], "index.build")
        run(["index", "activate", first.subject, "--kb", kb], "index.activate")
        published = run(["kb", "publish", "--kb", kb, "--note", "walked"], "publish")
        assert published[1].actor == me
        run(["kb", "settings", "--kb", kb, "--set", "publishing=reviewed"], "kb.settings")
        store.for_kb(kb).update_faq("a", answer="First, again.")
        run(["kb", "publish", "--kb", kb], "publish")
        run(["kb", "rollback", "1", "--kb", kb], "rollback")
        run(["kb", "delete", kb, "--yes"], "kb.delete")
        assert not store.for_kb(kb).kb_exists() and audit_rows(store, kb)[0].action == "kb.delete"
        # a first import makes its KB: two changes, two rows
        assert main(["kb", "import", str(kb_file), "--kb", "walk-new"]) == 0
        assert [r.action for r in reversed(audit_rows(store, "walk-new"))] == ["kb.create", "kb.import"]
    finally:
        store.close()
