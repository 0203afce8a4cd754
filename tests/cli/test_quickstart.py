"""`faq quickstart`: import, fine-tune only with labelled user queries (--dev), build with the kept encoder
(no serving here)."""
from __future__ import annotations

import json

from tests.helpers.kb import write_kb_jsonl
from tests.helpers.msem import FAQS, WIDE, WIDE_USER_QUERIES, write_queries


def _quickstart(monkeypatch, faq_env, kb, *extra):
    import models.encoders.load
    from cli.main import main

    # MiniLM as the default base keeps the test fast (mpnet is the same code path, 5x the compute)
    monkeypatch.setattr(models.encoders.load, "default_encoder_spec", lambda cache_dir=None: "minilm")
    return main(["quickstart", "--kb", str(kb), "--no-serve", "--epochs", "1", *extra])


def _built_encoder(faq_env) -> str:
    from index.artifacts import BuildRegistry

    registry = BuildRegistry(faq_env.index_dir)
    return registry.read_manifest(registry.current())["encoder_spec"]


def test_quickstart_without_dev_queries_serves_the_base_and_never_trains(tmp_path, monkeypatch, faq_env, capsys):
    """Held-out KB phrasings are written like the KB, not like users: without --dev there is no fair
    comparison, so nothing is trained."""
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    assert _quickstart(monkeypatch, faq_env, kb) == 0
    out = capsys.readouterr().out
    assert "$ faq train" not in out and not (faq_env.data_dir / "models").exists()
    line = next(row for row in out.splitlines() if row.startswith("serving the zero-shot minilm"))
    assert "no labelled user queries were given" in line and "--dev FILE" in line and "fair comparison" in line
    assert _built_encoder(faq_env) == "minilm"


def test_quickstart_with_dev_queries_trains_and_selects_on_them(tmp_path, monkeypatch, faq_env, capsys):
    from models.encoders.base import file_sha256

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    dev = write_queries(tmp_path / "dev.jsonl", WIDE_USER_QUERIES)
    assert _quickstart(monkeypatch, faq_env, kb, "--dev", str(dev)) == 0
    out = capsys.readouterr().out
    assert f"$ faq train msem --kb {kb} --dev {dev} " in out
    model_dir = faq_env.data_dir / "models" / f"msem-minilm-{file_sha256(kb)[:12]}-{file_sha256(dev)[:12]}"
    selection = json.loads((model_dir / "selection.json").read_text())
    assert selection["queries"] == "dev queries" and selection["n_queries"] == len(WIDE_USER_QUERIES)
    assert (selection["kept"] == "fine-tuned") == (selection["fine_tuned"] > selection["base"])
    assert f"kept the {'fine-tuned model' if selection['kept'] == 'fine-tuned' else 'zero-shot base'}" in out
    expected = str(model_dir.resolve()) if selection["kept"] == "fine-tuned" else "minilm"
    assert _built_encoder(faq_env) == expected
    # a second run on the same files reuses the measured choice; another dev file trains its own
    assert _quickstart(monkeypatch, faq_env, kb, "--dev", str(dev)) == 0
    out = capsys.readouterr().out
    assert "using the earlier fine-tuning" in out and "$ faq train" not in out
    other = write_queries(tmp_path / "other.jsonl", WIDE_USER_QUERIES[1:])
    assert _quickstart(monkeypatch, faq_env, kb, "--dev", str(other)) == 0
    assert "using the earlier fine-tuning" not in capsys.readouterr().out
    other_dir = faq_env.data_dir / "models" / f"msem-minilm-{file_sha256(kb)[:12]}-{file_sha256(other)[:12]}"
    assert json.loads((other_dir / "selection.json").read_text())["n_queries"] == len(WIDE_USER_QUERIES) - 1


def test_quickstart_refuses_a_bad_dev_file_before_anything_runs(tmp_path, monkeypatch, faq_env, capsys):
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    missing = tmp_path / "missing.jsonl"
    stray = write_queries(tmp_path / "stray.jsonl", [*WIDE_USER_QUERIES, ("book me a flight", "flights")])
    for dev, why in ((missing, "no such file"), (stray, "1 faq_id(s) not in the KB, e.g. ['flights']")):
        assert _quickstart(monkeypatch, faq_env, kb, "--dev", str(dev)) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith(f"error: --dev {dev}: {why}") and captured.err.count("\n") == 1
        assert "$ faq" not in captured.out  # nothing imported, trained or built
    assert _quickstart(monkeypatch, faq_env, kb, "--no-fine-tune", "--dev", str(stray)) == 2
    assert "--no-fine-tune" in capsys.readouterr().err


def test_quickstart_on_a_thin_kb_serves_the_base(tmp_path, monkeypatch, faq_env, capsys):
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)  # 6 FAQs: too few to learn paraphrases from
    dev = write_queries(tmp_path / "dev.jsonl", [(q, f) for f, qs in FAQS.items() for q in qs[:2]])
    assert _quickstart(monkeypatch, faq_env, kb, "--dev", str(dev)) == 0
    out = capsys.readouterr().out
    assert "kept the zero-shot base" in out and "too thin" in out
    assert _built_encoder(faq_env) == "minilm"


def test_quickstart_no_fine_tune_builds_with_the_default_encoder(tmp_path, monkeypatch, faq_env, capsys):
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)
    assert _quickstart(monkeypatch, faq_env, kb, "--no-fine-tune") == 0
    out = capsys.readouterr().out
    assert "$ faq train" not in out and "serving the zero-shot" not in out
    assert _built_encoder(faq_env) == "minilm"


def test_quickstart_default_kb_is_the_shipped_demo():
    """`faq quickstart` without --kb (README command 1) imports the demo FAQ that ships with `app`."""
    from cli.demo import DEMO_KB

    assert DEMO_KB.is_file() and DEMO_KB.parent.parent.name == "app"
