"""The store on its own, on SQLite and PostgreSQL: text no database can hold (NUL, lone surrogates) is
refused by KB writes and KB files alike and found nowhere by lookups; a bad query-log row never costs
the other rows of its batch; feedback is written once per request (atomically) and checked against
the request's session."""
from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import text

from app.store import FeedbackAlreadyRecorded, FeedbackSessionMismatch
from kb.records import KbFormatError, KbRecord, KbValidationError, check_record, text_problem
from kb.files import read_kb, write_kb
from tests.helpers.store import KB

NUL, SURROGATE = "\x00", "\ud800"
NUL_MSG = "must not contain NUL characters"
SURROGATE_MSG = "must be valid Unicode text (it contains an unpaired surrogate)"


def logged(store) -> list[tuple]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT request_id, query FROM query_log ORDER BY id"))]


# ---------------------------------------------------------------- the text rule

def test_text_problem():
    assert text_problem("fine, naïve, 日本, 😀") is None
    assert text_problem("a\x00b") == NUL_MSG
    assert text_problem("a\ud800b") == text_problem("\udfff") == SURROGATE_MSG
    # the import fast path (rows without tags) applies the same rule
    assert check_record("id", "q", "a\x00", None) == (None, [f"answer {NUL_MSG}"])
    assert check_record("id\ud800", "q", None, None) == (None, [f"faq_id {SURROGATE_MSG}"])
    assert check_record("id", "q", "a", ["ok", "t\x00"]) == (None, [f"tags[1] {NUL_MSG}"])


def test_kb_files_report_unstorable_text(tmp_path):
    jsonl = tmp_path / "kb.jsonl"
    jsonl.write_text("\n".join([
        json.dumps({"faq_id": "a", "question": "fine", "answer": "x"}),
        json.dumps({"faq_id": "a", "question": "nul \u0000 here"}),
        json.dumps({"faq_id": "b", "question": "q", "answer": "lone \ud800", "tags": ["t"]}),
        json.dumps({"faq_id": "c", "question": "q", "answer": "x", "tags": ["\udc00"]}),
    ]) + "\n")
    with pytest.raises(KbFormatError) as info:
        read_kb(jsonl)
    assert info.value.errors == [f"{jsonl}:2: question {NUL_MSG}", f"{jsonl}:3: answer {SURROGATE_MSG}",
                                 f"{jsonl}:4: tags[0] {SURROGATE_MSG}"]
    csv_file = tmp_path / "kb.csv"
    csv_file.write_text("faq_id,question,answer,tags\na,fine,x,\nb,q,nul \x00 here,\n")
    with pytest.raises(KbFormatError) as info:
        read_kb(csv_file)
    assert info.value.errors == [f"{csv_file}:3: answer {NUL_MSG}"]


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_kb_writes_refuse_unstorable_text_and_export_still_works(any_store, tmp_path, bad):  # noqa: F811
    any_store.import_records(KB)
    revision = any_store.revision()
    with pytest.raises(KbValidationError) as info:
        any_store.import_records([KbRecord("new", f"q{bad}", "a"), KbRecord("n2", "q", "a", ["ok", bad])])
    assert [e.split(": ", 1)[0] for e in info.value.errors] == ["record 1", "record 2"]
    with pytest.raises(KbValidationError):
        any_store.create_faq("x", "answer", ["q"], tags=[f"t{bad}"])
    with pytest.raises(KbValidationError):
        any_store.create_faq(f"x{bad}", "answer", ["q"])
    with pytest.raises(KbValidationError):
        any_store.update_faq("reset", questions=["fine", f"bad {bad}"])
    with pytest.raises(KbValidationError):
        any_store.update_faq("reset", answer=bad)
    assert any_store.revision() == revision
    # lookups by a key no stored text can equal find nothing (PostgreSQL would refuse the statement)
    assert any_store.get_faq(f"reset{bad}") is None and not any_store.faq_exists(bad)
    assert any_store.delete_faq(bad) is False
    assert any_store.list_faqs(q=bad) == [] and any_store.count_faqs(q=f"reset{bad}") == 0
    assert any_store.record_feedback(f"r{bad}", True, None) is False
    assert any_store.revision() == revision
    for name in ("kb.jsonl", "kb.csv"):
        assert write_kb(tmp_path / name, any_store.export_records()) == (3, 5)


# ---------------------------------------------------------------- query log

