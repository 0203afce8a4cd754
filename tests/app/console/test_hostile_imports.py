"""Hostile KB files uploaded to the console's import over HTTP: a 422 page listing `file:line: reason`,
nothing written, never a 500 (the fixed set of tests/helpers/hostile_files.py, its archive bombs and hostile
workbooks, and a short fuzz)."""
from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.helpers.api import build, make_settings, make_store
from tests.helpers.console import csrf_of, sign_in
from tests.helpers.hostile_files import HOSTILE_FILES, csv_files, jsonl_files

ROOT = "console-hostile-token-0123456789abcdef"
PAGE = "/console/kbs/default/import"


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("console_hostile"), admin_token=ROOT)
    store = make_store(settings)
    build(store, encoder, settings)
    from app.api.main import create_app

    # raise_server_exceptions (the default): a 500 fails the test with the server's traceback
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        yield None, store, {}, client


def upload(client, csrf: str, name: str, data: bytes):
    return client.post(PAGE, data={"csrf": csrf}, files={"file": (name, data, "application/octet-stream")})


@pytest.mark.parametrize("name", ["long-header.csv", "long-cell.csv", "deep.jsonl", "deeper.jsonl",
                                  "huge-int.jsonl", "open-quote.csv", "not-utf8.csv", "surrogate.jsonl"])
def test_hostile_upload_is_a_422_listing_its_line(served, name):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    before = store.revision()
    data, first = HOSTILE_FILES[name]
    r = upload(client, csrf, name, data)
    assert r.status_code == 422, r.text[:500]
    problems = [html.unescape(p) for p in re.findall(r"<li>([^<]+)</li>", r.text)]
    assert any(p.startswith(f"{name}:{first}") for p in problems), problems
    assert 'name="import_id"' not in r.text and store.revision() == before


def _archive(name: str) -> bytes:
    from tests.helpers import hostile_files as h

    made = {"bomb.zip": h.newline_zip, "bomb-in-a-workbook.zip": lambda: h.zip_of({"kb.xlsx": h.xml_bomb_workbook(20)}),
            "bomb.xlsx": lambda: h.xml_bomb_workbook(80),
            "laughs.xlsx": lambda: h.workbook_with(h.SHEET, h.billion_laughs()),
            "broken.xlsx": lambda: h.workbook_with(h.SHEET, h.broken_sheet()),
            "deep.tsv": lambda: h.deep_cell_tsv("SuggestedQuestions"), "deep.yml": h.deep_rasa_yaml}[name]()
    return made.encode() if isinstance(made, str) else made


@pytest.mark.parametrize("name,reason", [
    ("bomb.zip", "bomb.zip/QnAs.tsv: unpacks to 1,020 times its compressed size"),
    ("bomb-in-a-workbook.zip", "bomb-in-a-workbook.zip/kb.xlsx/xl/worksheets/sheet1.xml: unpacks to 680 times"),
    ("bomb.xlsx", "bomb.xlsx: unpacks to 83,9"),
    ("laughs.xlsx", "laughs.xlsx/xl/worksheets/sheet1.xml:2: declares a DTD (entity definitions)"),
    ("broken.xlsx", "broken.xlsx/xl/worksheets/sheet1.xml:2: invalid XML: mismatched tag"),
    ("deep.tsv", "deep.tsv:2: SuggestedQuestions is not valid JSON: nested too deeply"),
    ("deep.yml", "deep.yml:8: invalid YAML: nested deeper than 100 levels")])
def test_an_archive_bomb_or_a_hostile_workbook_is_a_422_naming_the_limit(served, name, reason):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    before = store.revision()
    data = _archive(name)
    assert len(data) < 1024 * 1024  # what the console takes is a few KB, not what it would unpack to
    r = upload(client, csrf, name, data)
    assert r.status_code == 422, r.text[:500]
    problems = [html.unescape(p) for p in re.findall(r"<li>([^<]+)</li>", r.text)]
    assert any(p.startswith(reason) for p in problems), problems
    assert 'name="import_id"' not in r.text and store.revision() == before


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(named=st.tuples(st.just("fuzz.jsonl"), jsonl_files) | st.tuples(st.just("fuzz.csv"), csv_files))
def test_fuzz_upload_never_500(served, named):
    store = served[1]
    client = served[3]
    page = client.get(PAGE)
    # signing in once per example would dominate the run: only when no test signed in before
    csrf = csrf_of(page.text) if page.status_code == 200 else sign_in(served, ROOT)[1]
    before = store.revision()
    r = upload(client, csrf, *named)
    assert r.status_code in (200, 422), (named, r.status_code, r.text[:500])
    assert store.revision() == before, "a dry run writes nothing"
