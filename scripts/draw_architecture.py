"""Draw the package layout from the code: docs/architecture.png and the text diagram in docs/architecture.md.

The layers come from the import-linter layers contract in pyproject.toml, the boxes from the packages on
disk (each package's folders and modules; the PNG adds line counts), and each box's "imports ->" line from
the imports grimp finds (how many module-to-module imports go from one package to another). Run after
adding, moving or removing a module (tests/test_doc_links.py checks the text diagram):

    .venv/bin/python scripts/draw_architecture.py          # rewrites the PNG, prints the text diagram
    .venv/bin/python scripts/draw_architecture.py --check  # exit 1 when docs/architecture.md's diagram is stale
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
BEGIN, END = "<!-- layout:begin (scripts/draw_architecture.py) -->", "<!-- layout:end -->"


def layers() -> list[list[str]]:
    """Top to bottom; packages in one layer (`a | b`) never import each other."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers")
    rows = [[p.strip() for p in layer.split("|")] for layer in contract["layers"]]
    rows.append(["migrations"])
    return rows


def lines_of(path: Path) -> int:
    if path.is_file():
        return sum(1 for _ in path.open(encoding="utf-8"))
    return sum(lines_of(p) for p in path.rglob("*.py"))


def parts(package: str) -> list[tuple[str, int]]:
    """A package's folders (with their own sub-packages) and modules, by size."""
    root = REPO / package
    out = []
    for child in sorted(root.iterdir()):
        if child.name.startswith(("_", ".")):
            continue
        if child.is_dir() and (child / "__init__.py").exists():
            out.append((child.name + "/", lines_of(child)))
        elif child.suffix == ".py":
            out.append((child.stem, lines_of(child)))
    return sorted(out, key=lambda item: -item[1])


def package_imports(packages: list[str]) -> Counter:
    import grimp

    sys.path.insert(0, str(REPO))
    graph = grimp.build_graph(*packages)
    edges: Counter = Counter()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = module.split(".")[0], imported.split(".")[0]
            if a != b and b in packages:
                edges[(a, b)] += 1
    return edges


def packages_order(rows: list[list[str]]):
    order = {p: i for i, p in enumerate(p for row in rows for p in row)}
    return lambda package: order.get(package, len(order))


def sub_lines(folder: str, depth: int = 1) -> list[str]:
    """One indented line per sub-package (two levels deep): its folders and modules."""
    out = []
    for name, _ in sorted(parts(folder)):
        if name.endswith("/") and depth <= 2:
            inner = f"{folder}/{name.rstrip('/')}"
            if not parts(inner):
                continue
            out.append(f"{'  ' * depth}{inner}/: {', '.join(sorted(n for n, _ in parts(inner)))}")
            out.extend(sub_lines(inner, depth + 1))
    return out


def text_diagram(rows: list[list[str]], edges: Counter) -> str:
    out = ["```"]
    for row in rows:
        cells = []
        for package in row:  # names only: the checked text must not change with every edit of a file
            names = ", ".join(sorted(name for name, _ in parts(package)))
            cells.append(f"{package}/: {names}")
        out.append("  |  ".join(cells))
        for package in row:
            out.extend(sub_lines(package))
        targets = sorted({b for (a, b) in edges if a in row})
        if targets and row is not rows[-1]:
            out.append(f"    imports -> {', '.join(targets)}")
    out.append("```")
    return "\n".join(out)


def draw(rows: list[list[str]], edges: Counter, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    width, row_h, gap = 16.0, 1.15, 0.75
    fig_h = len(rows) * (row_h + gap)
    fig, ax = plt.subplots(figsize=(width, fig_h))
    ax.set_xlim(0, width + 0.1)
    ax.set_ylim(0, fig_h)
    ax.axis("off")
    centre: dict[str, tuple[float, float, float, float]] = {}
    for r, row in enumerate(rows):
        y = fig_h - (r + 1) * (row_h + gap) + gap / 2
        box_w = (width - 0.4 - 0.3 * (len(row) - 1)) / len(row)
        for c, package in enumerate(row):
            x = 0.2 + c * (box_w + 0.3)
            ax.add_patch(FancyBboxPatch((x, y), box_w, row_h, boxstyle="round,pad=0.02",
                                        facecolor="#eef3fb" if package != "migrations" else "#f4f4f4",
                                        edgecolor="#35608f", linewidth=1.2))
            ax.text(x + 0.12, y + row_h - 0.22, f"{package}/  ({lines_of(REPO / package):,} lines)",
                    fontsize=11, fontweight="bold", va="top")
            items = [f"{name} {n}" for name, n in parts(package)]
            per_line = max(20, int(box_w / 0.075))  # monospace characters that fit the box at 7.5 pt
            text, line = [], ""
            for item in items:
                if len(line) + len(item) + 5 > per_line:
                    text.append(line)
                    line = ""
                line = f"{line}  ·  {item}" if line else item
            text.append(line)
            ax.text(x + 0.12, y + row_h - 0.55, "\n".join(text[:4]), fontsize=7.5, va="top", family="monospace")
            centre[package] = (x + box_w / 2, y, y + row_h, box_w)
    # one line per box instead of arrows: which packages below it imports, and how many module imports
    order = packages_order(rows)
    for package, (x_mid, y, _top, box_w) in centre.items():
        targets = sorted((b for (a, b) in edges if a == package), key=order)
        if targets:
            line = "imports ->  " + "   ".join(f"{b} ({edges[(package, b)]})" for b in targets)
            ax.text(x_mid - box_w / 2 + 0.12, y + 0.12, line, fontsize=7.5, color="#35608f", va="bottom")
    ax.annotate("", xy=(width - 0.05, 0.3), xytext=(width - 0.05, fig_h - 0.4),
                arrowprops=dict(arrowstyle="->", color="#35608f", lw=1.5))
    ax.set_title("faq-match: packages by layer (imports point down; drawn from the code)", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/architecture.md's diagram is stale")
    args = parser.parse_args(argv)
    rows = layers()
    packages = [p for row in rows for p in row]
    edges = package_imports(packages)
    diagram = text_diagram(rows, edges)
    doc = DOC.read_text(encoding="utf-8")
    start, stop = doc.find(BEGIN), doc.find(END)
    current = doc[start + len(BEGIN): stop].strip() if start >= 0 and stop > start else None
    if args.check:
        if current != diagram.strip():
            print("docs/architecture.md: the layout diagram is stale; run scripts/draw_architecture.py")
            return 1
        return 0
    if current is not None:
        DOC.write_text(doc[: start + len(BEGIN)] + "\n" + diagram + "\n" + doc[stop:], encoding="utf-8")
    draw(rows, edges, REPO / "docs" / "architecture.png")
    print(diagram)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
