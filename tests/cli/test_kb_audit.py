"""`faq kb audit` reads a KB's audit log (a deleted KB's too); `faq db prune --audit-days N` is the only thing that
removes its rows."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import func, insert, select

from app.store.audit import audit_t, operator
from cli.main import main


@pytest.fixture
def store(faq_env):
    from migrations.runner import migrated_store

    store = migrated_store(faq_env)
    yield store
    store.close()


def test_audit_lists_newest_first_with_filters(store, tmp_path, capsys):
    kb_file = tmp_path / "kb.jsonl"
    kb_file.write_text('{"faq_id": "a", "question": "first question", "answer": "First."}\n')
    assert main(["kb", "create", "shop"]) == 0
    assert main(["kb", "import", str(kb_file), "--kb", "shop"]) == 0
    store.for_kb("shop").update_faq("a", answer="First <b>again</b>.")
    capsys.readouterr()
    assert main(["kb", "audit", "--kb", "shop", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert [e["action"] for e in entries] == ["faq.update", "kb.import", "kb.create"]
    assert {(e["actor"], e["role"], e["source"]) for e in entries} == {(operator().name, "admin", "cli")}
    assert main(["kb", "audit", "--kb", "shop", "--faq", "a"]) == 0
    out = capsys.readouterr().out
    assert "faq.update" in out and "kb.import" not in out and 'answer: "First." → "First <b>again</b>."' in out
    assert main(["kb", "audit", "--kb", "shop", "--actor", "nobody"]) == 0
    assert "no changes recorded that match" in capsys.readouterr().out
    assert main(["kb", "audit", "--kb", "shop", "--limit", "1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["entries"]) == 1
    tomorrow = (datetime.now(timezone.utc) + timedelta(days=1)).date().isoformat()
    assert main(["kb", "audit", "--kb", "shop", "--since", tomorrow, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == []


def test_a_deleted_kbs_log_stays_readable(store, capsys):
    assert main(["kb", "create", "gone"]) == 0
    assert main(["kb", "delete", "gone", "--yes"]) == 0
    capsys.readouterr()
    assert main(["kb", "audit", "--kb", "gone", "--json"]) == 0
    assert [e["action"] for e in json.loads(capsys.readouterr().out)["entries"]] == ["kb.delete", "kb.create"]
    assert main(["kb", "audit", "--kb", "never-was"]) == 2
    assert "no KB named 'never-was'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--since", "last week"], "--since 'last week' is not an ISO date"),
    (["--limit", "0"], "--limit must be from 1 to 1000"),
    (["--faq", "x" * 201], "--faq: must be at most 200 characters"),
])
def test_bad_options(store, capsys, argv, message):
    assert main(["kb", "audit", *argv]) == 2
    assert message in capsys.readouterr().err


def _count(store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(audit_t)).scalar())


def test_only_prune_with_audit_days_removes_rows(store, capsys):
    old = datetime.now(timezone.utc) - timedelta(days=400)
    with store.engine.begin() as conn:
        for kb in ("default", "deleted-long-ago"):
            conn.execute(insert(audit_t).values(kb=kb, created_at=old, actor="x", role="admin", source="cli",
                                                action="kb.settings", subject=kb))
    store.create_faq("new", "New.", ["a new question"])
    assert _count(store) == 3
    assert main(["db", "prune"]) == 0  # the query log's retention only
    assert _count(store) == 3
    assert main(["db", "prune", "--audit-days", "365", "--dry-run"]) == 0
    assert "dry run: 2 audit-log rows older than 365 days" in capsys.readouterr().out
    assert _count(store) == 3
    assert main(["db", "prune", "--audit-days", "365"]) == 0
    assert "deleted 2 audit-log rows older than 365 days" in capsys.readouterr().out
    assert _count(store) == 1
    with pytest.raises(SystemExit):
        main(["db", "prune", "--audit-days", "0"])
    assert "--audit-days must be >= 1" in capsys.readouterr().err
