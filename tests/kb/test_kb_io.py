"""KB/query file formats (kb/files.py) and the `faq kb` commands, run in-process."""
from __future__ import annotations

import io
import json

import pytest

from cli.main import main
from kb.records import KbFormatError, KbRecord, QueryRecord
from kb.files import read_kb, read_queries, write_kb
from app.store import FaqStore

ROWS = [
    {"faq_id": "reset", "question": "How do I reset my password?", "answer": "Use the reset link.", "tags": ["account"]},
    {"faq_id": "reset", "question": "I forgot my password"},
    {"faq_id": "refund", "question": "Can I get a refund?", "answer": "Within 30 days.", "tags": ["billing", "orders"]},
    {"faq_id": "refund", "question": "Money back?", "answer": "Within 30 days."},  # repeating the answer is fine
]


def write_jsonl(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------- reading and writing files

def test_read_jsonl(tmp_path):
    records = read_kb(write_jsonl(tmp_path / "kb.jsonl", ROWS + ["", "   "]))  # blank lines are skipped
    assert records[0] == KbRecord("reset", "How do I reset my password?", "Use the reset link.", ["account"])
    assert records[1] == KbRecord("reset", "I forgot my password", None, None)
    assert len(records) == 4


def test_read_csv_with_quoting_and_multiline_answers(tmp_path):
    path = tmp_path / "kb.csv"
    path.write_text(
        "\ufefffaq_id,question,answer,tags\n"
        'reset,"How do I reset my password?","Use the link.\nThen log in, again.",account; security\n'
        "reset,I forgot my password,,\n"
        "\n"
        'refund,"Can I get a ""refund""?",Within 30 days.,\n',
        encoding="utf-8",
    )
    records = read_kb(path)
    assert records == [
        KbRecord("reset", "How do I reset my password?", "Use the link.\nThen log in, again.", ["account", "security"]),
        KbRecord("reset", "I forgot my password", None, None),
        KbRecord("refund", 'Can I get a "refund"?', "Within 30 days.", None),
    ]


def test_every_problem_is_reported_with_its_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [
        ROWS[0],
        '{"faq_id": "x", "question": ',                                   # 2 invalid JSON
        '["not", "an", "object"]',                                        # 3
        {"faq_id": "", "question": "q", "answer": "a"},                   # 4 empty faq_id
        {"faq_id": "y", "answer": "a"},                                   # 5 missing question
        {"faq_id": 7, "question": "q", "answer": "a"},                    # 6 non-string faq_id
        {"faq_id": "z", "question": "q", "answer": "a", "tags": "billing"},  # 7 tags not a list
        {"faq_id": "z", "question": "q2", "tags": ["ok", 3]},             # 8 tag not a string
        {"faq_id": "reset", "question": "x" * 1001},                      # 9 question too long
        {"faq_id": "long", "question": "q", "answer": "a" * 20001},       # 10 answer too long
        {"faq_id": "reset", "question": "Other", "answer": "Different"},  # 11 conflicting answer
        {"faq_id": "lonely", "question": "Is there an answer?"},          # 12 no answer anywhere
        {"faq_id": "reset", "question": "Again", "tags": ["other"]},      # 13 conflicting tags
    ])
    with pytest.raises(KbFormatError) as info:
        read_kb(path)
    assert info.value.errors == [
        f"{path}:2: invalid JSON: Expecting value (column 29)",
        f"{path}:3: expected a JSON object, got a list",
        f"{path}:4: faq_id is empty",
        f"{path}:5: missing question",
        f"{path}:6: faq_id must be a string, got a number",
        f"{path}:7: tags must be a list of strings, got a string",
        f"{path}:8: tags[1] must be a string, got a number",
        f"{path}:9: question is longer than 1000 characters (1001)",
        f"{path}:10: answer is longer than 20000 characters (20001)",
        f"{path}:11: conflicting answer for faq_id 'reset' (differs from the one at {path}:1)",
        f"{path}:12: faq_id 'lonely' has no answer on any row (give it on at least one of its rows)",
        f"{path}:13: conflicting tags for faq_id 'reset' (differ from the ones at {path}:1)",
    ]
    assert str(info.value).startswith(f"12 invalid entries in {path}:\n  {path}:2: invalid JSON")


