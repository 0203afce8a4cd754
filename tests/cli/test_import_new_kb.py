"""`faq kb import FILE --kb NEW` creates KB NEW only when the import succeeds: a file with bad lines, one that
cannot be read, hostile bytes, follow-ups naming FAQs that exist nowhere, or a failure inside the store all
exit without leaving an empty KB behind."""
from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings as hyp_settings, strategies as st

from cli.main import main
from tests.helpers.hostile_files import csv_files, jsonl_files

FUZZ = hyp_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_names = (f"new-{i}" for i in itertools.count())  # a KB of its own for each example


def _kbs(settings) -> list[str]:
    from app.store import FaqStore

    with FaqStore(settings.db_url) as store:
        return store.catalog.names()


def _import(capsys, path, kb: str, *extra: str) -> tuple[int, str]:
    code = main(["kb", "import", str(path), "--kb", kb, *extra])
    return code, capsys.readouterr().err


@pytest.fixture
def migrated(faq_env, capsys):
    """The database migrated once (its `default` KB), so each example only imports."""
    assert main(["db", "upgrade"]) == 0
    capsys.readouterr()
    return faq_env


@FUZZ
@given(data=st.one_of(jsonl_files.map(lambda b: ("x.jsonl", b)), csv_files.map(lambda b: ("x.csv", b))))
def test_a_hostile_file_into_a_new_kb_creates_nothing(migrated, tmp_path, capsys, data):
    suffix, content = data
    path = tmp_path / suffix
    path.write_bytes(content)
    kb = next(_names)
    code, err = _import(capsys, path, kb)
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 2:
        assert kb not in _kbs(migrated), err


_ids = st.text("abcdefghij-", min_size=1, max_size=8).filter(lambda s: s[0] != "-")


@FUZZ
@given(ids=st.lists(_ids, min_size=1, max_size=4, unique=True), missing=_ids, at=st.integers(0, 3))
def test_follow_ups_to_faqs_that_exist_nowhere_create_no_kb(migrated, tmp_path, capsys, ids, missing, at):
    # lines that each read fine, which only the KB-wide check finds wrong: not caught before a KB is made
    if missing in ids:
        missing += "-gone"
    rows = [{"faq_id": f, "question": f"question about {f}?", "answer": f"Answer {f}."} for f in ids]
    rows[at % len(rows)]["follow_ups"] = [{"faq_id": missing, "text": "And then?"}]
    path = tmp_path / "follow.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    kb = next(_names)
    code, err = _import(capsys, path, kb)
    assert code == 2 and f"follow_ups[0].faq_id '{missing}' is not an FAQ of this file or KB" in err, err
    assert err.rstrip().endswith("nothing was imported")
    assert kb not in _kbs(migrated)
    # the same file as a dry run says the same and creates nothing either
    code, err = _import(capsys, path, kb, "--dry-run")
    assert code == 2 and "is not an FAQ of this file or KB" in err and kb not in _kbs(migrated)


def test_files_that_cannot_be_read_create_no_kb(migrated, tmp_path, capsys):
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    bad_lines = tmp_path / "bad.jsonl"
    bad_lines.write_text('{"faq_id": "a", "question": "q?", "answer": "A."}\nnot json\n{"faq_id": 3}\n')
    for path in (folder, tmp_path / "absent.jsonl", bad_lines):
        code, err = _import(capsys, path, "unread")
        assert code == 2 and "Traceback" not in err, err
    assert _kbs(migrated) == ["default"]


@pytest.mark.parametrize("failure", [RuntimeError("the database went away"), KeyboardInterrupt()])
def test_a_store_failure_during_the_import_removes_the_kb_it_created(migrated, tmp_path, capsys, monkeypatch,
                                                                     failure):
    from app.store import FaqStore

    def fail(self, *args, **kwargs):
        raise failure

    monkeypatch.setattr(FaqStore, "import_records", fail)
    path = tmp_path / "ok.jsonl"
    path.write_text('{"faq_id": "a", "question": "q?", "answer": "A."}\n', encoding="utf-8")
    if isinstance(failure, KeyboardInterrupt):  # cli/main.py turns Ctrl-C into exit 130
        assert main(["kb", "import", str(path), "--kb", "broken"]) == 130
    else:
        with pytest.raises(type(failure)):
            main(["kb", "import", str(path), "--kb", "broken"])
    assert _kbs(migrated) == ["default"]
    monkeypatch.undo()
    code, err = _import(capsys, path, "broken")
    assert code == 0 and _kbs(migrated) == ["broken", "default"]
