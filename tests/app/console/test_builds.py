"""The console's builds page over plain HTTP: list, curve, activate / roll back, Build now.

Its own app and data folder: these tests change which build is current.
"""
from __future__ import annotations

import re
import threading
import time

import pytest
from fastapi.testclient import TestClient

from app.api.console import builds as builds_module
from tests.helpers.api import build, make_settings, make_store
from tests.helpers.console import csrf_of, sign_in

ROOT = "console-builds-token-of-32-characters"
PAGE = "/console/kbs/default/builds"


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("console_builds"), admin_token=ROOT, keep_versions=5)
    store = make_store(settings)
    first = build(store, encoder, settings)["version"]
    second = build(store, encoder, settings)["version"]
    from app.api.main import create_app

    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        yield app, store, {"versions": [first, second]}, client


def served_version(client) -> str:
    r = client.post("/match", json={"query": "How do I get my money back?"})
    assert r.status_code == 200, r.text
    return r.json()["index_version"]


def wait_for_build(app, kb: str = "default", timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = app.state.console_builds.get(kb)
        if job is not None and job.state != "running":
            return job
        time.sleep(0.1)
    raise AssertionError("the build did not end")


def test_lists_versions_and_the_current_builds_table(served):
    app, _, info = served[:3]
    client, _ = sign_in(served, ROOT)
    r = client.get(PAGE)
    assert r.status_code == 200, r.text
    shown = re.findall(r'<tr data-version="([^"]+)"', r.text)
    assert shown[:2] == info["versions"][::-1], "newest first"
    assert re.search(r'<tr data-version="%s" class="current">' % re.escape(app.state.service.registry.current()), r.text)
    assert "current</strong>" in r.text and 'class="activate"' in r.text
    assert 'id="precision"' in r.text or 'id="no-table"' in r.text


@pytest.mark.parametrize("version, status", [("", 422), ("../../etc/passwd", 422), ("20261122T010203Z-a1b2c3", 404),
                                             ("20261122T010203Z-A1B2C3", 422), ("x" * 500, 422),
                                             ("20261122T010203Z-a1b2c3/..", 422)])
def test_curve_takes_only_a_build_of_the_kb(served, version, status):
    client, _ = sign_in(served, ROOT)
    r = client.get(PAGE + "/curve", params={"version": version})
    assert r.status_code == status and ("version:" in r.text or status == 404), r.text


def test_curve_png_of_a_console_build_is_served(served):
    app = served[0]
    client, csrf = sign_in(served, ROOT)
    assert client.post(PAGE + "/new", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    job = wait_for_build(app)
    assert job.state == "done", job.message
    page = client.get(PAGE)
    found = re.search(r'<img id="curve" src="([^"]+)"', page.text)
    if found is None:  # a build without a table has no curve: the page says so
        assert 'id="no-table"' in page.text
        return
    r = client.get(found.group(1).replace("&amp;", "&"))
    assert r.status_code == 200 and r.headers["content-type"] == "image/png" and r.content[:4] == b"\x89PNG"


def test_activate_rolls_back_and_forward_what_match_serves(served):
    app, _, info, _ = served
    client, csrf = sign_in(served, ROOT)
    latest = app.state.service.registry.current()
    old = info["versions"][0]
    r = client.post(PAGE + "/activate", data={"csrf": csrf, "version": old}, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert app.state.service.registry.current() == old and served_version(client) == old
    assert f"{old} is now current" in client.get(PAGE).text
    r = client.post(PAGE + "/activate", data={"csrf": csrf, "version": latest}, follow_redirects=False)
    assert r.status_code == 303 and served_version(client) == latest


@pytest.mark.parametrize("version, status", [("", 422), ("nope", 422), ("20261122T010203Z-a1b2c3", 409),
                                             ("\x00", 422), ("20261122T010203Z-a1b2c3\n", 422)])
def test_activate_refuses_bad_versions_and_changes_nothing(served, version, status):
    app = served[0]
    client, csrf = sign_in(served, ROOT)
    before = app.state.service.registry.current()
    r = client.post(PAGE + "/activate", data={"csrf": csrf, "version": version})
    assert r.status_code == status and ("version" in r.text or "no finished build" in r.text), r.text
    assert app.state.service.registry.current() == before and served_version(client) == before


@pytest.mark.parametrize("path", [PAGE + "/new", PAGE + "/activate"])
def test_build_posts_need_the_csrf_token(served, path):
    app = served[0]
    client, _ = sign_in(served, ROOT)
    before = app.state.service.registry.versions()
    r = client.post(path, data={"version": before[0]})
    assert r.status_code == 403 and "CSRF" in r.text
    assert app.state.service.registry.versions() == before


def test_build_now_becomes_current_and_a_second_one_is_refused(served, monkeypatch):
    app = served[0]
    client, csrf = sign_in(served, ROOT)
    before = set(app.state.service.registry.versions())
    release = threading.Event()
    real = builds_module.run_build

    def held(job, state):  # keeps the first build running until the second one was asked for
        release.wait(30)
        real(job, state)

    monkeypatch.setattr(builds_module, "run_build", held)
    assert client.post(PAGE + "/new", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    running = client.get(PAGE)
    assert 'data-poll="2000"' in running.text and "is running" in running.text
    second = client.post(PAGE + "/new", data={"csrf": csrf})
    assert second.status_code == 409 and "already running" in second.text
    refused = client.post(PAGE + "/activate", data={"csrf": csrf, "version": sorted(before)[0]})
    assert refused.status_code == 409
    release.set()
    job = wait_for_build(app)
    assert job.state == "done", job.message
    new = set(app.state.service.registry.versions()) - before
    assert new == {job.version} and app.state.service.registry.current() == job.version
    assert served_version(client) == job.version
    page = client.get(PAGE)
    assert "data-poll" not in page.text and "now current and served" in page.text
    assert csrf_of(page.text) == csrf


def test_build_now_keeps_a_build_the_feedback_labels_say_is_worse(tmp_path, encoder):  # noqa: F811
    """The CLI's label gate: users' /feedback says which FAQ answers their queries; a build that ranks
    those FAQs worse (here: the refund FAQ lost the phrasings those queries matched) is built and listed,
    not made current, and /match keeps serving the current one."""
    from app.api.main import create_app
    from app.release.gate import MIN_LABELS

    settings = make_settings(tmp_path, admin_token=ROOT, keep_versions=5)
    store = make_store(settings)
    current = build(store, encoder, settings)["version"]
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        queries = [f"how do I get a refund for order {n}" for n in range(MIN_LABELS)]
        for q in queries:
            r = client.post("/match", json={"query": q})
            assert client.post("/feedback", json={"request_id": r.json()["request_id"], "faq_id": "refund"}
                               ).status_code == 200
        store.update_faq("refund", questions=["Where do payments go?"])
        _, csrf = sign_in((client.app, store, {}, client), ROOT)
        assert client.post(PAGE + "/new", data={"csrf": csrf}, follow_redirects=False).status_code == 303
        job = wait_for_build(client.app)
        assert job.state == "failed" and "not made current" in job.message, job.message
        assert any(line.startswith(f"labels ({MIN_LABELS}): top-1") for line in job.lines)
        registry = client.app.state.service.registry
        assert registry.current() == current and job.version in registry.versions()
        assert served_version(client) == current
        page = client.get(PAGE)
        assert "not made current" in page.text and f'data-version="{job.version}"' in page.text
    store.close()


def test_a_build_running_elsewhere_shows(served):
    """`faq index build` (or Build now on another replica) writes a "building" row: the page says so."""
    store = served[1]
    client, _ = sign_in(served, ROOT)
    version = "20261126T000000Z-e15e00"
    store.record_build(version=version, encoder_id="all-MiniLM-L6-v2")
    try:
        page = client.get(PAGE)
        assert page.status_code == 200 and 'id="elsewhere-1"' in page.text and version in page.text
    finally:
        store.fail_build_if_building(version, "test over")
    assert 'id="elsewhere-1"' not in client.get(PAGE).text


def test_each_builds_expected_precision_can_be_shown(served):
    app, _, info = served[:3]
    client, _ = sign_in(served, ROOT)
    current = app.state.service.registry.current()
    other = next(v for v in app.state.service.registry.versions() if v != current)
    page = client.get(PAGE)
    assert f"Expected precision of <code>{current}</code> (current)" in page.text
    assert f'href="/console/kbs/default/builds?version={other}"' in page.text
    page = client.get(f"{PAGE}?version={other}")
    assert page.status_code == 200 and f"Expected precision of <code>{other}</code></h2>" in page.text
    assert f"curve?version={other}" in page.text or 'id="no-table"' in page.text or 'id="precision"' in page.text
    assert client.get(f"{PAGE}?version=nope").status_code == 422
    assert client.get(f"{PAGE}?version=20200101T000000Z-000000").status_code == 404
