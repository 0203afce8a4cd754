"""`faq kb mine` on a real store: proposals from the query log, files `faq kb import` accepts."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

from cli.main import main

KB_ROWS = [
    {"faq_id": "reset-password", "question": "How do I reset my password?", "answer": "Use 'Forgot password'.",
     "tags": ["account"]},
    {"faq_id": "reset-password", "question": "I forgot my password"},
    {"faq_id": "refund", "question": "Can I get a refund?", "answer": "Within 30 days."},
]


def _setup(tmp_path, log_rows):
    kb = tmp_path / "kb.jsonl"
    kb.write_text("".join(json.dumps(r) + "\n" for r in KB_ROWS))
    assert main(["kb", "import", str(kb)]) == 0
    from app.settings import get_settings
    from migrations.runner import migrated_store

    with migrated_store(get_settings()) as store:
        assert store.log_queries([{"request_id": uuid.uuid4().hex, **r} for r in log_rows]) == 0


def test_mine_writes_importable_phrasings_and_clusters(faq_env, tmp_path, capsys):
    old = datetime(2020, 1, 1, tzinfo=timezone.utc)
    _setup(tmp_path, [
        {"query": "password reset how", "faq_id": "reset-password", "score": 0.9},
        {"query": "password reset how", "faq_id": "reset-password", "score": 0.8},
        {"query": "How do I reset my password", "faq_id": "reset-password", "score": 0.99},  # existing
        {"query": "change my password", "faq_id": "reset-password", "score": 0.95},  # key disagrees
        {"query": "money back please", "faq_id": "refund", "score": 0.4, "feedback_correct": True},
        {"query": "refund get", "faq_id": "refund", "score": 0.9, "created_at": old},
        {"query": "where is the cafeteria", "faq_id": None, "score": 0.2},
        {"query": "cafeteria where", "faq_id": None, "score": 0.1},
    ])
    capsys.readouterr()
    out = tmp_path / "mined.jsonl"
    assert main(["kb", "mine", "--out", str(out), "--json", "--min-score", "0.5"]) == 0
    report = json.loads(capsys.readouterr().out)
    got = {(p["faq_id"], p["question"], p["count"]) for p in report["phrasings"]}
    assert got == {("reset-password", "password reset how", 2), ("refund", "money back please", 1),
                   ("refund", "refund get", 1)}
    assert report["stats"]["already_phrasing"] == 1
    assert [(c["faq_id"], c["size"], c["key"]) for c in report["clusters"]] == [("new-1", 2, "cafeteria")]

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    reset = next(r for r in rows if r["faq_id"] == "reset-password")
    assert reset["answer"] == "Use 'Forgot password'." and reset["tags"] == ["account"]  # import keeps them
    assert reset["evidence"] == {"key": 2}
    clusters = tmp_path / "mined.clusters.jsonl"
    assert [json.loads(line)["faq_id"] for line in clusters.read_text().splitlines()] == ["new-1", "new-1"]

    assert main(["kb", "import", str(out), "--dry-run", "--json"]) == 0
    imp = json.loads(capsys.readouterr().out)
    assert imp["variants_added"] == 3 and imp["faqs_created"] == 0 and imp["faqs_updated"] == 2
    assert main(["kb", "import", str(clusters), "--dry-run"]) == 2  # no answer yet: an editor writes one
    assert "has no answer" in capsys.readouterr().err

    # the KB is unchanged by mining, and --since drops the old row
    assert main(["kb", "mine", "--since", "2021-01-01", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert ("refund", "refund get") not in {(p["faq_id"], p["question"]) for p in report["phrasings"]}
    assert main(["kb", "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["variants"] == 3

    assert main(["kb", "mine"]) == 0
    text = capsys.readouterr().out
    assert "3 new phrasing(s)" in text or "2 new phrasing(s)" in text
    assert "new-1 (2)" in text

    # with the encoder, near-duplicates worded differently join the cluster
    _log = [{"query": "canteen location", "faq_id": None, "score": 0.1}]
    from app.settings import get_settings
    from migrations.runner import migrated_store

    with migrated_store(get_settings()) as store:
        store.log_queries([{"request_id": uuid.uuid4().hex, **r} for r in _log])
    assert main(["kb", "mine", "--json", "--cluster-cosine", "0.5", "--encoder", "minilm"]) == 0
    clusters = json.loads(capsys.readouterr().out)["clusters"]
    assert clusters[0]["size"] == 3 and "canteen location" in {q["query"] for q in clusters[0]["queries"]}


def test_mine_bad_input(faq_env, tmp_path, capsys):
    assert main(["kb", "mine", "--since", "yesterday"]) == 2
    assert main(["kb", "mine", "--min-score", "3"]) == 2
    assert main(["kb", "mine", "--out", str(tmp_path / "x.csv")]) == 2


def test_mine_with_a_siamese_matcher_as_second_opinion(faq_env, tmp_path, capsys):
    """A real (untrained, seeded) Siamese folder: with --min-agree 0 every confident match it is asked about
    passes, with 1 none does; the key's proposals stay either way."""
    import torch

    from models.calibration import Calibration

    from models.encoders.words import GloveWords
    from models.matchers.siamese import SiameseConfig, SiameseMatcher, SiameseScorer

    torch.manual_seed(0)
    folder = SiameseScorer(SiameseMatcher(SiameseConfig(filters=4, mlp_hidden=8)), GloveWords(),
                           Calibration()).save(tmp_path / "siamese")
    _setup(tmp_path, [
        {"query": "password reset how", "faq_id": "reset-password", "score": 0.95},
        {"query": "change my password", "faq_id": "reset-password", "score": 0.95},
    ])
    capsys.readouterr()
    runs = {}
    for agree in ("0", "1"):
        assert main(["kb", "mine", "--json", "--siamese", str(folder), "--min-agree", agree]) == 0
        report = json.loads(capsys.readouterr().out)
        runs[agree] = {(p["question"], tuple(p["evidence"])) for p in report["phrasings"]}
        assert report["min_agree"] == float(agree)
    assert runs["0"] == {("password reset how", ("key",)), ("change my password", ("siamese",))}
    assert runs["1"] == {("password reset how", ("key",))}
    assert main(["kb", "mine", "--siamese", str(tmp_path / "nothing")]) == 2
    assert "--siamese" in capsys.readouterr().err


