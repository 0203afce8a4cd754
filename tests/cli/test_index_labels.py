"""A KB's own labels through the CLI: `faq index calibrate` refits the decision model on them (and the
service serves it), and `faq index build` refuses to make a build current that matches them worse."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.release.labels import feedback_labels
from tests.helpers.kb import INDEX_TEST_FAQS


def _write_kb(path, faqs, swap: tuple[str, str] | None = None):
    """INDEX_TEST_FAQS as a KB file; `swap`: the two FAQs' phrasings trade places (a bad edit)."""
    rows = []
    for faq_id, answer, questions in faqs:
        owner = faq_id
        if swap and faq_id in swap:
            owner = swap[1] if faq_id == swap[0] else swap[0]
        rows += [{"faq_id": owner, "question": q, "answer": answer, "tags": ["t"]} for q in questions]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _labels(path, faqs, n=None):
    """Each FAQ's first phrasing, lower-cased and reworded a little, as a labelled user query."""
    rows = [{"query": f"hi, {qs[0].lower().rstrip('?')} please", "faq_id": f} for f, _, qs in faqs[:n]]
    rows.append({"query": "what's the weather in lisbon tomorrow", "faq_id": None})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def built(tmp_path, faq_env, monkeypatch):
    from cli.main import main

    monkeypatch.setenv("FAQ_ENCODER", "minilm")
    from app.settings import get_settings

    get_settings.cache_clear()
    kb = _write_kb(tmp_path / "kb.jsonl", INDEX_TEST_FAQS)
    assert main(["kb", "import", str(kb)]) == 0
    assert main(["index", "build", "--no-progress", "--no-lexical", "--n-trees", "5"]) == 0
    return get_settings(), tmp_path


def test_calibrate_refits_on_dev_labels_and_the_service_serves_it(built, capsys):
    from app.api.main import create_app
    from cli.main import main

    settings, tmp = built
    dev = _labels(tmp / "dev.jsonl", INDEX_TEST_FAQS)
    capsys.readouterr()
    assert main(["index", "calibrate", "--dev", str(dev), "--dry-run"]) == 0
    assert "5-fold on the labels" in capsys.readouterr().out and not settings.kb_decision_model.exists()
    assert main(["index", "calibrate", "--dev", str(dev), "--strength", "10"]) == 0
    out = capsys.readouterr().out
    assert f"{len(INDEX_TEST_FAQS) + 1} labels (1 out of scope)" in out and "refitted" in out
    written = json.loads(settings.kb_decision_model.read_text())
    assert written["meta"]["kb_labels"] == len(INDEX_TEST_FAQS) + 1 and written["meta"]["prior_strength"] == 10
    with TestClient(create_app(settings)) as client:
        decision = client.get("/readyz").json()["decision"]
        assert decision["model_labels"] == len(INDEX_TEST_FAQS) + 1
        body = client.post("/match", json={"query": "i forgot my password"}).json()
        assert body["matches"][0]["faq_id"] == "reset-password"
    assert main(["index", "calibrate", "--reset"]) == 0 and not settings.kb_decision_model.exists()