def test_error_printout_is_capped(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", ["{oops"] * 120)
    with pytest.raises(KbFormatError) as info:
        read_kb(path)
    assert len(info.value.errors) == 120
    message = str(info.value)
    assert message.count("invalid JSON") == 50 and message.endswith("... and 70 more")


def test_csv_structure_errors(tmp_path):
    no_question = tmp_path / "a.csv"
    no_question.write_text("faq_id,answer\nx,y\n", encoding="utf-8")
    with pytest.raises(KbFormatError, match=r"a.csv:1: header lacks column\(s\) question"):
        read_kb(no_question)
    extra = tmp_path / "b.csv"
    extra.write_text('faq_id,question,answer\nx,"multi\nline",a\ny,q,a,EXTRA\n', encoding="utf-8")
    with pytest.raises(KbFormatError) as info:
        read_kb(extra)
    assert info.value.errors == [f"{extra}:4: 4 fields but the header has 3"]
    with pytest.raises(KbFormatError, match="unknown file type '.txt'"):
        read_kb(tmp_path / "kb.txt")
    with pytest.raises(FileNotFoundError):
        read_kb(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("name", ["kb.jsonl", "kb.csv"])
def test_write_read_round_trip(tmp_path, name):
    records = [
        KbRecord("a,b", 'Quote " and comma, too?', 'Line one\nline "two", done', ["x", "y z"]),
        KbRecord("a,b", "Ünïcödé — 你好?", 'Line one\nline "two", done', ["x", "y z"]),
        KbRecord("c", "Plain?", "Plain.", []),
    ]
    assert write_kb(tmp_path / name, records) == (2, 3)
    back = read_kb(tmp_path / name)
    # answer/tags only on each FAQ's first line; CSV cannot tell [] from "not given"
    assert [(r.faq_id, r.question) for r in back] == [(r.faq_id, r.question) for r in records]
    assert back[0] == records[0] and back[1].answer is None
    assert back[2].answer == "Plain." and (back[2].tags or []) == []


def test_read_queries(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"query": "how to pay", "faq_id": "pay"}, {"query": "weather?", "faq_id": None}])
    assert read_queries(path) == [QueryRecord("how to pay", "pay"), QueryRecord("weather?", None)]
    csv_path = tmp_path / "q.csv"
    csv_path.write_text("query,faq_id\nhow to pay,pay\nweather?,\n", encoding="utf-8")
    assert read_queries(csv_path) == read_queries(path)
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"faq_id": "x"}, {"query": 3}])
    with pytest.raises(KbFormatError) as info:
        read_queries(bad)
    assert info.value.errors == [f"{bad}:1: missing query", f"{bad}:2: query must be a string, got a number"]


# ---------------------------------------------------------------- faq kb (CLI)

def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_import_is_idempotent(faq_env, tmp_path, capsys):
    kb = write_jsonl(tmp_path / "kb.jsonl", ROWS)
    code, out, _ = run_cli(capsys, "kb", "import", kb)
    assert code == 0
    assert out.splitlines() == [
        f"Imported {kb}: 4 rows, 2 FAQs",
        "  FAQs:      2 created, 0 updated, 0 unchanged",
        "  Variants:  4 added, 0 removed, 0 unchanged",
        "KB revision 0 -> 1.",
    ]
    code, out, _ = run_cli(capsys, "kb", "import", kb, "--json")
    report = json.loads(out)
    assert code == 0 and report["changes"] == 0 and report["faqs_unchanged"] == 2 and report["revision"] == 1
    assert faq_env.data_dir.is_dir() and (tmp_path / "faq.db").exists()  # from_settings made data_dir


