"""`faq kb settings --set publishing=reviewed`, `faq kb publish | published | rollback | diff` as an operator runs
them: the content served when a KB turns reviewed is its first publication; publish says what changed, or that
nothing did; rollback names what it restored; diff shows phrasings and the answer word by word; bad ids and
notes exit 2 naming them."""
from __future__ import annotations

import json

import pytest

from cli.main import main
from tests.helpers.kb import write_kb_jsonl

FAQS = {"refund": ["How do I get a refund?", "money back please"], "hours": ["When are you open?"]}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def shop(faq_env, tmp_path, capsys):
    assert run(capsys, "kb", "import", str(write_kb_jsonl(tmp_path / "shop.jsonl", FAQS)), "--kb", "shop")[0] == 0
    return faq_env


def test_publish_list_diff_and_roll_back_from_the_cli(shop, capsys):
    from app.store import FaqStore

    code, out, _ = run(capsys, "kb", "settings", "--kb", "shop", "--set", "publishing=reviewed")
    assert code == 0 and "is publication 1; edits go to the draft" in out
    code, out, _ = run(capsys, "kb", "publish", "--kb", "shop")
    assert code == 0 and out.strip() == "KB 'shop': nothing changed since publication 1: nothing published"

    with FaqStore(shop.db_url, kb="shop") as store:
        store.update_faq("refund", answer="Refunds take 14 days.", questions=["How do I get a refund?", "refund?"])
    code, out, _ = run(capsys, "kb", "diff", "--kb", "shop")
    assert code == 0 and "changed  refund" in out and "+ phrasing: refund?" in out
    assert "- phrasing: money back please" in out and "[+Refunds take 14 days.]" in out
    code, out, _ = run(capsys, "kb", "publish", "--kb", "shop", "--note", "refund policy")
    assert code == 0 and out.startswith("KB 'shop': published publication 2: 0 FAQs added, 0 removed, 1 changed")

    code, out, _ = run(capsys, "kb", "published", "--kb", "shop", "--json")
    listed = json.loads(out)
    assert code == 0 and [p["id"] for p in listed["publications"]] == [2, 1]
    assert listed["publications"][0]["note"] == "refund policy" and listed["publishing"] == "reviewed"

    code, out, _ = run(capsys, "kb", "rollback", "1", "--kb", "shop")
    assert code == 0 and "rolled back to publication 1 as publication 3" in out
    code, out, _ = run(capsys, "kb", "diff", "--kb", "shop", "--from", "3", "--to", "2", "--json")
    assert code == 0 and [c["faq_id"] for c in json.loads(out)["changed"]] == ["refund"]

    code, _, err = run(capsys, "kb", "rollback", "9", "--kb", "shop")
    assert code == 2 and "KB 'shop' has no publication 9" in err
    code, _, err = run(capsys, "kb", "diff", "--kb", "shop", "--from", "x")
    assert code == 2 and "has no publication x" in err
    code, _, err = run(capsys, "kb", "publish", "--kb", "shop", "--note", "n" * 1001)
    assert code == 2 and "note: at most 1000 characters" in err
    with FaqStore(shop.db_url, kb="shop") as store:
        assert [r.action for r in store.audit.read() if r.action in ("publish", "rollback")] == \
               ["rollback", "publish", "publish"]


def test_an_immediate_kb_records_a_publication_but_has_nothing_to_roll_back_to(shop, capsys):
    code, out, _ = run(capsys, "kb", "publish", "--kb", "shop")
    assert code == 0 and "publishing is immediate: edits were live already" in out
    code, _, err = run(capsys, "kb", "rollback", "1", "--kb", "shop")
    assert code == 1 and "publishing=reviewed" in err


@pytest.mark.parametrize("argv,says", [
    (("kb", "rollback", "٣"), "has no publication '٣'"),
    (("kb", "rollback", "²"), "has no publication '²'"),
    (("kb", "rollback", "9" * 100_000), "has no publication 999"),
    (("kb", "diff", "--from", "1\udc80"), "has no publication '1\\udc80'"),
    (("kb", "publish", "--note", "a\x00b"), "note: "),
])
def test_hostile_ids_and_notes_exit_2_naming_them(shop, capsys, argv, says):
    from app.store import FaqStore

    assert run(capsys, "kb", "settings", "--kb", "shop", "--set", "publishing=reviewed")[0] == 0
    code, _, err = run(capsys, *argv, "--kb", "shop")
    assert code == 2 and says in err
    with FaqStore(shop.db_url, kb="shop") as store:
        assert store.publications.latest_id() == 1