def test_calibrate_refuses_bad_labels_and_writes_nothing(built, capsys):
    from cli.main import main

    settings, tmp = built
    assert main(["index", "calibrate"]) == 1
    assert "no labels" in capsys.readouterr().err
    bad = tmp / "bad.jsonl"
    bad.write_text(json.dumps({"query": "hello there", "faq_id": "no-such-faq"}) + "\n")
    assert main(["index", "calibrate", "--dev", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "no-such-faq" in err and str(bad) in err
    assert main(["index", "calibrate", "--dev", str(tmp / "missing.jsonl")]) == 1
    assert "missing.jsonl" in capsys.readouterr().err
    assert main(["index", "calibrate", "--dev", str(_labels(tmp / "d.jsonl", INDEX_TEST_FAQS)), "--strength", "0"]) == 1
    assert "--strength" in capsys.readouterr().err
    assert not settings.kb_decision_model.exists()


def test_a_build_that_matches_the_labels_worse_is_not_made_current(built, capsys):
    from cli.main import main
    from index.artifacts import BuildRegistry

    settings, tmp = built
    registry = BuildRegistry(settings.index_dir)
    good = registry.current()
    labels = _labels(tmp / "labels.jsonl", INDEX_TEST_FAQS)
    swapped = _write_kb(tmp / "swapped.jsonl", INDEX_TEST_FAQS, swap=("reset-password", "change-email"))
    assert main(["kb", "import", str(swapped), "--sync"]) == 0
    capsys.readouterr()
    assert main(["index", "build", "--no-progress", "--no-lexical", "--n-trees", "5", "--dev", str(labels)]) == 1
    captured = capsys.readouterr()
    assert "not made current" in captured.err and registry.current() == good
    worse = registry.versions()[-1]
    assert worse != good
    assert main(["index", "build", "--no-progress", "--no-lexical", "--n-trees", "5", "--dev", str(labels),
                 "--force"]) == 0
    assert registry.current() not in (good, worse)


def test_feedback_rows_become_labels():
    rows = [
        {"query": "a", "faq_id": "x", "feedback_correct": True, "feedback_faq_id": None},  # served and right
        {"query": "b", "faq_id": "x", "feedback_correct": False, "feedback_faq_id": "y"},  # the pick: y
        {"query": "c", "faq_id": None, "feedback_correct": None, "feedback_faq_id": "z"},  # a clarify option picked
        {"query": "d", "faq_id": None, "feedback_correct": True, "feedback_faq_id": None},  # rightly abstained
        {"query": "e", "faq_id": "x", "feedback_correct": False, "feedback_faq_id": None},  # wrong, right one unknown
        {"query": "f", "faq_id": "x", "feedback_correct": None, "feedback_faq_id": None},  # no feedback
    ]
    assert feedback_labels(rows) == [("a", "x"), ("b", "y"), ("c", "z"), ("d", None)]


def test_feedback_picks_through_the_service_become_calibrate_labels(built, capsys):
    from app.api.main import create_app
    from cli.main import main

    settings, _ = built
    with TestClient(create_app(settings)) as client:
        for faq_id, _, questions in INDEX_TEST_FAQS[:6]:
            body = client.post("/match", json={"query": questions[-1].lower(), "threshold": 1.0}).json()
            assert body["answer"] is None  # nothing reaches 1.0: the user picks among what was shown
            r = client.post("/feedback", json={"request_id": body["request_id"], "faq_id": faq_id})
            assert r.status_code == 200, r.text
    capsys.readouterr()
    assert main(["index", "calibrate", "--dry-run"]) == 0
    assert "6 labels (0 out of scope)" in capsys.readouterr().out
    assert main(["index", "calibrate", "--dry-run", "--no-feedback"]) == 1  # and no --dev: nothing to fit


def test_index_list_shows_the_table_of_the_builds_own_traffic(built, capsys):
    from datetime import datetime, timezone

    from cli.main import main
    from index.artifacts import BuildRegistry
    from index.decision import MIN_TRAFFIC
    from migrations.runner import migrated_store

    settings, _ = built
    version = BuildRegistry(settings.index_dir).current()
    store = migrated_store(settings)
    store.log_queries([{"request_id": f"r{i}", "query": f"q{i}", "faq_id": None, "score": 0.9 if i % 2 else 0.1,
                        "arm": "ann", "index_version": version, "created_at": datetime.now(timezone.utc)}
                       for i in range(MIN_TRAFFIC)])
    store.close()
    capsys.readouterr()
    assert main(["index", "list"]) == 0
    out = capsys.readouterr().out
    assert f"from its {MIN_TRAFFIC} latest logged queries" in out
    row = next(line for line in out.splitlines() if line.split()[:1] in (["0.50"], ["*"]) and "0.50" in line)
    assert row.split()[-2:] == ["0.900", "0.500"]  # half the queries reach 0.5, at a mean score of 0.9


def test_calibrate_stacks_the_configured_stage_and_the_rerank_arm_serves_the_stack(built, capsys, monkeypatch):
    """With FAQ_RERANKER set, the stage's own probability becomes an input of the decision model, fitted on
    the labels: P = sigmoid(a * logit p_stage + b * logit p_model + c), served on the `+rerank` arm."""
    import copy

    import numpy as np

    from app.api.main import create_app
    from models.scoring import stacked
    from app.settings import get_settings
    from cli.main import main
    from tests.helpers.stages import siamese_folder

    settings, tmp = built
    folder = siamese_folder(tmp / "siamese")
    monkeypatch.setenv("FAQ_RERANKER", str(folder))
    get_settings.cache_clear()
    settings = get_settings()
    dev = _labels(tmp / "dev.jsonl", INDEX_TEST_FAQS)
    capsys.readouterr()
    assert main(["index", "calibrate", "--dev", str(dev)]) == 0
    assert "stacked with the model on" in capsys.readouterr().out
    [(stage_id, coefs)] = json.loads(settings.kb_decision_model.read_text())["meta"]["stages"].items()
    with TestClient(create_app(settings)) as client:
        service = client.app.state.service
        assert service.stages[0].id == stage_id
        query = "i forgot my password"
        plain = client.post("/match", json={"query": query, "top_k": 5}).json()
        staged = client.post("/match", json={"query": query, "top_k": 5, "rerank": True}).json()
        assert staged["arm"] == "ann+rerank" and staged["expected_precision"] is None
        # the stack recomputed from the stage alone and the model's probabilities of the plain arm
        model_p = {m["faq_id"]: m["score"] for m in plain["matches"]}
        pure = copy.copy(service.stages[0])
        pure.weight = 1.0
        from index.candidates import FaqMatch

        head = [FaqMatch(m["faq_id"], m["question"], m["answer"], m["score"], 0.0) for m in plain["matches"]]
        p_stage = pure.rescore(query, head)
        expected = stacked(coefs, np.asarray(p_stage), np.array([model_p[m.faq_id] for m in head]))
        got = {m["faq_id"]: m["score"] for m in staged["matches"]}
        for m, e in zip(head, expected):
            assert got[m.faq_id] == pytest.approx(float(e), abs=1e-4)


def test_fit_stack_learns_how_much_the_stage_adds():
    from models.scoring import fit_stack, stacked
    import numpy as np

    rng = np.random.default_rng(0)
    right = rng.random(2000) < 0.5
    p_model = np.clip(np.where(right, 0.6, 0.4) + 0.1 * rng.normal(size=2000), 0.01, 0.99)
    p_stage = np.clip(np.where(right, 0.9, 0.1) + 0.05 * rng.normal(size=2000), 0.01, 0.99)  # the stage knows more
    a, b, c = fit_stack(p_stage, p_model, right)
    assert a > b > 0
    assert ((stacked((a, b, c), p_stage, p_model) >= 0.5) == right).mean() > 0.95
    with pytest.raises(ValueError, match="right and wrong"):
        fit_stack(p_stage[:3], p_model[:3], np.ones(3, dtype=bool))
