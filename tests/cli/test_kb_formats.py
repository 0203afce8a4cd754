"""`faq kb import --format` and `faq kb export --format qnamaker|azure` through the CLI: each format detected and
imported, what the file keeps beside its FAQs (synonyms, default answer, suggested phrasings) stored, a bad file
refused whole, and import -> export -> import leaving the KB unchanged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _store(settings, kb):
    from app.store import FaqStore

    return FaqStore(settings.db_url, kb=kb)


def _kb(settings, kb):
    store = _store(settings, kb)
    records = list(store.export_records())
    return records, store.catalog.settings(kb), sorted((s.faq_id, s.question) for s in store.suggestions.all())


@pytest.mark.parametrize("path,fmt,faqs", [
    ("qnamaker-export.tsv", "qnamaker", 12), ("azure-project.json", "azure", 8),
    ("qnabot-export.json", "qnabot", None), ("rasa", "rasa", None), ("rasa-single.yml", "rasa", None),
    ("dialogflow-faq.csv", "dialogflow", None), ("faqpage-jsonld.html", "faqpage", None),
    ("faqpage-microdata.html", "faqpage", None)])
def test_every_format_imports_by_detection_and_again_changes_nothing(faq_env, capsys, path, fmt, faqs):
    code, out, err = run(capsys, "kb", "import", str(FIXTURES / path), "--kb", "moved", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["format"] == fmt and report["faqs_created"] > 0
    if faqs is not None:
        assert report["faqs_created"] == faqs
    code, out, _ = run(capsys, "kb", "import", str(FIXTURES / path), "--kb", "moved", "--format", fmt, "--json")
    again = json.loads(out)
    assert code == 0 and again["faqs_created"] == again["faqs_updated"] == again["variants_added"] == 0
    assert again["suggestions_added"] == 0 and again["synonyms_added"] == 0


def test_an_azure_project_brings_its_synonyms_default_answer_and_suggestions(faq_env, capsys):
    code, out, _ = run(capsys, "kb", "import", str(FIXTURES / "azure-project.json"), "--kb", "gym")
    assert code == 0
    assert "(azure) into KB 'gym': 17 rows, 8 FAQs" in out
    assert "Synonyms:  3 new groups (3 in the KB)" in out
    assert "Suggested phrasings: 2 new in the review queue (of 2 in the file; never added as phrasings)" in out
    records, settings, suggestions = _kb(faq_env, "gym")
    assert settings["synonyms"][1] == ["freeze", "pause", "put on hold"]
    assert settings["default_answer"].startswith("Sorry, I don't know that one yet")
    assert suggestions == [("101", "can i put my membership on hold"), ("101", "hold membership broken leg")]
    assert "can i put my membership on hold" not in {r.question for r in records}
    # the review queue proposes them; accepting one makes it a phrasing and it leaves the queue
    from app.curation.review import accept_phrasing, queues

    store = _store(faq_env, "gym")
    proposed = [p for p in queues(store)["phrasings"] if p["evidence"] == {"imported": 1}]
    assert [p["question"] for p in proposed] == ["can i put my membership on hold", "hold membership broken leg"]
    accepted = accept_phrasing(store, proposed[0]["review_key"])
    assert accepted.added == 1
    assert [p["question"] for p in queues(store)["phrasings"]] == ["hold membership broken leg"]


def test_a_dry_run_writes_nothing_and_a_bad_file_imports_nothing(faq_env, tmp_path, capsys):
    code, out, _ = run(capsys, "kb", "import", str(FIXTURES / "azure-project.json"), "--kb", "gym", "--dry-run")
    assert code == 0 and "KB 'gym' does not exist: the import would create it." in out
    code, out, _ = run(capsys, "kb", "list", "--json")
    assert "gym" not in out
    bad = tmp_path / "bad.tsv"
    rows = (FIXTURES / "qnamaker-export.tsv").read_text(encoding="utf-8").splitlines()
    rows[5] = rows[5].replace("\t12\n", "\t12").rsplit("\t", 1)[0] + "\tseven"
    bad.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, _, err = run(capsys, "kb", "import", str(bad), "--kb", "bikes")
    assert code == 2
    assert f"{bad}:6: QnaId must be a positive integer, got 'seven'" in err and "nothing was imported" in err
    code, out, _ = run(capsys, "kb", "list", "--json")
    assert "bikes" not in out


def test_synonyms_a_kb_cannot_keep_are_refused_before_anything_is_written(faq_env, tmp_path, capsys):
    doc = json.loads((FIXTURES / "azure-project.json").read_text(encoding="utf-8"))
    doc["assets"]["synonyms"] = [{"alterations": ["a" * 101, "b"]}]
    path = tmp_path / "project.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, _, err = run(capsys, "kb", "import", str(path), "--kb", "gym")
    assert code == 2 and "synonyms: Value error, synonyms: group 0: every term is 1-100 characters" in err
    assert "gym" not in run(capsys, "kb", "list", "--json")[1]


@pytest.mark.parametrize("fmt,suffix", [("qnamaker", "tsv"), ("qnamaker", "xlsx"), ("qnamaker", "json"),
                                        ("azure", "json"), ("azure", "tsv"), ("azure", "xlsx")])
@pytest.mark.parametrize("source", ["qnamaker-export.tsv", "azure-project.json"])
def test_export_then_import_reproduces_the_kb(faq_env, tmp_path, capsys, fmt, suffix, source):
    assert run(capsys, "kb", "import", str(FIXTURES / source), "--kb", "first")[0] == 0
    out = tmp_path / f"export.{suffix}"
    code, text, _ = run(capsys, "kb", "export", str(out), "--kb", "first", "--format", fmt)
    assert code == 0 and f"to {out} as {fmt}" in text
    assert run(capsys, "kb", "import", str(out), "--kb", "second", "--format", fmt)[0] == 0
    first, second = _kb(faq_env, "first"), _kb(faq_env, "second")
    strip = [(r.faq_id, r.question, r.answer, r.tags, r.metadata, r.source, r.follow_ups, r.context_only)
             for r in first[0]]
    assert [(r.faq_id, r.question, r.answer, r.tags, r.metadata, r.source, r.follow_ups, r.context_only)
            for r in second[0]] == strip
    assert second[2] == first[2]  # pending suggestions written back
    if (fmt, suffix) == ("azure", "json"):
        assert second[1] == first[1]  # synonyms and default answer
    # and importing the export into the KB it came from changes nothing
    code, text, _ = run(capsys, "kb", "import", str(out), "--kb", "first", "--format", fmt, "--json")
    report = json.loads(text)
    assert report["faqs_updated"] == report["faqs_created"] == report["variants_added"] == 0


def test_a_kb_of_our_own_ids_exports_with_stable_qna_ids(faq_env, tmp_path, capsys):
    from tests.helpers.kb import write_kb_jsonl

    src = write_kb_jsonl(tmp_path / "kb.jsonl", {"reset": ["How do I reset my password?"], "hours": ["When open?"]})
    assert run(capsys, "kb", "import", str(src), "--kb", "own")[0] == 0
    for path in (tmp_path / "a.json", tmp_path / "b.json"):
        assert run(capsys, "kb", "export", str(path), "--kb", "own")[0] == 0  # .json: azure by default
    a = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    assert a == json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))
    assert sorted(q["questions"][0] for q in a["assets"]["qnas"]) == ["How do I reset my password?", "When open?"]
    assert all(isinstance(q["id"], int) and q["id"] > 0 for q in a["assets"]["qnas"])


def _hostile(name: str) -> bytes | str:
    from tests.helpers import hostile_files as h

    return {"bomb.zip": h.newline_zip, "many.zip": lambda: h.many_members_zip(1_001),
            "laughs.xlsx": lambda: h.workbook_with(h.SHEET, h.billion_laughs()),
            "external.xlsx": lambda: h.workbook_with(h.SHEET, h.external_entity()),
            "broken.xlsx": lambda: h.workbook_with(h.SHEET, h.broken_sheet()),
            "deep.tsv": lambda: h.deep_cell_tsv("Prompts"), "deep.yml": h.deep_rasa_yaml}[name]()


@pytest.mark.parametrize("name,reason", [
    ("bomb.zip", "bomb.zip/QnAs.tsv: unpacks to 1,020 times its compressed size (8,388,687 bytes), more than the "
                 "100 times of any real KB file"),
    ("many.zip", "many.zip: 1,001 entries in the archive, more than the 1,000 an import opens"),
    ("laughs.xlsx", "laughs.xlsx/xl/worksheets/sheet1.xml:2: declares a DTD (entity definitions), which no workbook "
                    "has: refused unread"),
    ("external.xlsx", "external.xlsx/xl/worksheets/sheet1.xml:2: declares a DTD"),
    ("broken.xlsx", "broken.xlsx/xl/worksheets/sheet1.xml:2: invalid XML: mismatched tag"),
    ("deep.tsv", "deep.tsv:2: Prompts is not valid JSON: nested too deeply"),
    ("deep.yml", "deep.yml:8: invalid YAML: nested deeper than 100 levels of lists and mappings")])
def test_a_hostile_file_exits_2_naming_its_limit_and_creates_no_kb(faq_env, tmp_path, capsys, name, reason):
    data = _hostile(name)
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    code, _, err = run(capsys, "kb", "import", str(path), "--kb", "probe")
    assert code == 2, err
    assert f"{tmp_path}/{reason}" in err and "nothing was imported" in err and "Traceback" not in err
    assert "probe" not in run(capsys, "kb", "list", "--json")[1]
