"""The console's import (dry run, then apply) and export over plain HTTP.

Its own app and data folder: these tests change the KB.
"""
from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from tests.helpers.api import build, make_settings, make_store
from tests.helpers.console import sign_in

ROOT = "console-imports-token-of-32-characters"
PAGE = "/console/kbs/default/import"


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("console_imports"), admin_token=ROOT)
    store = make_store(settings)
    build(store, encoder, settings)
    from app.api.main import create_app

    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        yield app, store, {}, client


def jsonl(*rows: dict) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def dry_run(client, csrf: str, name: str, data: bytes, sync: bool = False, **extra):
    fields = {"csrf": csrf, **({"sync": "on"} if sync else {}), **extra}
    return client.post(PAGE, data=fields, files={"file": (name, data, "application/octet-stream")})


def count(html: str, field: str) -> int:
    return int(re.search(rf'id="{field}">(\d+)<', html).group(1))


def test_dry_run_shows_the_diff_then_apply_writes_it(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    before = store.revision()
    data = jsonl({"faq_id": "gift_cards", "question": "Do you sell gift cards?", "answer": "Yes, at checkout."},
                 {"faq_id": "gift_cards", "question": "Can I buy a voucher?"},
                 {"faq_id": "refund", "question": "How do I get a refund?",
                  "answer": "Refunds take five days now."})
    r = dry_run(client, csrf, "new.jsonl", data)
    assert r.status_code == 200, r.text
    assert (count(r.text, "faqs-created"), count(r.text, "faqs-updated"), count(r.text, "variants-added")) == (1, 1, 2)
    assert count(r.text, "faqs-deleted") == 0
    assert store.revision() == before and store.get_faq("gift_cards") is None, "a dry run writes nothing"
    import_id = re.search(r'name="import_id" value="([^"]+)"', r.text).group(1)
    applied = client.post(PAGE + "/apply", data={"csrf": csrf, "import_id": import_id})
    assert applied.status_code == 200 and "Imported new.jsonl: 1 FAQs created, 1 updated" in applied.text
    assert store.get_faq("gift_cards").questions == ["Do you sell gift cards?", "Can I buy a voucher?"]
    assert store.get_faq("refund").answer == "Refunds take five days now."
    r = client.post("/match", json={"query": "do you sell gift cards"})
    assert r.json()["matches"][0]["faq_id"] == "gift_cards", "/match sees the import at once"
    again = client.post(PAGE + "/apply", data={"csrf": csrf, "import_id": import_id})
    assert again.status_code == 409, "a dry run is applied once"


def test_sync_counts_deletions(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    n_faqs = store.count_faqs()
    r = dry_run(client, csrf, "one.csv", b"faq_id,question,answer,tags\nrefund,How do I get my money back?,Back.,\n",
                sync=True)
    assert r.status_code == 200, r.text
    assert count(r.text, "faqs-deleted") == n_faqs - 1
    assert store.count_faqs() == n_faqs


def test_a_file_with_bad_lines_shows_them_and_imports_nothing(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    before = store.revision()
    data = (jsonl({"faq_id": "fine", "question": "A fine question?", "answer": "Fine."}) + b"{not json\n"
            + jsonl({"faq_id": "no_answer", "question": "Where is my answer?"}) + b'"a string"\n'
            + jsonl({"faq_id": "bad\x00id", "question": "q", "answer": "a"}) + b"\xff\xfe\n")
    r = dry_run(client, csrf, "../../etc/bad.jsonl", data)
    assert r.status_code == 422, r.text
    problems = re.findall(r"<li>(bad\.jsonl:\d+: [^<]+)</li>", r.text)
    assert [p.split(":")[1] for p in problems] == ["2", "3", "4", "5", "6"], problems
    assert "invalid JSON" in problems[0]
    assert "faq-console-import" not in r.text and "upload.jsonl" not in r.text, "the server's temp path stays there"
    assert 'name="import_id"' not in r.text
    assert store.revision() == before and store.get_faq("fine") is None


@pytest.mark.parametrize("name, data, field", [
    ("kb.txt", b"x", "file"), ("", b"x", "file"), ("noext", b"x", "file"), ("dir\\", b"x", "file"),
    ("x" * 300 + ".jsonl", b"x", "file"),
])
def test_bad_upload_names_are_a_422_naming_the_field(served, name, data, field):
    client, csrf = sign_in(served, ROOT)
    r = dry_run(client, csrf, name, data)
    assert r.status_code == 422 and f'id="{field}-error"' in r.text and f"{field}:" in r.text, r.text


def test_empty_and_malformed_uploads_are_4xx(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    before = store.revision()
    assert dry_run(client, csrf, "empty.jsonl", b"").status_code == 200  # nothing to import: a no-op dry run
    assert dry_run(client, csrf, "x.csv", b"question\nwho?\n").status_code == 422
    assert dry_run(client, csrf, "x.jsonl", b"{}", sync=False, sync_bad="1").status_code == 422
    r = client.post(PAGE, data={"csrf": csrf, "sync": "maybe"}, files={"file": ("a.jsonl", b"", "text/plain")})
    assert r.status_code == 422 and "sync:" in r.text
    r = client.post(PAGE, content=b"--nope\r\n\r\n", headers={"Content-Type": "multipart/form-data; boundary=zz"})
    assert r.status_code in (400, 403)
    r = client.post(PAGE, data={"csrf": csrf})  # urlencoded: the upload form is multipart
    assert r.status_code == 415
    r = client.post(PAGE, content=b"x" * (8 * 1024 * 1024 + 1),
                    headers={"Content-Type": "multipart/form-data; boundary=zz"})
    assert r.status_code == 413 and "FAQ_MAX_UPLOAD_BYTES" in r.text, "the upload limit holds"
    r = client.post("/console/kbs/default/try", content=b"query=" + b"x" * 70_000,
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413 and "FAQ_MAX_BODY_BYTES" in r.text, "other console forms keep the body limit"
    assert store.revision() == before


def test_a_kb_file_larger_than_an_api_body_uploads(served):
    """A KB file of some hundred KiB: over FAQ_MAX_BODY_BYTES, under FAQ_MAX_UPLOAD_BYTES."""
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    rows = [{"faq_id": f"bulk-{i}", "question": f"Bulk question number {i} about our {i % 7} services?",
             "answer": "A bulk answer that is long enough to look like a real one. " * 3} for i in range(1500)]
    data = jsonl(*rows)
    assert 65536 < len(data) < 8 * 1024 * 1024
    before = store.revision()
    r = dry_run(client, csrf, "bulk.jsonl", data)
    assert r.status_code == 200, r.text[:500]
    assert "1500" in r.text and store.revision() == before  # a dry run writes nothing


def test_import_posts_need_the_csrf_token(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    data = jsonl({"faq_id": "planted", "question": "Planted?", "answer": "Planted."})
    for sent in ({}, {"csrf": "forged"}):
        r = client.post(PAGE, data=sent, files={"file": ("p.jsonl", data, "text/plain")})
        assert r.status_code == 403 and "CSRF" in r.text
    r = dry_run(client, csrf, "p.jsonl", data)
    import_id = re.search(r'name="import_id" value="([^"]+)"', r.text).group(1)
    assert client.post(PAGE + "/apply", data={"import_id": import_id}).status_code == 403
    assert client.post(PAGE + "/apply", data={"csrf": csrf, "import_id": "other"}).status_code == 409
    assert store.get_faq("planted") is None


def test_apply_refuses_a_stale_dry_run(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    r = dry_run(client, csrf, "s.jsonl", jsonl({"faq_id": "stale", "question": "Stale?", "answer": "Stale."}))
    import_id = re.search(r'name="import_id" value="([^"]+)"', r.text).group(1)
    store.create_faq("meanwhile", "Someone else's FAQ.", ["Meanwhile?"])
    r = client.post(PAGE + "/apply", data={"csrf": csrf, "import_id": import_id})
    assert r.status_code == 409 and "changed since the dry run" in r.text
    assert store.get_faq("stale") is None


def test_export_downloads_what_import_reads(served, tmp_path):
    store = served[1]
    client, _ = sign_in(served, ROOT)
    r = client.get("/console/kbs/default/export")
    assert r.status_code == 200 and 'attachment; filename="default.jsonl"' == r.headers["content-disposition"]
    from kb.files import read_kb

    path = tmp_path / "default.jsonl"
    path.write_bytes(r.content)
    records = read_kb(path)
    assert {rec.faq_id for rec in records} == {faq.faq_id for faq in store.list_faqs(0, 10_000)}
    assert client.get("/console/kbs/Bad!/export").status_code == 422


def test_the_upload_limit_is_a_setting(tmp_path, encoder):  # noqa: F811
    """FAQ_MAX_UPLOAD_BYTES set lower: the page says it, and a file over it is a 413 naming it."""
    settings = make_settings(tmp_path, admin_token=ROOT, max_upload_bytes=128 * 1024)
    store = make_store(settings)
    from app.api.main import create_app

    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        _, csrf = sign_in((None, store, {}, client), ROOT)
        assert "up to 128 KiB" in client.get(PAGE).text
        rows = [{"faq_id": f"bulk-{i}", "question": f"Bulk question {i}?", "answer": "A bulk answer. " * 10}
                for i in range(1000)]
        r = dry_run(client, csrf, "bulk.jsonl", jsonl(*rows))
        assert r.status_code == 413 and "FAQ_MAX_UPLOAD_BYTES" in r.text
        assert dry_run(client, csrf, "small.jsonl", jsonl(*rows[:50])).status_code == 200
    store.close()


def test_the_faq_fields_survive_the_dry_run_apply_and_export(served, tmp_path):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    data = jsonl({"faq_id": "vouchers", "question": "Do vouchers expire?", "answer": "Never.",
                  "metadata": {"Lang": "en"}, "source": "terms.pdf", "context_only": True,
                  "follow_ups": [{"faq_id": "refund", "text": "Refund instead?"}]})
    missing = jsonl({"faq_id": "x", "question": "q", "answer": "a", "follow_ups": [{"faq_id": "nope", "text": "t"}]})
    r = dry_run(client, csrf, "bad.jsonl", missing)  # the KB is checked at the dry run, with the file's line
    assert r.status_code == 422 and "bad.jsonl:1: follow_ups[0].faq_id &#39;nope&#39; is not an FAQ" in r.text, r.text
    r = dry_run(client, csrf, "fields.jsonl", data)
    assert r.status_code == 200, r.text
    import_id = re.search(r'name="import_id" value="([^"]+)"', r.text).group(1)
    assert client.post(PAGE + "/apply", data={"csrf": csrf, "import_id": import_id}).status_code == 200
    faq = store.get_faq("vouchers")
    assert (faq.metadata, faq.source, faq.follow_ups, faq.context_only) == (
        {"lang": "en"}, "terms.pdf", [{"faq_id": "refund", "text": "Refund instead?"}], True)
    line = next(json.loads(x) for x in client.get("/console/kbs/default/export").text.splitlines()
                if json.loads(x)["faq_id"] == "vouchers")
    assert (line["metadata"], line["source"], line["follow_ups"], line["context_only"]) == (
        {"lang": "en"}, "terms.pdf", [{"faq_id": "refund", "text": "Refund instead?"}], True)
    assert store.delete_faq("vouchers")


def test_an_azure_project_imports_with_its_synonyms_and_suggestions_and_exports_back(served, tmp_path):
    from pathlib import Path

    from kb.formats import read_any

    app, store = served[0], served[1]
    client, csrf = sign_in(served, ROOT)
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "formats" / "azure-project.json"
    r = dry_run(client, csrf, "harbour-gym.json", fixture.read_bytes())
    assert r.status_code == 200, r.text
    assert "Dry run of harbour-gym.json (azure)" in r.text
    assert (count(r.text, "faqs-created"), count(r.text, "synonyms"), count(r.text, "suggestions")) == (8, 3, 2)
    import_id = re.search(r'name="import_id" value="([^"]+)"', r.text).group(1)
    applied = client.post(PAGE + "/apply", data={"csrf": csrf, "import_id": import_id})
    assert applied.status_code == 200 and "Imported harbour-gym.json: 8 FAQs created" in applied.text
    settings = store.catalog.settings("default")
    assert settings["synonyms"][0] == ["membership", "subscription", "plan"]
    assert app.state.service.settings.default_answer.startswith("Sorry, I don't know that one yet")
    assert sorted(s.question for s in store.suggestions.all()) == ["can i put my membership on hold",
                                                                    "hold membership broken leg"]
    # the KB as an Azure project and as QnA Maker TSV, read back by the importers
    for fmt, suffix in (("azure", ".json"), ("qnamaker", ".tsv")):
        exported = client.get("/console/kbs/default/export", params={"format": fmt})
        assert exported.status_code == 200
        assert exported.headers["content-disposition"] == f'attachment; filename="default{suffix}"'
        path = tmp_path / f"export{suffix}"
        path.write_bytes(exported.content)
        back = read_any(path)
        assert {r.faq_id for r in back.records} >= {str(n) for n in range(101, 109)}
        assert ("101", "hold membership broken leg") in back.suggestions
    assert client.get("/console/kbs/default/export", params={"format": "pdf"}).status_code == 422


def test_an_unknown_kind_of_file_is_refused_by_name(served):
    client, csrf = sign_in(served, ROOT)
    r = dry_run(client, csrf, "kb.docx", b"PK...")
    assert r.status_code == 422 and "file: must be one of .jsonl, .csv, .tsv, .xlsx" in r.text