def test_one_bad_row_never_costs_the_batch(any_store, caplog):  # noqa: F811
    rows = [{"request_id": f"r{i}", "query": f"query {i}", "session_id": "s"} for i in range(20)]
    rows[3]["query"] = "nul \x00 query"
    rows[7]["session_id"] = "lone \ud800"
    rows[11]["index_version"] = "\x00"
    assert any_store.log_queries(rows) == 3
    kept = [r["request_id"] for i, r in enumerate(rows) if i not in (3, 7, 11)]
    assert [rid for rid, _ in logged(any_store)] == kept
    assert any_store.log_rows_dropped == 3
    assert "dropped 3 row(s)" in caplog.text and "'r3' (query)" in caplog.text


def test_a_batch_the_database_refuses_is_retried_row_by_row(any_store):  # noqa: F811
    any_store.log_queries([{"request_id": "dup", "query": "first"}])
    # the duplicate request_id fails the one-statement insert; only that row is lost
    batch = [{"request_id": "a", "query": "q a"}, {"request_id": "dup", "query": "again"},
             {"request_id": "b", "query": "q b"}, {"request_id": "c", "query": "bad \x00"}]
    assert any_store.log_queries(batch) == 2
    assert logged(any_store) == [("dup", "first"), ("a", "q a"), ("b", "q b")]
    assert any_store.log_queries([]) == 0
    with pytest.raises(ValueError, match="unknown field"):
        any_store.log_queries([{"request_id": "x", "query": "q", "bogus": 1}])


# ---------------------------------------------------------------- feedback

def feedback_row(store, request_id: str) -> tuple:
    with store.engine.connect() as conn:
        return tuple(conn.execute(text("SELECT feedback_correct, feedback_faq_id FROM query_log WHERE request_id = :r"),
                                  {"r": request_id}).one())


def test_feedback_is_written_once(any_store):  # noqa: F811
    any_store.log_queries([{"request_id": "r1", "query": "q"}, {"request_id": "r2", "query": "q"}])
    assert any_store.record_feedback("r1", None, "reset") is True
    with pytest.raises(FeedbackAlreadyRecorded, match="feedback for request r1 was already recorded"):
        any_store.record_feedback("r1", True, None)
    with pytest.raises(FeedbackAlreadyRecorded):
        any_store.record_feedback("r1", None, "other")
    assert feedback_row(any_store, "r1") == (None, "reset")
    assert any_store.record_feedback("r2", False, None) is True
    with pytest.raises(FeedbackAlreadyRecorded):
        any_store.record_feedback("r2", False, None)
    assert any_store.record_feedback("nope", True, None) is False


def test_feedback_session_check(any_store):  # noqa: F811
    any_store.log_queries([{"request_id": "s", "query": "q", "session_id": "alice"},
                           {"request_id": "n", "query": "q"}, {"request_id": "s2", "query": "q", "session_id": "bob"}])
    with pytest.raises(FeedbackSessionMismatch, match="session_id does not match"):
        any_store.record_feedback("s", True, None, session_id="mallory")
    with pytest.raises(FeedbackSessionMismatch, match="give its session_id"):
        any_store.record_feedback("s", True, None, require_session=True)
    assert feedback_row(any_store, "s") == (None, None)
    assert any_store.record_feedback("s", True, None, session_id="alice", require_session=True) is True
    # a wrong session is told so, not whether feedback exists
    with pytest.raises(FeedbackSessionMismatch):
        any_store.record_feedback("s", True, None, session_id="mallory")
    # logged without a session: any (or no) session_id is accepted
    assert any_store.record_feedback("n", True, None, session_id="whoever", require_session=True) is True
    # without the requirement, leaving the session_id out is allowed
    assert any_store.record_feedback("s2", False, None) is True


def test_concurrent_feedback_has_exactly_one_winner(any_store):  # noqa: F811
    n = 6
    any_store.log_queries([{"request_id": "race", "query": "q"}])
    barrier = threading.Barrier(n)
    outcomes: list[str] = []

    def post(i: int) -> None:
        barrier.wait()
        try:
            outcomes.append("won" if any_store.record_feedback("race", i % 2 == 0, f"faq{i}") else "missing")
        except FeedbackAlreadyRecorded:
            outcomes.append("refused")

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["refused"] * (n - 1) + ["won"]
    correct, faq_id = feedback_row(any_store, "race")
    assert correct == (int(faq_id.removeprefix("faq")) % 2 == 0), "one writer's values, not a mix"
