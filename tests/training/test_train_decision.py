"""The decision model's trainer (training/decision.py): `faq train decision` and `python -m evaluation.decision
train` write the same model from the same cache, and caches pickled before the trainer moved still load."""
from __future__ import annotations

import json
import pickle
import sys

import numpy as np

from index.decision import N_QUANTILES, Candidate, DecisionModel, Reference


def write_cache(folder, names=("energy", "council", "grocery")) -> None:
    """Seeded candidate lists of three KBs, pickled as `collect` pickles them."""
    from training.decision import KbData

    rng = np.random.default_rng(3)
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        ref = Reference(np.sort(rng.random(N_QUANTILES)) * 0.5, 0.4 + np.sort(rng.random(N_QUANTILES)) * 0.5, 50, 40)
        queries = []
        for i in range(30):
            scores = np.sort(rng.random(int(rng.integers(1, 6))))[::-1]
            cands = [Candidate(f"f{int(rng.integers(0, 9))}", float(s), float(s), None, 2, frozenset({f"w{i % 4}"}))
                     for s in scores]
            gold = cands[0].faq_id if rng.random() < 0.6 else (None if rng.random() < 0.5 else "f9")
            queries.append((f"w{i % 4} query {i}", cands, gold, "test", float(scores[0])))
        kb = KbData(name, "mpnet", 1, 0.6, ref, queries, [])
        (folder / f"{name}.mpnet.pkl").write_bytes(pickle.dumps(kb))


def test_faq_train_decision_writes_what_the_evaluation_entry_writes(tmp_path, monkeypatch, capsys):
    from cli.main import main as faq
    from evaluation.decision import main as evaluation_decision

    cache = tmp_path / "cache"
    write_cache(cache)
    options = ["--cache", str(cache), "--kbs", "energy,council,grocery", "--rerank", "--recalibrate"]
    monkeypatch.setattr(sys, "argv", ["faq", "train", "decision", *options, "--out", str(tmp_path / "a.json")])
    assert faq(["train", "decision", *options, "--out", str(tmp_path / "a.json")]) == 0
    printed = capsys.readouterr().out
    assert evaluation_decision(["train", *options, "--out", str(tmp_path / "b.json")]) == 0
    assert capsys.readouterr().out == printed
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert a["meta"].pop("command").startswith("faq train decision --cache")
    assert b["meta"].pop("command").startswith("faq eval decision train --cache")
    assert a == b
    model = DecisionModel.from_json(a)
    assert model.rerank and model.meta["trained_on"] == ["council", "energy", "grocery"]
    assert model.recalibration != (1.0, 0.0)


def test_caches_naming_the_evaluation_module_still_load(tmp_path, monkeypatch):
    """`python -m evaluation.decision collect` pickled `KbData` as `__main__.KbData` or, imported, as
    `evaluation.decision.KbData`, before the class moved to training/decision.py."""
    import evaluation.decision  # noqa: F401  (pickling by that name needs the module loaded)
    from training.decision import KbData, load_kbs

    for module in ("evaluation.decision", "__main__"):
        with monkeypatch.context() as m:
            m.setattr(KbData, "__module__", module)
            m.setattr(sys.modules[module], "KbData", KbData, raising=False)
            write_cache(tmp_path / module)
        assert module.encode() in (tmp_path / module / "energy.mpnet.pkl").read_bytes()
        kbs = load_kbs(tmp_path / module, ["energy", "council", "grocery"], "mpnet")
        assert [type(k) for k in kbs] == [KbData] * 3 and len(kbs[0].queries) == 30
