"""`faq data prepare` converters on tiny fixture folders shaped like the real datasets."""
from __future__ import annotations

import json

import pytest

from cli.main import main
from evaluation.datasets import DatasetError, prepare


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def clinc_src(tmp_path):
    src = tmp_path / "clinc150"
    src.mkdir()
    data = {
        "train": [["what's the weather", "weather"], ["is it raining", "weather"], ["is it raining", "weather"],
                  ["play a song", "play_music"]],
        "val": [["will it snow", "weather"]],
        "test": [["put on some music", "play_music"], ["how hot is it", "weather"]],
        "oos_train": [["tell me a secret", "oos"]],
        "oos_val": [["book a dragon", "oos"]],
        "oos_test": [["what is love", "oos"], ["fly me to mars", "oos"]],
    }
    (src / "data_full.json").write_text(json.dumps(data), encoding="utf-8")
    return src


def test_clinc150(clinc_src, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["data", "prepare", "clinc150", "--src", str(clinc_src), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "kb.jsonl" in printed and "placeholders" in printed
    kb = read_jsonl(out / "kb.jsonl")
    assert kb == [
        {"faq_id": "weather", "question": "what's the weather", "answer": "[intent: weather]", "tags": ["clinc150"]},
        {"faq_id": "weather", "question": "is it raining", "answer": "[intent: weather]", "tags": ["clinc150"]},
        {"faq_id": "play_music", "question": "play a song", "answer": "[intent: play_music]", "tags": ["clinc150"]},
    ]
    assert read_jsonl(out / "dev.jsonl") == [
        {"query": "will it snow", "faq_id": "weather"},
        {"query": "book a dragon", "faq_id": None},
    ]
    test = read_jsonl(out / "test.jsonl")
    assert len(test) == 4 and [r["faq_id"] for r in test].count(None) == 2
    meta = json.loads((out / "dataset.json").read_text())
    assert meta["files"]["kb.jsonl"] == 3 and meta["counts"]["test_oos"] == 2
    # re-running overwrites and leaves no temp files behind
    assert main(["data", "prepare", "clinc150", "--src", str(clinc_src), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["dataset.json", "dev.jsonl", "kb.jsonl", "test.jsonl"]


def test_banking77_holds_out_seeded_share_per_intent(tmp_path):
    src = tmp_path / "banking77"
    src.mkdir()
    rows = ["text,category"] + [f"card question {i},card_arrival" for i in range(20)]
    rows += [f'"top up, number {i}",top_up' for i in range(10)]
    (src / "train.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (src / "test.csv").write_text('text,category\n"where, is my card",card_arrival\n', encoding="utf-8")
    out = tmp_path / "out"
    report = prepare("banking77", src, out, seed=0)
    kb, dev = read_jsonl(out / "kb.jsonl"), read_jsonl(out / "dev.jsonl")
    assert report.files == {"kb.jsonl": 27, "dev.jsonl": 3, "test.jsonl": 1}
    assert sum(r["faq_id"] == "card_arrival" for r in dev) == 2 and sum(r["faq_id"] == "top_up" for r in dev) == 1
    assert {r["query"] for r in dev}.isdisjoint(r["question"] for r in kb)
    assert read_jsonl(out / "test.jsonl") == [{"query": "where, is my card", "faq_id": "card_arrival"}]
    # same seed, same split; another seed, another split
    prepare("banking77", src, tmp_path / "again", seed=0)
    assert read_jsonl(tmp_path / "again" / "dev.jsonl") == dev
    prepare("banking77", src, tmp_path / "other", seed=1)
    assert read_jsonl(tmp_path / "other" / "dev.jsonl") != dev


def test_qqp_pairs_and_missing_train_note(tmp_path):
    src = tmp_path / "qqp"
    src.mkdir()
    (src / "dev.tsv").write_text("1\tHow do I x ?\tHow can I x ?\t11\n0\tA ?\tB ?\t12\n", encoding="utf-8")
    (src / "test.tsv").write_text("0\tC ?\tD ?\t13\n", encoding="utf-8")
    report = prepare("qqp", src, tmp_path / "out")
    assert (tmp_path / "out" / "pairs_dev.tsv").read_text() == "1\tHow do I x ?\tHow can I x ?\n0\tA ?\tB ?\n"
    assert report.files == {"pairs_dev.tsv": 2, "pairs_test.tsv": 1}
    assert any("train.tsv is missing" in n for n in report.notes)


def test_mrpc_and_stsb(tmp_path):
    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"
    for name in ("msr-para-train.tsv", "msr-para-val.tsv", "msr-para-test.tsv"):
        (mrpc / name).write_text(header + '1\t1\t2\tHe said "yes".\tHe agreed.\r\n', encoding="utf-8")
    prepare("mrpc", mrpc, tmp_path / "m")
    assert (tmp_path / "m" / "pairs_dev.tsv").read_text() == '1\tHe said "yes".\tHe agreed.\n'
    sts = tmp_path / "stsb"
    sts.mkdir()
    for split in ("train", "dev", "test"):
        (sts / f"sts-{split}.csv").write_text(
            "main-news\tf\t2012\t0001\t4.200\tA cat sits.\tA cat is sitting.\n"
            "main-news\tf\t2012\t0002\t1.000\tA dog.\tA car.\tsrc1\tsrc2\n",
            encoding="utf-8",
        )
    prepare("stsb", sts, tmp_path / "s")
    assert (tmp_path / "s" / "pairs_test.tsv").read_text() == "1\tA cat sits.\tA cat is sitting.\n0\tA dog.\tA car.\n"


def test_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(DatasetError, match="missing source file"):
        prepare("clinc150", tmp_path, tmp_path / "out")
    with pytest.raises(DatasetError, match="dataset must be one of"):
        prepare("nope", tmp_path, tmp_path / "out")
    bad = tmp_path / "qqp"
    bad.mkdir()
    (bad / "dev.tsv").write_text("yes\ta\tb\n", encoding="utf-8")
    (bad / "test.tsv").write_text("", encoding="utf-8")
    assert main(["data", "prepare", "qqp", "--src", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "dev.tsv:1: label must be 0 or 1" in capsys.readouterr().err


def test_clinc150_domain_selection(clinc_src, tmp_path):
    (clinc_src / "domains.json").write_text(json.dumps({"utility": ["weather"], "home": ["play_music"]}))
    out = tmp_path / "home"
    assert main(["data", "prepare", "clinc150", "--src", str(clinc_src), "--out", str(out), "--domains", "home"]) == 0
    assert {r["faq_id"] for r in read_jsonl(out / "kb.jsonl")} == {"play_music"}
    test = read_jsonl(out / "test.jsonl")
    # queries of dropped intents are left out, not turned into out-of-scope queries; OOS queries stay
    assert [r["faq_id"] for r in test] == ["play_music", None, None]
    out2 = tmp_path / "rest"
    assert main(["data", "prepare", "clinc150", "--src", str(clinc_src), "--out", str(out2),
                 "--exclude-domains", "home"]) == 0
    assert {r["faq_id"] for r in read_jsonl(out2 / "kb.jsonl")} == {"weather"}
    with pytest.raises(DatasetError, match="unknown CLINC150 domain"):
        prepare("clinc150", clinc_src, tmp_path / "x", domains=["garden"])
    with pytest.raises(DatasetError, match="clinc150 only"):
        prepare("mrpc", clinc_src, tmp_path / "y", domains=["home"])
