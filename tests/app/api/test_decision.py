"""Decisions through the served app: the cross-KB model's score, answer / clarify / abstain, the expected
precision of the build's table, FAQ_TARGET_PRECISION and FAQ_SCORING, on a real MiniLM build."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.api.main import create_app
from app.match.decider import Decider
from app.settings import Settings
from index.candidates import FaqMatch
from index.decision import load_model
from tests.helpers.api import build, make_settings, make_store


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):  # noqa: F811
    settings = make_settings(tmp_path_factory.mktemp("decision"))
    store = make_store(settings)
    manifest = build(store, encoder, settings)
    return settings, store, manifest


def _client(built, encoder, **overrides):  # noqa: F811
    settings, store, _ = built
    return TestClient(create_app(settings.model_copy(update=overrides), store=store, encoder=encoder))


def test_the_build_stores_references_and_the_replay(built):
    _, _, manifest = built
    block = manifest["decision"]
    assert block["background"]["n"] >= 500
    ref = block["references"]["1/0.60"]  # answers are evidence: pool 1, the default answer weight
    assert ref["n_background"] == block["background"]["n"] and len(ref["heldout"]) == 101
    assert ref["heldout"][50] > ref["background"][50]
    assert block["replay"]["1/0.60"]["n_heldout"] > 0 and block["model"]["trained_on"]


def test_match_answers_with_the_models_probability_and_decision(built, encoder):  # noqa: F811
    with _client(built, encoder) as client:
        body = client.post("/match", json={"query": "I forgot my password, how can I reset it?"}).json()
        assert body["decision"] == "answer" and body["answer"]["faq_id"] == "reset_password"
        assert body["threshold"] == 0.5 and 0.5 <= body["expected_precision"] <= 1.0
        scores = [m["score"] for m in body["matches"]]
        assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
        assert body["answer"]["score"] == scores[0] >= 0.5 and body["options"] == []
        assert "decide" in body["timings_ms"]

        off = client.post("/match", json={"query": "who won the football world cup in 1966"}).json()
        assert off["decision"] in ("abstain", "clarify") and off["answer"] is None
        assert off["matches"][0]["score"] < 0.5
        # an old client's view: `answer` null and the matches still there
        assert off["matches"] and set(off["matches"][0]) == {"faq_id", "question", "answer", "score", "metadata",
                                                             "tags", "source", "follow_ups"}


def test_a_request_threshold_still_wins(built, encoder):  # noqa: F811
    with _client(built, encoder) as client:
        body = client.post("/match", json={"query": "can I pay by PayPal", "threshold": 1.0}).json()
        assert body["threshold"] == 1.0 and body["answer"] is None and body["decision"] in ("abstain", "clarify")


def test_target_precision_picks_the_threshold_from_the_builds_table(built, encoder):  # noqa: F811
    with _client(built, encoder, target_precision=0.9, admin_token="decision-admin-token-of-32-chars-x") as client:
        ready = client.get("/readyz").json()
        decision = ready["decision"]
        assert decision["scoring"] == "model" and decision["target_precision"] == 0.9
        table = decision["table"]
        reaching = [r["threshold"] for r in table if (r["expected_precision"] or 0) >= 0.9]
        assert decision["threshold"] == (reaching[0] if reaching else 1.0)
        body = client.post("/match", json={"query": "how long does shipping take"}).json()
        assert body["threshold"] == decision["threshold"]
        assert body["expected_precision"] == decision["expected_precision"]
        info = client.get("/admin/index", headers={"Authorization": "Bearer decision-admin-token-of-32-chars-x"}).json()
        assert info["decision"]["table"] == table


def test_the_assumed_out_of_scope_share_moves_the_table(built, encoder):  # noqa: F811
    with _client(built, encoder, oos_share=0.0) as client:
        none = client.get("/readyz").json()["decision"]["table"]
    with _client(built, encoder, oos_share=0.6) as client:
        many = client.get("/readyz").json()["decision"]["table"]
    assert [r["threshold"] for r in none] == [r["threshold"] for r in many]
    assert any(a["answer_rate"] != b["answer_rate"] for a, b in zip(none, many))


def test_scoring_calibration_keeps_the_builds_cosine_curve(built, encoder):  # noqa: F811
    with _client(built, encoder, scoring="calibration") as client:
        body = client.post("/match", json={"query": "I forgot my password, how can I reset it?"}).json()
        assert body["expected_precision"] is None and body["decision"] == "answer"
        assert client.get("/readyz").json()["decision"]["scoring"] == "calibration"


@pytest.mark.parametrize("field,value", [("target_precision", 0.0), ("target_precision", 1.0),
                                         ("target_precision", 1.5), ("oos_share", 1.0), ("oos_share", -0.1),
                                         ("scoring", "magic"), ("default_threshold", 2.0)])
def test_bad_decision_settings_are_refused_naming_the_setting(tmp_path, field, value):
    with pytest.raises(ValidationError, match=field):
        Settings(data_dir=tmp_path, **{field: value})


def _m(faq_id: str, score: float) -> FaqMatch:
    return FaqMatch(faq_id, faq_id, "a", score, score)


def test_clarify_when_two_or_three_plausible_faqs_together_reach_the_threshold():
    d = Decider(load_model())
    assert d.decide([_m("a", 0.7), _m("b", 0.2)], 0.5, None).kind == "answer"
    clarify = d.decide([_m("a", 0.35), _m("b", 0.3), _m("c", 0.05)], 0.5, None)
    assert clarify.kind == "clarify" and [m.faq_id for m in clarify.options] == ["a", "b"]
    assert d.decide([_m("a", 0.3), _m("b", 0.1)], 0.5, None).kind == "abstain"  # b is not plausible
    assert d.decide([_m("a", 0.2), _m("b", 0.2)], 0.5, None).kind == "abstain"  # together not enough
    assert d.decide([], 0.5, None).kind == "abstain"


def test_a_clarify_pick_is_recorded_as_feedback(built, encoder):  # noqa: F811
    with _client(built, encoder) as client:
        body = client.post("/match", json={"query": "money", "threshold": 1.0}).json()
        pick = body["matches"][1]["faq_id"]
        r = client.post("/feedback", json={"request_id": body["request_id"], "faq_id": pick})
        assert r.status_code == 200 and r.json()["recorded"]


def test_a_decision_model_file_is_served_and_a_missing_one_stops_start_up(built, encoder, tmp_path):  # noqa: F811
    import json

    from index.decision import MODEL_FILE

    model = json.loads(MODEL_FILE.read_text())
    model["meta"]["kb_labels"] = 42
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model))
    with _client(built, encoder, decision_model=path) as client:
        assert client.get("/readyz").json()["decision"]["model_labels"] == 42
        assert client.post("/match", json={"query": "how long does shipping take"}).json()["decision"] == "answer"
    with pytest.raises(ValueError, match="FAQ_DECISION_MODEL"):
        with _client(built, encoder, decision_model=tmp_path / "missing.json"):
            pass


def test_a_served_answer_weight_between_the_stored_ones_uses_the_nearest(built, encoder):  # noqa: F811
    _, _, manifest = built
    assert "1/0.50" not in manifest["decision"]["references"] and "1/0.60" in manifest["decision"]["references"]
    with _client(built, encoder, answer_weight=0.5) as client:
        decision = client.get("/readyz").json()["decision"]
        assert decision["scoring"] == "model" and decision["table"]
        body = client.post("/match", json={"query": "I forgot my password, how can I reset it?"}).json()
        assert body["decision"] == "answer" and body["expected_precision"] is not None


def test_the_builds_own_traffic_replaces_the_replayed_table(tmp_path, encoder):  # noqa: F811
    """With MIN_TRAFFIC logged queries of the served build, the table is theirs: the share of queries whose
    score reaches each threshold and the mean of those scores; the target precision then picks from it."""
    from datetime import datetime, timezone

    from index.decision import MIN_TRAFFIC

    settings = make_settings(tmp_path)
    store = make_store(settings)
    manifest = build(store, encoder, settings)
    built = (settings, store, manifest)  # a log of its own: the other tests' queries are not in it
    scores = [0.95] * 100 + [0.6] * 60 + [0.2] * 40  # MIN_TRAFFIC rows of this build on the ann arm
    assert len(scores) == MIN_TRAFFIC
    now = datetime.now(timezone.utc)
    store.log_queries([{"request_id": f"traffic-{i}", "query": f"q{i}", "faq_id": None, "score": s, "arm": "ann",
                        "index_version": manifest["version"], "created_at": now} for i, s in enumerate(scores)]
                      + [{"request_id": "other-arm", "query": "x", "faq_id": None, "score": 0.0, "arm": "ann+rerank",
                          "index_version": manifest["version"], "created_at": now}])
    with _client(built, encoder, target_precision=0.9) as client:
        decision = client.get("/readyz").json()["decision"]
        assert decision["traffic_queries"] == MIN_TRAFFIC
        rows = {r["threshold"]: r for r in decision["table"]}
        assert rows[0.5]["answer_rate"] == pytest.approx(0.8) and rows[0.5]["expected_precision"] == pytest.approx(
            (100 * 0.95 + 60 * 0.6) / 160, abs=1e-4)
        assert rows[0.7]["expected_precision"] == pytest.approx(0.95) and decision["threshold"] == 0.65
        body = client.post("/match", json={"query": "how long does shipping take"}).json()
        assert body["threshold"] == 0.65 and body["expected_precision"] == pytest.approx(0.95)


def test_an_ambiguous_question_gets_clarify_with_both_faqs_and_the_pick_is_feedback(tmp_path, encoder):  # noqa: F811
    """Two FAQs that differ only in how a refund is paid, and a user who just types "refund"."""
    from app.store import KbRecord
    from tests.helpers.api import KB

    kb = {k: v for k, v in KB.items() if k != "refund"}
    kb["refund_card"] = ("Card refunds reach your card within 5 days.",
                         ["How do I get a refund to my card?", "Refund to my credit card"])
    kb["refund_voucher"] = ("Refunds as a voucher are issued at once.",
                            ["Can I get my refund as a voucher?", "Refund as store credit"])
    records = [KbRecord(f, q, a if i == 0 else None, [] if i == 0 else None)
               for f, (a, qs) in kb.items() for i, q in enumerate(qs)]
    settings = make_settings(tmp_path)
    store = make_store(settings, records)
    build(store, encoder, settings)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        body = client.post("/match", json={"query": "refund", "threshold": 0.6}).json()
        assert body["decision"] == "clarify" and body["answer"] is None
        assert {o["faq_id"] for o in body["options"]} == {"refund_card", "refund_voucher"}
        assert sum(o["score"] for o in body["options"]) >= 0.6 > body["options"][0]["score"]
        r = client.post("/feedback", json={"request_id": body["request_id"], "faq_id": "refund_voucher"})
        assert r.status_code == 200
    from app.release.labels import feedback_labels

    assert ("refund", "refund_voucher") in feedback_labels(store.read_query_log(with_feedback=True))