def test_mine_leaves_out_what_an_owner_dismissed(faq_env, tmp_path, capsys):
    from app.settings import get_settings
    from app.store.reviews import cluster_key, phrasing_key
    from migrations.runner import migrated_store

    _setup(tmp_path, [
        {"query": "money back please", "faq_id": "refund", "score": 0.4, "feedback_correct": True},
        {"query": "refund get", "faq_id": "refund", "score": 0.95},
        {"query": "where is the cafeteria", "faq_id": None, "score": 0.2},
        {"query": "cafeteria where", "faq_id": None, "score": 0.1},
    ])
    with migrated_store(get_settings()) as store:  # as the console's review page does
        assert store.reviews.dismiss("phrasing", phrasing_key("refund", "Money back please!"), "refund: money back",
                                     "not how customers talk")
        assert store.reviews.dismiss("cluster", cluster_key("cafeteria"), "where is the cafeteria", None)
    capsys.readouterr()
    assert main(["kb", "mine", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [p["question"] for p in report["phrasings"]] == ["refund get"] and report["clusters"] == []
    assert (report["stats"]["dismissed_phrasings"], report["stats"]["dismissed_clusters"]) == (1, 1)
    assert main(["kb", "mine"]) == 0
    assert "dismissed by an owner, left out: 1 phrasing(s), 1 cluster(s)" in capsys.readouterr().out
    assert main(["kb", "mine", "--json", "--dismissed"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["phrasings"]) == 2 and len(report["clusters"]) == 1
