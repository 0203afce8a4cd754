"""`faq eval ab` (offline A/B of the arms) on a tiny KB, and `faq eval online` (the A/B report from the
query log and /feedback), with real components: MiniLM, a scratch SQLite store, Annoy, tantivy and
the service's own /match and /feedback."""
from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from app.match.arms import arm_split
from evaluation.ab import paired_f1_difference
from evaluation.measures import QueryOutcome, ndcg_at_k, recall_at_k
from evaluation.online import median_interval, needed_per_arm, online_report, two_proportion_test, wilson_interval
from tests.helpers.kb import INDEX_TEST_FAQS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

TEST_QUERIES = [
    ("I lost my password and need a new one", "reset-password"),
    ("how can I get my money returned", "refund"),
    ("when does my parcel get here", "shipping-time"),
    ("I'd like to stop my subscription", "subscription-cancel"),
    ("is the app available for android phones", "app-download"),
    ("my product showed up smashed", "damaged-item"),
    ("turn on 2FA", "two-factor"),
    ("do you have a cheaper rate for students", "student-discount"),
    ("what is the boiling point of mercury", None),
    ("recommend a good pizza topping", None),
]
DEV_QUERIES = [
    ("where is my package", "track-order"),
    ("I want to close my account for good", "delete-account"),
    ("which cards do you take", "payment-methods"),
    ("how do I send an item back", "return-item"),
    ("who won the football world cup", None),
    ("what's the weather tomorrow", None),
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def tiny_ab_files(tmp_path):
    kb = write_jsonl(tmp_path / "kb.jsonl", [
        {"faq_id": f, "question": q, "answer": a} for f, a, qs in INDEX_TEST_FAQS for q in qs])
    test = write_jsonl(tmp_path / "test.jsonl", [{"query": q, "faq_id": f} for q, f in TEST_QUERIES])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"query": q, "faq_id": f} for q, f in DEV_QUERIES])
    return kb, test, dev


