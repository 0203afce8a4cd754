"""Are two `faq eval match --json` reports the same measurement? Everything but timings and build names.

For changes that must not move a number (a refactor, a dependency bump): run the same `faq eval match`
command before and after, then

    .venv/bin/python scripts/same_eval.py before.json after.json   # exit 0: identical, 1: lists what moved
"""
from __future__ import annotations

import json
import sys

#: fields that describe the run, not its result: where, when, how long (any key ending in _ms or _s too)
IGNORED = {"timings", "version", "workdir", "machine", "created_at"}


def ignored(key: str) -> bool:
    return key in IGNORED or key.endswith(("_ms", "_s"))


def diff(a: object, b: object, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if ignored(key):
                continue
            out += diff(a.get(key), b.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:120]} -> {json.dumps(b)[:120]}"]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    before, after = (json.load(open(p, encoding="utf-8")) for p in argv)
    moved = diff(before, after)
    print("identical" if not moved else "\n".join(moved))
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