def test_cli_import_rejects_bad_file_and_imports_nothing(faq_env, tmp_path, capsys):
    kb = write_jsonl(tmp_path / "kb.jsonl", ROWS + ["not json", {"faq_id": "q", "question": "no answer"}])
    code, out, err = run_cli(capsys, "kb", "import", kb)
    assert code == 2 and out == ""
    assert f"{kb}:5: invalid JSON" in err and f"{kb}:6: faq_id 'q' has no answer on any row" in err
    assert err.rstrip().endswith("nothing was imported")
    from migrations.runner import migrated_store

    with migrated_store(faq_env) as store:
        assert store.count_faqs() == 0 and store.revision() == 0
    code, _, err = run_cli(capsys, "kb", "import", str(tmp_path / "missing.csv"))
    assert code == 2 and "cannot read" in err


def test_cli_sync_dry_run_and_stdin(faq_env, tmp_path, capsys, monkeypatch):
    run_cli(capsys, "kb", "import", write_jsonl(tmp_path / "kb.jsonl", ROWS))
    only_reset = write_jsonl(tmp_path / "reset.jsonl", ROWS[:1])
    code, out, _ = run_cli(capsys, "kb", "import", only_reset, "--sync", "--dry-run")
    assert code == 0
    assert "  FAQs:      0 created, 1 updated, 0 unchanged, 1 deleted" in out
    assert "  Variants:  0 added, 3 removed, 1 unchanged" in out
    assert "Dry run: nothing was written (KB revision stays 1)." in out
    with FaqStore(faq_env.db_url) as store:
        assert store.count_faqs() == 2

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(ROWS[0]).encode() + b"\n")))
    code, out, _ = run_cli(capsys, "kb", "import", "-", "--sync")
    assert code == 0 and out.startswith("Imported <stdin> (--sync): 1 row, 1 FAQ")
    with FaqStore(faq_env.db_url) as store:
        assert [f.faq_id for f in store.list_faqs()] == ["reset"] and store.revision() == 2


@pytest.mark.parametrize("name", ["export.jsonl", "export.csv"])
def test_cli_export_round_trip(faq_env, tmp_path, capsys, name):
    run_cli(capsys, "kb", "import", write_jsonl(tmp_path / "kb.jsonl", ROWS))
    export = tmp_path / name
    code, out, _ = run_cli(capsys, "kb", "export", str(export))
    assert code == 0 and out.strip() == f"Exported 2 FAQs (4 question variants) to {export}"
    code, out, _ = run_cli(capsys, "kb", "import", str(export), "--sync", "--json")
    assert code == 0 and json.loads(out)["changes"] == 0
    # and into an empty database it reproduces the same KB
    with FaqStore(faq_env.db_url) as store:
        original = store.snapshot()
    copy_url = f"sqlite:///{tmp_path / 'copy.db'}"
    from migrations import runner

    runner.upgrade(copy_url)
    with FaqStore(copy_url) as copy:
        copy.import_records(read_kb(export))
        assert copy.snapshot().faqs == original.faqs
        assert [v.question for v in copy.snapshot().variants] == [v.question for v in original.variants]


def test_cli_stats(faq_env, tmp_path, capsys):
    run_cli(capsys, "kb", "import", write_jsonl(tmp_path / "kb.jsonl", ROWS))
    code, out, _ = run_cli(capsys, "kb", "stats")
    assert code == 0
    assert "FAQs:               2" in out
    assert "Question variants:  4 (per FAQ: min 2, median 2, max 2)" in out
    assert "Tags:               3 distinct" in out and "Last index build:   none" in out
    code, out, _ = run_cli(capsys, "kb", "stats", "--json")
    stats = json.loads(out)
    assert code == 0 and stats["faqs"] == 2 and stats["variants"] == 4 and stats["revision"] == 1
