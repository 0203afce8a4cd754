"""`faq kb lint --file FILE`: text and JSON on a KB file with a swapped answer."""
from __future__ import annotations

import json

from cli.main import main
from tests.helpers.kb import INDEX_TEST_FAQS


def _write_kb(path, swap=("refund", "dark-mode")):
    answers = {f: a for f, a, _ in INDEX_TEST_FAQS}
    a, b = swap
    answers[a], answers[b] = answers[b], answers[a]
    with open(path, "w") as fh:
        for f, _, qs in INDEX_TEST_FAQS:
            for q in qs:
                fh.write(json.dumps({"faq_id": f, "question": q, "answer": answers[f]}) + "\n")
    return path


def test_lint_kb_file_text_and_json(faq_env, tmp_path, capsys):
    kb = _write_kb(tmp_path / "kb.jsonl")
    assert main(["kb", "lint", "--file", str(kb), "--encoder", "minilm"]) == 0
    text = capsys.readouterr().out
    assert "2 flagged" in text and "  1. " in text and "'dark-mode'" in text

    out = tmp_path / "lint.json"
    assert main(["kb", "lint", "--file", str(kb), "--encoder", "minilm", "--json", "--top", "2",
                 "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["n_flagged"] == 2 and {f["faq_id"] for f in data["faqs"]} == {"refund", "dark-mode"}
    assert len(json.loads(out.read_text())["faqs"]) == len(INDEX_TEST_FAQS)


def test_lint_bad_input(faq_env, tmp_path, capsys):
    assert main(["kb", "lint", "--file", str(tmp_path / "missing.jsonl"), "--encoder", "minilm"]) == 2
    assert main(["kb", "lint", "--file", str(_write_kb(tmp_path / "kb.jsonl")), "--threshold", "2"]) == 2


def test_lint_a_kb_of_the_store(faq_env, tmp_path, capsys):
    """--kb NAME lints that KB's rows; --file with --kb lints the file (with that KB's settings)."""
    assert main(["kb", "import", str(_write_kb(tmp_path / "kb.jsonl")), "--kb", "shop"]) == 0
    capsys.readouterr()
    assert main(["kb", "lint", "--kb", "shop", "--encoder", "minilm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_flagged"] == 2
    assert main(["kb", "lint", "--encoder", "minilm", "--json"]) == 0  # the default KB is empty
    assert json.loads(capsys.readouterr().out)["n_flagged"] == 0
    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps({"faq_id": f, "question": q, "answer": a}) + "\n"
                             for f, a, qs in INDEX_TEST_FAQS for q in qs))
    assert main(["kb", "lint", "--file", str(clean), "--kb", "shop", "--encoder", "minilm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_flagged"] == 0


def test_lint_leaves_out_findings_an_owner_dismissed(faq_env, tmp_path, capsys):
    from app.settings import get_settings
    from app.store.reviews import lint_key
    from migrations.runner import migrated_store

    assert main(["kb", "import", str(_write_kb(tmp_path / "kb.jsonl"))]) == 0
    capsys.readouterr()
    assert main(["kb", "lint", "--encoder", "minilm", "--json", "--top", "0"]) == 0
    flagged = [f for f in json.loads(capsys.readouterr().out)["faqs"] if f["flagged"]]
    first = flagged[0]
    with migrated_store(get_settings()) as store:  # as the console's review page does
        answer = store.get_faq(first["faq_id"]).answer
        assert store.reviews.dismiss("lint", lint_key(first["faq_id"], answer), first["faq_id"], "checked by hand")
    assert main(["kb", "lint", "--encoder", "minilm", "--json", "--top", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n_flagged"] == len(flagged) - 1
    [mine] = [f for f in report["faqs"] if f["faq_id"] == first["faq_id"]]
    assert (mine["flagged"], mine["dismissed"]) == (False, "checked by hand")
    assert "1 finding(s) dismissed by an owner" in " ".join(report["notes"])
    assert main(["kb", "lint", "--encoder", "minilm", "--json", "--dismissed"]) == 0
    assert json.loads(capsys.readouterr().out)["n_flagged"] == len(flagged)
