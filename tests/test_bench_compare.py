"""The pure parts of bench/peer.py (matching over a FAISS flat IP index, its /match shape) and
bench/compare.py (ratios, summaries, Markdown), with a hashed bag-of-words encoder instead of a model."""
from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import compare  # noqa: E402

DIM = 64


def bow_encode(texts):
    """Unit-length word-count vectors: texts sharing words have a higher cosine, deterministically."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().replace("?", "").split():
            out[i, zlib.crc32(word.encode()) % DIM] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-12)


KB_ROWS = [
    {"faq_id": "refund", "question": "how do I get a refund", "answer": "Within 14 days.", "tags": []},
    {"faq_id": "refund", "question": "money back on my yearly plan"},
    {"faq_id": "refund", "question": "can I cancel and be reimbursed"},
    {"faq_id": "password", "question": "I forgot my password", "answer": "Use the reset link."},
    {"faq_id": "password", "question": "reset login credentials"},
    {"faq_id": "invoice", "question": "where is my invoice", "answer": "Settings > Billing."},
]


@pytest.fixture
def kb_file(tmp_path) -> Path:
    path = tmp_path / "kb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in KB_ROWS))
    return path


@pytest.fixture
def peer_index(kb_file):
    pytest.importorskip("faiss")
    from bench import peer

    return peer.PeerIndex(peer.load_faqs(kb_file), bow_encode)


# ---------------------------------------------------------------- peer

def test_load_faqs_groups_phrasings_and_answers(kb_file):
    from bench import peer

    faqs = {f.faq_id: f for f in peer.load_faqs(kb_file)}
    assert list(faqs) == ["refund", "password", "invoice"]
    assert faqs["refund"].questions == ["how do I get a refund", "money back on my yearly plan",
                                        "can I cancel and be reimbursed"]
    assert faqs["password"].answer == "Use the reset link."


def test_peer_ranks_faqs_by_their_best_phrasing(peer_index):
    matches, encode_ms, search_ms = peer_index.search("money back on my yearly plan", top_k=3)
    assert [m["faq_id"] for m in matches][0] == "refund"
    assert matches[0]["question"] == "money back on my yearly plan"
    assert matches[0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert len({m["faq_id"] for m in matches}) == len(matches) == 3  # one row per FAQ, not per phrasing
    scores = [m["score"] for m in matches]
    assert scores == sorted(scores, reverse=True)
    assert encode_ms >= 0 and search_ms >= 0


def test_peer_top_k_is_capped_by_the_kb(peer_index):
    matches, _, _ = peer_index.search("reset my password", top_k=10)
    assert [m["faq_id"] for m in matches][0] == "password"
    assert len(matches) == 3
    assert peer_index.n_phrasings == 6


def test_peer_match_route_has_the_shape_load_py_reads(peer_index):
    from fastapi.testclient import TestClient

    from bench import peer

    info = {"index_version": "peer-test", "n_faqs": 3}
    client = TestClient(peer.create_app(peer_index, info))
    assert client.get("/readyz").status_code == 200
    assert client.get("/healthz").json()["n_faqs"] == 3

    body = client.post("/match", json={"query": "where is my invoice", "top_k": 2}).json()
    assert body["index_version"] == "peer-test"
    assert body["answer"]["faq_id"] == "invoice" == body["matches"][0]["faq_id"]
    assert len(body["matches"]) == 2
    assert set(body["timings_ms"]) == {"encode", "retrieve", "rerank", "total"}
    assert all(isinstance(v, float) for v in body["timings_ms"].values())

    # no threshold by default (the recipe always answers); a raw-cosine threshold can withhold it
    body = client.post("/match", json={"query": "what is the weather", "threshold": 0.99}).json()
    assert body["answer"] is None and body["matches"]
    assert client.post("/match", json={"query": ""}).status_code == 422


# ---------------------------------------------------------------- compare

def load_report(concurrency: int, p50: float, p99: float, rps: float, acc: float, errors: int = 0) -> dict:
    """What bench/load.py writes, reduced to the fields compare.py reads."""
    return {"concurrency": concurrency, "requests_sent": 100, "ok": 100 - errors, "errors": errors,
            "errors_by_kind": {"http_503": errors} if errors else {}, "stopped_by_time_limit": False, "wall_s": 2.0,
            "throughput_rps": rps, "latency_ms": {"p50": p50, "p90": p99, "p99": p99, "mean": p50, "max": p99},
            "server_timings_ms_median": {"encode": p50 / 2, "retrieve": 1.0, "rerank": 0.0, "total": p50},
            "answered_rate": 0.9, "top1_accuracy": acc, "labelled": 100, "index_versions": {"v1": 100},
            "url": "http://127.0.0.1:1", "client_host": {}}


def test_summarize_run_keeps_the_compared_fields():
    run = compare.summarize_run(load_report(4, 10.0, 30.0, 200.0, 0.8), rss_peak_mb=512.345)
    assert run["rss_peak_mb"] == 512.3
    assert run["latency_ms"]["p50"] == 10.0 and run["top1_accuracy"] == 0.8
    assert "url" not in run and "client_host" not in run


def test_ratios_say_how_much_faster_faq_match_is():
    faq = compare.summarize_run(load_report(32, 10.0, 40.0, 300.0, 0.90), 400.0)
    peer = compare.summarize_run(load_report(32, 25.0, 60.0, 100.0, 0.85), 800.0)
    r = compare.compare_runs(faq, peer)
    assert r == {"concurrency": 32, "p50_speedup": 2.5, "p99_speedup": 1.5, "throughput_ratio": 3.0,
                 "top1_delta": 0.05, "rss_ratio": 0.5}
    missing = compare.compare_runs({"concurrency": 1, "latency_ms": {"p50": None}}, peer)
    assert missing["p50_speedup"] is None and missing["top1_delta"] is None


def _systems() -> list[dict]:
    def system(name, kind, rate, runs):
        return {"name": name, "kind": kind, "build": {"encode_sentences_per_s": rate, "encode_s": 1.0, "wall_s": 3.0,
                                                       "encoder_id": "enc"},
                "ready_s": 2.0, "torch_threads": 2, "runs": runs}

    return [
        system("faq-match minilm/torch", "faq-match", 450.0,
               [compare.summarize_run(load_report(c, 8.0, 20.0, 120.0, 0.9), 600.0) for c in (1, 4)]),
        system("faq-match mpnet", "faq-match", 60.0,
               [compare.summarize_run(load_report(1, 40.0, 60.0, 25.0, 0.95), 900.0)]),
        system("peer minilm", compare.PEER, 300.0,
               [compare.summarize_run(load_report(c, 16.0, 40.0, 60.0, 0.85), 700.0) for c in (1, 4)]),
    ]


def test_build_comparisons_pairs_each_config_with_the_peer_by_concurrency():
    comps = compare.build_comparisons(_systems())
    assert [c["system"] for c in comps] == ["faq-match minilm/torch", "faq-match mpnet"]
    assert comps[0]["vs"] == "peer minilm"
    assert comps[0]["build_rate_ratio"] == 1.5 and comps[1]["build_rate_ratio"] == 0.2
    assert [r["concurrency"] for r in comps[0]["runs"]] == [1, 4]
    assert comps[0]["runs"][0]["p50_speedup"] == 2.0 and comps[0]["runs"][0]["throughput_ratio"] == 2.0
    assert comps[1]["runs"][0]["p50_speedup"] == 0.4
    assert compare.build_comparisons([s for s in _systems() if s["kind"] != compare.PEER]) == []


def test_markdown_report_has_every_run_and_ratio():
    systems = _systems() + [{"name": "faq-match msem", "kind": "faq-match", "failed": "index build failed",
                             "runs": []}]
    report = {
        "created_at": "2026-11-23T00:00:00+00:00", "command": "python bench/compare.py --kb kb.jsonl",
        "machine": {"cpu_model": "Test CPU", "cpus": 2, "int8_dot_product": ["avx512_vnni"],
                    "load_avg_before": [0.1, 0.1, 0.1], "load_avg_after": [1.0, 0.5, 0.2]},
        "kb": {"path": "kb.jsonl", "n_faqs": 3, "n_phrasings": 6},
        "queries": {"path": "q.jsonl", "n": 10, "n_labelled": 10},
        "settings": {"requests": 100, "max_seconds": 60.0, "top_k": 5},
        "systems": systems, "comparisons": compare.build_comparisons(systems),
        "breakdown": compare.build_breakdown(systems),
    }
    md = compare.render_markdown(report)
    assert "Systems, one server at a time in this order: faq-match minilm/torch, faq-match mpnet, peer minilm, " \
           "faq-match msem (failed)." in md
    assert "Where the time goes" in md and "| faq-match minilm/torch | 4 | 8.00 | 20.00 | 8.00 | 0.00 | – | – |" in md
    assert "`python bench/compare.py --kb kb.jsonl`" in md and "Test CPU" in md and "avx512_vnni" in md
    assert "| faq-match minilm/torch | 4 | 8.0 | 20.0 | 120.0 | 0 | 0.900 | 0.900 | 4.0 | 600 |" in md
    assert "| peer minilm | 1 | 16.0 | 40.0 | 60.0 |" in md
    assert "| faq-match minilm/torch | 1 | 2.00x | 2.00x | 2.00x | 0.050 | 0.86x | 1.50x |" in md
    assert "failed: index build failed" in md
    json.dumps(report)  # what compare.json holds must serialise


def test_argument_parsing_helpers():
    assert compare.parse_concurrency("1, 32") == [1, 32]
    with pytest.raises(argparse.ArgumentTypeError, match="1..256"):
        compare.parse_concurrency("0")
    assert compare.parse_list("minilm,mpnet,") == ["minilm", "mpnet"]
    assert compare.parse_build_rate("encoded 100 sentences in 0.2s (455 sentences/s, encoder x)\n"
                                    "built v: ... (451 sentences/s), annoy") == 451.0
    assert compare.parse_build_rate("nothing") is None
    assert compare.system_name("minilm", None) == "faq-match minilm"
    assert compare.slug("faq-match minilm/onnx-int8") == "faq-match_minilm_onnx-int8"


def test_runtime_label_prefers_what_the_system_reported():
    assert compare.runtime_label({"runtime": "torch", "runtime_reported": {"encoder_runtime": "onnx-int8"}}) == "onnx-int8"
    assert compare.runtime_label({"runtime": "torch", "runtime_reported": None}) == "torch? (asked; not reported)"
    assert compare.runtime_label({"runtime": None}) == "default (not reported)"


# ---------------------------------------------------------------- load.py, floor and the breakdown

def test_load_collects_every_stage_and_the_queue_wait_per_response():
    from bench import load

    server = {k: [] for k in (*load.STAGES, "total", load.QUEUE_WAIT)}
    load.add_server_timings(server, {"encode": 2.0, "retrieve": 0.5, "rerank": 0.0, "decide": 0.5, "total": 4.0})
    load.add_server_timings(server, {"encode": 3.0, "retrieve": 0.5, "rerank": 0.0, "decide": 0.5, "total": 10.0})
    # the peer reports no `decide`: its other stages count, no queue wait is made up
    load.add_server_timings(server, {"encode": 1.0, "retrieve": 0.1, "rerank": 0.0, "total": 1.2})
    assert server["decide"] == [0.5, 0.5] and server["encode"] == [2.0, 3.0, 1.0] and len(server["total"]) == 3
    assert server[load.QUEUE_WAIT] == [1.0, 6.0]


def test_floor_answers_a_constant_match_shaped_like_faq_match():
    from fastapi.testclient import TestClient

    from app.api.schemas import MatchResponse
    from bench import floor

    client = TestClient(floor.create_app())
    assert client.get("/readyz").json()["ready"] is True
    r = client.post("/match", json={"query": "where is my invoice", "top_k": 5})
    assert r.status_code == 200 and r.content == floor.BODY
    body = MatchResponse.model_validate(r.json())  # what faq-match answers, field for field
    assert len(body.matches) == 5 and body.index_version == floor.INDEX_VERSION
    assert set(r.json()["timings_ms"]) == {"encode", "retrieve", "rerank", "decide", "total"}
    assert not any(r.json()["timings_ms"].values())
    assert 1500 <= len(floor.BODY) <= 3000  # a typical faq-match answer with five matches is ~2 KB
    # the request body is parsed: the floor pays for validation as faq-match does
    assert client.post("/match", json={"query": ""}).status_code == 422
    assert client.post("/match", json={"query": "x", "top_k": "5"}).status_code == 422


def test_floor_serves_with_the_uvicorn_options_of_faq_serve():
    from app.settings import Settings
    from cli.serve import HTTP_PROTOCOL, uvicorn_options

    options = uvicorn_options(Settings(max_connections=64, request_timeout_ms=20_000))
    assert options == {"http": HTTP_PROTOCOL, "limit_concurrency": 64, "timeout_graceful_shutdown": 25,
                       "proxy_headers": True, "forwarded_allow_ips": "127.0.0.1,::1"}
    assert "uvicorn_options(get_settings())" in (REPO / "bench" / "floor.py").read_text()


def faq_run(concurrency: int, p50: float, p99: float, total: float, stages: tuple, queue: float | None = None) -> dict:
    encode, retrieve, rerank, decide = stages
    srv = {"encode": encode, "retrieve": retrieve, "rerank": rerank, "decide": decide, "total": total}
    if queue is not None:
        srv["queue_wait"] = queue
    return {"concurrency": concurrency, "latency_ms": {"p50": p50, "p99": p99}, "server_timings_ms_median": srv}


def test_breakdown_splits_client_latency_into_floor_own_layers_and_stages():
    floor_run = {"concurrency": 1, "latency_ms": {"p50": 1.0, "p99": 2.0}}
    row = compare.breakdown_row(faq_run(1, 7.0, 15.0, 3.5, (2.5, 0.4, 0.0, 0.3), queue=0.25), floor_run)
    assert row == {"concurrency": 1, "client_p50": 7.0, "client_p99": 15.0, "server_total": 3.5,
                   "outside_pipeline": 3.5, "http_floor": 1.0, "own_layers": 2.5, "queue_wait": 0.25,
                   "encode": 2.5, "search": 0.4, "rerank": 0.0, "decide": 0.3}
    # without a per-response queue wait (an older load report): the difference of the medians
    assert compare.breakdown_row(faq_run(1, 7.0, 15.0, 3.5, (2.5, 0.4, 0.0, 0.3)))["queue_wait"] == 0.3
    # no floor: nothing is attributed to it; noise can make the own layers negative, kept as measured
    assert compare.breakdown_row(faq_run(8, 7.0, 9.0, 3.5, (2.5, 0.4, 0.0, 0.3)))["http_floor"] is None
    noisy = compare.breakdown_row(faq_run(8, 4.0, 9.0, 3.5, (2.5, 0.4, 0.0, 0.3)), floor_run)
    assert noisy["own_layers"] == -0.5
    missing = compare.breakdown_row({"concurrency": 1, "latency_ms": {"p50": None}, "server_timings_ms_median": {}})
    assert missing["outside_pipeline"] is None and missing["own_layers"] is None and missing["queue_wait"] is None


def test_breakdown_pairs_each_faq_match_system_with_the_floor_by_concurrency():
    floor = {"name": compare.FLOOR_NAME, "kind": compare.FLOOR,
             "runs": [{"concurrency": 1, "latency_ms": {"p50": 1.0}}, {"concurrency": 8, "failed": "load.py died"}]}
    systems = [
        {"name": "faq-match minilm", "kind": compare.FAQ_MATCH,
         "runs": [faq_run(1, 7.0, 15.0, 3.5, (2.5, 0.4, 0.0, 0.3), 0.3), faq_run(8, 20.0, 40.0, 15.0, (8, 1, 0, 1), 5)]},
        {"name": "faq-match mpnet+query-encoder", "kind": compare.FAQ_MATCH,
         "runs": [faq_run(1, 9.0, 18.0, 5.0, (4.0, 0.5, 0.0, 0.3), 0.2)]},
        {"name": "faq-match broken", "kind": compare.FAQ_MATCH, "failed": "build", "runs": []},
        floor,
        {"name": "peer minilm", "kind": compare.PEER, "runs": [faq_run(1, 5.0, 9.0, 3.0, (2.0, 0.1, 0.0, 0.0))]},
    ]
    breakdown = compare.build_breakdown(systems)
    assert [b["system"] for b in breakdown] == ["faq-match minilm", "faq-match mpnet+query-encoder"]
    assert all(b["floor"] == compare.FLOOR_NAME for b in breakdown)
    c1, c8 = breakdown[0]["runs"]
    assert (c1["outside_pipeline"], c1["http_floor"], c1["own_layers"]) == (3.5, 1.0, 2.5)
    assert c8["outside_pipeline"] == 5.0 and c8["http_floor"] is None and c8["own_layers"] is None
    assert breakdown[1]["runs"][0]["own_layers"] == 3.0
    # the floor and the peer are not compared with the peer
    assert [c["system"] for c in compare.build_comparisons(systems)] == [b["system"] for b in breakdown] + [
        "faq-match broken"]
    assert compare.build_breakdown([s for s in systems if s["kind"] != compare.FLOOR])[0]["floor"] is None

    lines = "\n".join(compare.render_breakdown(breakdown))
    assert "| faq-match minilm | 1 | 7.00 | 15.00 | 3.50 | 3.50 | 1.00 | 2.50 | 0.30 | 2.50 | 0.40 | 0.00 | 0.30 |" in lines
    assert "| faq-match minilm | 8 | 20.00 | 40.00 | 15.00 | 5.00 | – | – | 5 |" in lines
    assert compare.render_breakdown([]) == []


def test_system_names_and_the_query_encoder_option(tmp_path, kb_file):
    assert compare.system_name("mpnet", None, True) == "faq-match mpnet+query-encoder"
    assert compare.system_name("mpnet", "onnx-int8", True) == "faq-match mpnet+query-encoder/onnx-int8"
    base = ["--kb", str(kb_file), "--queries", str(kb_file)]
    args = compare.parse_args(base)
    assert args.floor is True and args.query_encoder is None
    assert compare.parse_args(base + ["--no-floor"]).floor is False
    with pytest.raises(SystemExit):  # not a query-encoder folder: refused before any build
        compare.parse_args(base + ["--query-encoder", str(tmp_path)])
    folder = tmp_path / "qe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architecture": "query-encoder"}))
    assert compare.parse_args(base + ["--query-encoder", str(folder)]).query_encoder == folder.resolve()
