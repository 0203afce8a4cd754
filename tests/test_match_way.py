"""The files one `/match` passes through (scripts/trace_match.py, a traced request) are the ones
docs/architecture.md lists, in its order, and stay few."""
from __future__ import annotations

import json
import re
from pathlib import Path

from scripts.trace_match import main

ROOT = Path(__file__).resolve().parents[1]


def documented_way() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text[text.index("One `/match` on its way, in order"):text.index("What they consult on the way")]
    return re.findall(r"^\d+\. `([^`]+)`", block, re.M)


def test_the_way_of_one_match_is_the_documented_one(tmp_path):
    out = tmp_path / "way.json"
    assert main(["--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["way"] == documented_way()
    assert len(report["way"]) <= 10
    assert "index/retriever.py" in report["ran"] and "app/match/decider.py" in report["ran"]
