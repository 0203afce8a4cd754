"""Writing a bench's results: the JSON report and its Markdown summary side by side."""
from __future__ import annotations

import json
from pathlib import Path


def write_report(out: Path, report: dict, markdown: str) -> None:
    """A bench's two reports: `out` with a .json suffix and with .md; the Markdown is printed too."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown)
    print(markdown)
