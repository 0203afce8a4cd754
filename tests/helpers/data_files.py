"""Reading the hand-written data sets under evaluation/data in their tests: every line a JSON object."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def read_jsonl(path: Path) -> list[dict]:
    """The file's objects; fails the test naming file and line for a blank line, bad JSON or a non-object."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        assert line.strip(), f"{path.name}:{n}: blank line"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:  # pragma: no cover - the message is the point
            pytest.fail(f"{path.name}:{n}: invalid JSON: {e}")
        assert isinstance(row, dict), f"{path.name}:{n}: not an object"
        rows.append(row)
    return rows
