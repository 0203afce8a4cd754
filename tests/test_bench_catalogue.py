"""`python -m bench`: every benchmark is in the catalogue, and `list` names each with its latest result."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from bench.__main__ import CATALOGUE, RESULTS, latest

REPO = Path(__file__).resolve().parents[1]


def _has_main(path: Path) -> bool:
    return any(isinstance(node, ast.FunctionDef) and node.name == "main"
               for node in ast.parse(path.read_text(encoding="utf-8")).body)


def test_every_benchmark_is_catalogued():
    modules = {p.stem for p in (REPO / "bench").glob("*.py") if p.stem != "__main__" and _has_main(p)}
    assert modules == set(CATALOGUE)


def test_list_names_each_benchmark_with_its_latest_result():
    out = subprocess.run([sys.executable, "-m", "bench", "list"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in CATALOGUE:
        assert any(line.startswith(f"{name} ") for line in out.stdout.splitlines()), name
    assert "latest: bench/results/security-probe" in out.stdout
    found = latest("security_probe")
    assert found is not None and found.parent == RESULTS


def test_run_refuses_an_unknown_benchmark():
    out = subprocess.run([sys.executable, "-m", "bench", "run", "no-such-bench"], cwd=REPO, capture_output=True,
                         text=True)
    assert out.returncode == 2 and "python -m bench list" in out.stderr
