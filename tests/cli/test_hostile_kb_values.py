"""Values that once broke a KB for its CLI: FAQ ids of non-ASCII digits ("²", "①") export to QnA Maker and
Azure, and small-talk answers that are not storable text are refused by `faq kb settings`, naming the answer,
with nothing stored."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from kb.formats.base import qna_ids
from tests.helpers.kb import run_cli

def test_a_kb_of_non_ascii_digit_ids_exports_to_both_services(faq_env, tmp_path, capsys):
    ids = ["²", "①", "١٢", "7"]
    src = tmp_path / "kb.jsonl"
    src.write_text("".join(json.dumps({"faq_id": f, "question": f"Question {f}?", "answer": f"Answer {f}."},
                                      ensure_ascii=False) + "\n" for f in ids), encoding="utf-8")
    code, _, err = run_cli(capsys, "kb", "import", str(src), "--kb", "digits")
    assert code == 0, err
    for fmt, name in (("qnamaker", "out.tsv"), ("azure", "out.json")):
        code, _, err = run_cli(capsys, "kb", "export", str(tmp_path / name), "--kb", "digits", "--format", fmt)
        assert code == 0 and "Traceback" not in err, err
    project = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert sorted(q["id"] for q in project["assets"]["qnas"]) == sorted(qna_ids(ids).values())
    assert qna_ids(ids)["7"] == 7


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(["greeting", "thanks"]), bad=st.sampled_from(["\\u0000", "\\ud800", "\\udfff"]),
       text=st.text(st.characters(categories=("L", "N")), min_size=1, max_size=12))
def test_kb_settings_refuses_a_small_talk_answer_that_is_not_storable_text(faq_env, capsys, kind, bad, text):
    value = json.dumps({kind: ["Hello!", text]})[:-3] + bad + '"]}'
    code, _, err = run_cli(capsys, "kb", "settings", "--set", f"small_talk_answers={value}")
    assert code == 2, err
    assert f"small_talk_answers.{kind}[1]" in err and ("NUL" in err or "surrogate" in err), err
    code, out, _ = run_cli(capsys, "kb", "settings", "--json")
    assert code == 0 and "small_talk_answers" not in json.loads(out)["stored"]
