"""A `_name` is private to the module that defines it: no other module of the product imports it or reaches
it through a module alias. What two modules share gets a public name, so nobody changes a "private" helper
without seeing its other users. Dunder names (`__version__`, `__all__`) are public by convention."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the product's code; tests may reach into what they test
SCANNED = ("app", "cli", "evaluation", "training", "index", "models", "kb", "migrations", "bench", "scripts")
SKIP = {".venv", "__pycache__"}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def is_module(dotted: str) -> bool:
    """Whether `dotted` names a module or package of this repository."""
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def is_project(dotted: str) -> bool:
    top = REPO / dotted.split(".")[0]
    return top.with_suffix(".py").is_file() or top.is_dir()


def module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute(node: ast.ImportFrom, path: Path) -> str | None:
    """The module a `from ... import` reads from, relative imports resolved against `path`'s package."""
    if not node.level:
        return node.module
    package = module_of(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(base + ([node.module] if node.module else []))


def dotted_chain(node: ast.Attribute) -> tuple[str, list[str]] | None:
    """`a.b.c._d` -> ("a", ["b", "c", "_d"]); None when the chain does not start at a plain name."""
    attrs: list[str] = []
    current: ast.AST = node
    while isinstance(current, ast.Attribute):
        attrs.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    return current.id, attrs[::-1]


def violations_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(REPO)
    found: list[str] = []
    # local name -> the project module it is bound to (`import a.b` binds `a`; `from a import b` binds a module
    # only where `a.b` is one)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not is_project(alias.name):
                    continue
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
                for part in alias.name.split("."):
                    if is_private(part):
                        found.append(f"{where}:{node.lineno}: import {alias.name}")
                        break
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node, path)
            if not module or not is_project(module):
                continue
            for alias in node.names:
                if is_private(alias.name):
                    found.append(f"{where}:{node.lineno}: from {module} import {alias.name}")
                elif is_module(f"{module}.{alias.name}"):
                    aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
    # every link of `a.b._c.d` is an Attribute node: each reports the same text, kept once by the caller
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = dotted_chain(node)
        if chain is None or chain[0] not in aliases:
            continue
        current = aliases[chain[0]]
        for attr in chain[1]:
            if is_private(attr):
                found.append(f"{where}:{node.lineno}: {chain[0]}.{'.'.join(chain[1][:chain[1].index(attr) + 1])}")
                break
            if not is_module(f"{current}.{attr}"):
                break  # an attribute of the module (a class, a function): what follows is not a module's
            current = f"{current}.{attr}"
    return list(dict.fromkeys(found))


def python_files() -> list[Path]:
    files = []
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            if not SKIP & set(path.relative_to(REPO).parts):
                files.append(path)
    return files


def test_no_module_uses_another_modules_private_names():
    found = sorted({v for path in python_files() for v in violations_in(path)})
    assert not found, ("private names used outside their module (give them a public name):\n"
                       + "\n".join(found))
