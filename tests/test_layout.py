"""The suite's own layout: no test module imports another test module or a conftest (shared fixtures live in
conftest.py files, shared plain code in tests/helpers/), and every folder of test code is a package, so that
two test files of the same name in different folders never clash."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
IMPORTERS = {"importorskip", "import_module", "__import__"}


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def is_test_module(dotted: str) -> bool:
    last = dotted.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def imported_names(tree: ast.AST):
    """(line, dotted name) of every import in a module, nested ones and importorskip("...") included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in IMPORTERS and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


def test_no_test_module_imports_another_test_module_or_a_conftest():
    found = []
    for path in python_files():
        for line, dotted in imported_names(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if is_test_module(dotted) or dotted.startswith("."):
                found.append(f"{path.relative_to(TESTS.parent)}:{line}: {dotted}")
    assert not found, "import from tests.helpers (plain code) or use a conftest fixture instead:\n" + "\n".join(found)


def test_every_folder_of_test_code_is_a_package():
    folders = {p.parent for p in python_files()}
    missing = sorted(str(f.relative_to(TESTS.parent)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"add an __init__.py to: {', '.join(missing)}"
