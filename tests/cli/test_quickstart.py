"""`faq quickstart`: import, fine-tune with selection, build with the kept encoder (no serving here)."""
from __future__ import annotations

import json

from tests.conftest import write_kb_jsonl
from tests.models.test_train_msem import FAQS, WIDE


def _quickstart(monkeypatch, faq_env, kb, *extra):
    import models.load
    from cli.main import main

    # MiniLM as the default base keeps the test fast (mpnet is the same code path, 5x the compute)
    monkeypatch.setattr(models.load, "default_encoder_spec", lambda cache_dir=None: "minilm")
    return main(["quickstart", "--kb", str(kb), "--no-serve", "--epochs", "1", *extra])


def test_quickstart_builds_with_the_encoder_the_selection_kept(tmp_path, monkeypatch, faq_env, capsys):
    from index.artifacts import BuildRegistry

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", WIDE)
    assert _quickstart(monkeypatch, faq_env, kb) == 0
    out = capsys.readouterr().out
    from models.encoder import file_sha256

    model_dir = faq_env.data_dir / "models" / f"msem-minilm-{file_sha256(kb)[:12]}"
    selection = json.loads((model_dir / "selection.json").read_text())
    assert selection["queries"] == "held-out KB phrasings" and selection["n_queries"] == 12
    assert f"kept the {'fine-tuned model' if selection['kept'] == 'fine-tuned' else 'zero-shot base'}" in out
    registry = BuildRegistry(faq_env.index_dir)
    manifest = registry.read_manifest(registry.current())
    expected = str(model_dir.resolve()) if selection["kept"] == "fine-tuned" else "minilm"
    assert manifest["encoder_spec"] == expected and manifest["n_faqs"] == len(WIDE)
    # a second run reuses the measured choice instead of training again; another KB trains its own
    assert _quickstart(monkeypatch, faq_env, kb) == 0
    assert "using the earlier fine-tuning" in capsys.readouterr().out
    other = write_kb_jsonl(tmp_path / "other.jsonl", {**WIDE, "extra": ["a brand new question", "another one"]})
    assert _quickstart(monkeypatch, faq_env, other) == 0
    assert "using the earlier fine-tuning" not in capsys.readouterr().out
    assert (faq_env.data_dir / "models" / f"msem-minilm-{file_sha256(other)[:12]}" / "selection.json").is_file()


def test_quickstart_on_a_thin_kb_serves_the_base(tmp_path, monkeypatch, faq_env, capsys):
    from index.artifacts import BuildRegistry

    kb = write_kb_jsonl(tmp_path / "kb.jsonl", FAQS)  # 6 FAQs: too few to learn paraphrases from
    assert _quickstart(monkeypatch, faq_env, kb) == 0
    out = capsys.readouterr().out
    assert "kept the zero-shot base" in out and "too thin" in out
    registry = BuildRegistry(faq_env.index_dir)
    assert registry.read_manifest(registry.current())["encoder_spec"] == "minilm"


def test_quickstart_default_kb_is_the_shipped_demo():
    """`faq quickstart` without --kb (README command 1) imports the demo FAQ that ships with `app`."""
    from cli.demo import DEMO_KB

    assert DEMO_KB.is_file() and DEMO_KB.parent.parent.name == "app"