def test_eval_ab_writes_report_md_json_and_pngs(tmp_path, tiny_ab_files, faq_env, monkeypatch, capsys):
    from cli.main import main

    monkeypatch.setenv("FAQ_TORCH_THREADS", "1")
    monkeypatch.setenv("FAQ_ANN_N_TREES", "10")
    kb, test, dev = tiny_ab_files
    out = tmp_path / "ab"
    args = ["eval", "ab", "--kb", str(kb), "--queries", str(test), "--dev", str(dev), "--model", "minilm",
            "--arms", "ann,lexical,lexical+rerank", "--out", str(out), "--latency-sample", "5"]
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "SKIPPED arm lexical+rerank" in printed.err and "ann - lexical answer F1" in printed.out

    report = json.loads((out / "report.json").read_text())
    assert set(report["arms"]) == {"ann", "lexical"}
    assert "--reranker" in report["skipped"]["lexical+rerank"]
    assert report["lexical"]["engine"] == "tantivy" and report["lexical"]["k"] == 30
    assert report["counts"] == {**report["counts"], "faqs": 30, "test_queries": 10, "test_oos": 2, "dev_queries": 6}
    for arm in ("ann", "lexical"):
        r = report["arms"][arm]
        m = r["metrics"]
        assert m["n_queries"] == 10 and m["n_in_scope"] == 8 and r["threshold"]["source"] == "dev"
        assert 0 <= m["answer_f1"] <= 1 and 0 <= m["ndcg_at_10"] <= 1 and m["mrr"] >= m["top1_accuracy"] - 1e-12
        assert r["latency_ms"]["total"]["n"] == 5 and r["latency_ms"]["total"]["p99"] >= r["latency_ms"]["total"]["p50"] > 0
        assert len(r["curve"]["threshold"]) == len(r["curve"]["recall"]) == 101
    # the ann arm ranks every FAQ: its recall stage covers every in-scope query on this easy KB
    assert report["arms"]["ann"]["recall_stages"] == {"ann@30": 1.0}
    # the lexical arm's recall stage is exactly BM25's top-30 recall, checked on the build's own index
    from index.lexical import TantivyLexicalIndex, top_faqs

    lexical = TantivyLexicalIndex(report["lexical"]["location"])
    in_scope = [(q, f) for q, f in TEST_QUERIES if f is not None]
    found = sum(f in {h.faq_id for h in top_faqs(hits, 30)} for (q, f), hits in zip(in_scope, lexical.search([q for q, _ in in_scope], 30)))
    assert report["arms"]["lexical"]["recall_stages"]["bm25@30"] == pytest.approx(found / len(in_scope))
    assert report["target"]["ann_minus_lexical_f1_points"] == pytest.approx(
        (report["arms"]["ann"]["metrics"]["answer_f1"] - report["arms"]["lexical"]["metrics"]["answer_f1"]) * 100)
    assert "ann vs lexical" in report["comparisons"]

    md = (out / "report.md").read_text()
    assert "Table VIII" in md and "| ann |" in md and "| lexical |" in md and "lexical+rerank" in md
    for png in ("pr_threshold.png", "latency.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000

    # a re-run reuses the build and the query vectors and gives the same quality numbers
    assert main(args) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["index"]["reused"] is True and again["index"]["version"] == report["index"]["version"]
    for arm in ("ann", "lexical"):
        assert again["arms"][arm]["metrics"] == report["arms"][arm]["metrics"]


def test_eval_ab_runs_all_four_arms_with_a_reranker(tmp_path, tiny_ab_files, faq_env, monkeypatch, capsys):
    pytest.importorskip("models.matchers.cross_encoder")
    helpers = pytest.importorskip("tests.helpers.reranker")
    from cli.main import main

    monkeypatch.setenv("FAQ_TORCH_THREADS", "1")
    monkeypatch.setenv("FAQ_ANN_N_TREES", "10")
    reranker = helpers.make_tiny_reranker(tmp_path / "tiny-reranker", onnx=False)
    kb, test, dev = tiny_ab_files
    out = tmp_path / "ab4"
    assert main(["eval", "ab", "--kb", str(kb), "--queries", str(test), "--dev", str(dev), "--model", "minilm",
                 "--out", str(out), "--reranker", str(reranker), "--rerank-k", "5", "--latency-sample", "3"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert list(report["arms"]) == ["ann", "ann+rerank", "lexical", "lexical+rerank"] and report["skipped"] == {}
    assert report["reranker"]["rerank_k"] == 5 and report["reranker"]["path"] == str(reranker)
    assert set(report["arms"]["ann+rerank"]["recall_stages"]) == {"ann@30", "ann@5 (re-ranker input)"}
    assert set(report["arms"]["lexical+rerank"]["recall_stages"]) == {"bm25@30", "lexical@5 (re-ranker input)"}
    for arm in ("ann+rerank", "lexical+rerank"):
        assert report["arms"][arm]["latency_ms"]["rerank"]["p50"] > 0
        assert report["arms"][arm]["metrics"]["n_queries"] == 10
    assert {"ann vs ann+rerank", "ann vs lexical", "ann vs lexical+rerank"} == set(report["comparisons"])


def test_eval_ab_rejects_bad_arguments(tmp_path, tiny_ab_files, faq_env, capsys):
    from cli.main import main

    kb, test, _ = tiny_ab_files
    assert main(["eval", "ab", "--kb", str(kb), "--queries", str(test), "--arms", "ann,bm25", "--out", str(tmp_path / "x")]) == 2
    assert "unknown arm(s) ['bm25']" in capsys.readouterr().err
    assert main(["eval", "ab", "--kb", str(kb), "--queries", str(test), "--arms", "ann+rerank", "--out", str(tmp_path / "x")]) == 2
    assert "no arm left to run" in capsys.readouterr().err


def O(gold, ranked, answer="top"):
    ranked = tuple(ranked)
    return QueryOutcome(gold, ranked, 0.9, ranked[0] if answer == "top" and ranked else None)


def test_ranking_and_difference_metrics_hand_computed():
    outcomes = [O("a", ["a", "b"]), O("b", ["a", "b"]), O("c", ["x"] * 10 + ["c"]), O(None, ["a"])]
    assert ndcg_at_k(outcomes, 10) == pytest.approx((1 + 1 / math.log2(3) + 0) / 3)
    assert recall_at_k(outcomes, 1) == pytest.approx(1 / 3) and recall_at_k(outcomes, 11) == pytest.approx(1.0)
    better = [O("a", ["a"]), O("b", ["b"]), O("c", ["c"]), O(None, ["a"], answer=None)]
    worse = [O("a", ["x"]), O("b", ["x"]), O("c", ["c"]), O(None, ["a"])]
    diff = paired_f1_difference(better, worse, samples=200)
    # better: P 1, R 1 -> F1 1; worse: 1 correct of 4 answered, 3 answerable -> F1 2*(1/4)(1/3)/(7/12) = 2/7
    assert diff["difference"] == pytest.approx(1 - 2 / 7)
    assert diff["ci"][0] <= diff["difference"] <= diff["ci"][1]


# ---------------------------------------------------------------------------------------------
# faq eval online

def test_online_statistics_hand_computed():
    lo, hi = wilson_interval(5, 6)
    # Wilson 95%: centre (p + z^2/2n)/(1 + z^2/n), z = 1.95996
    z = 1.959964
    centre = (5 / 6 + z * z / 12) / (1 + z * z / 6)
    half = z * math.sqrt((5 / 6) * (1 / 6) / 6 + z * z / 144) / (1 + z * z / 6)
    assert (lo, hi) == pytest.approx((centre - half, centre + half), abs=1e-5)
    assert wilson_interval(0, 0) == (None, None)
    assert two_proportion_test(50, 100, 50, 100) == pytest.approx(1.0)
    assert two_proportion_test(90, 100, 50, 100) < 1e-6
    assert needed_per_arm(0.5, 0.5) is None and needed_per_arm(0.8, 0.9) == 197  # classic textbook value
    lo, hi = median_interval(list(range(1, 101)))  # n = 100: ranks 40 and 61 (binomial table)
    assert (lo, hi) == (40.0, 61.0)


def test_feedback_to_online_report_end_to_end(tmp_path, faq_env, monkeypatch, capsys, minilm_encoder):
    """/match with an A/B split -> /feedback -> `faq eval online` reports the per-arm numbers."""
    from app.api.main import create_app
    from cli.main import main
    from app.settings import get_settings
    from app.store import FaqStore
    from index.artifacts import BuildRegistry
    from app.release import build_current

    encoder = minilm_encoder
    monkeypatch.setenv("FAQ_AB_SPLIT", "ann:50,lexical:50")
    monkeypatch.setenv("FAQ_KB_POLL_SECONDS", "0")
    get_settings.cache_clear()
    settings = get_settings()
    from migrations.runner import migrated_store

    store = migrated_store(settings)
    from app.store import KbRecord

    store.import_records([KbRecord(f, q, a, []) for f, a, qs in INDEX_TEST_FAQS for q in qs])
    build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5)

    sessions = {"ann": [], "lexical": []}
    split = arm_split(settings)
    i = 0
    while min(len(v) for v in sessions.values()) < 3:
        sessions[split.assign(f"s{i}")].append(f"s{i}")
        i += 1
    plan = [  # (query, feedback): True/False = correct flag, a str = the right faq_id, None = no feedback
        ("How do I reset my password?", True), ("Can I get a refund?", "refund"), ("xylophone gluon plasma", None)]
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        expected = {}
        for arm, sids in sessions.items():
            answered = correct = judged = 0
            for sid, (query, feedback) in zip(sids[:3], plan):
                body = client.post("/match", json={"query": query, "session_id": sid}).json()
                assert body["arm"] == arm
                answered += body["answer"] is not None
                if feedback is not None:
                    payload = {"request_id": body["request_id"]}
                    payload["correct" if isinstance(feedback, bool) else "faq_id"] = feedback
                    assert client.post("/feedback", json=payload).status_code == 200
                    if body["answer"] is not None:
                        judged += 1
                        correct += feedback is True or feedback == body["answer"]["faq_id"]
            expected[arm] = (answered, judged, correct)
        client.app.state.service.query_log.flush()

    out = tmp_path / "online"
    assert main(["eval", "online", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Online A/B report" in printed and "not yet significant" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["requests"] == 6 and report["control"] == "ann" and set(report["arms"]) == {"ann", "lexical"}
    for arm, (answered, judged, correct) in expected.items():
        s = report["arms"][arm]
        assert s["requests"] == 3 and s["answered"] == answered and s["feedback"] == 2
        assert s["judged_answers"] == judged and s["correct"] == correct
        assert s["answer_rate"] == pytest.approx(answered / 3)
        assert s["answer_rate_ci"] == pytest.approx(list(wilson_interval(answered, 3)))
        assert s["latency_ms"]["n"] == 3 and s["latency_ms"]["p50"] > 0
    assert "lexical" in report["comparisons"] and not report["comparisons"]["lexical"]["accuracy"]["significant"]
    assert (out / "report.md").read_text().startswith("# Online A/B report")

    # a time window and an arm filter
    future = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    assert main(["eval", "online", "--since", future]) == 0
    assert "no logged /match requests" in capsys.readouterr().out
    assert main(["eval", "online", "--since", "yesterday"]) == 2
    assert "not an ISO date" in capsys.readouterr().err
    with FaqStore.from_settings(settings) as again:
        only = online_report(again, arms=["lexical"])
    assert set(only["arms"]) == {"lexical"} and only["control"] == "lexical" and only["comparisons"] == {}
    store.close()
