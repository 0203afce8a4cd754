"""`faq eval NAME ARGS`: every evaluation study under evaluation/ runs through the CLI, with its own arguments,
exactly as `python -m evaluation.NAME ARGS` does."""
from __future__ import annotations

import json

import pytest

from cli.eval import STUDIES
from cli.main import main


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_each_study_takes_its_own_arguments(name, capsys):
    with pytest.raises(SystemExit) as done:
        main(["eval", name, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


def test_every_study_module_is_listed():
    from pathlib import Path

    evaluation = Path(__file__).resolve().parents[2] / "evaluation"
    with_main = {p.stem for p in evaluation.glob("*.py")
                 if "\ndef main(" in p.read_text(encoding="utf-8") and "__main__" in p.read_text(encoding="utf-8")}
    assert with_main == {m.removeprefix("evaluation.") for m in STUDIES.values()}


def test_a_study_runs_and_writes_its_report(tmp_path, capsys):
    assert main(["eval", "language-id", "--sets", "energy", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "language_id.json").read_text())
    assert report["realistic"]["queries"] == 1200  # the energy set alone, as --sets asked


def test_other_commands_still_refuse_arguments_they_do_not_know(capsys):
    with pytest.raises(SystemExit) as done:
        main(["kb", "list", "--no-such-flag"])
    assert done.value.code == 2 and "--no-such-flag" in capsys.readouterr().err
