"""Docs stay true to the repository: every relative Markdown link names a file that exists and, with an
`#anchor`, a heading that exists in it; docs/architecture.md's layout diagram is the one drawn from the code."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SKIP = {".venv", "var", "runs", ".git", "node_modules"}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    return sorted(p for p in REPO.rglob("*.md") if not SKIP & set(p.relative_to(REPO).parts))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than '-' and '_' dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path):
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(REPO)}: " + "; ".join(broken)


def test_architecture_diagram_is_drawn_from_the_code():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "draw_architecture.py"), "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
