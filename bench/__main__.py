"""The benchmarks as a catalogue:

    python -m bench list              # each benchmark, what it measures, its latest result file
    python -m bench run NAME [ARGS]   # run one (ARGS go to it; `run NAME --help` lists them)

A benchmark is a module of bench/ with a `main`; the others (reports.py, serving.py, tenants_plan.py, ...)
are the pieces benchmarks share. CATALOGUE names the result files each benchmark writes under bench/results/
(shell patterns): some write under several names, one per setting they were run with. A result file no
pattern names is history that docs/ cites, written by a benchmark since merged into another (the probes
security_probe.py took in: anon_probe.md, auth_throttle.md, hostile_imports.md, console_sessions.md,
proxy-cookie.md).
"""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import sys
from fnmatch import fnmatch
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"

#: benchmark -> the names of its result files (patterns); () for one that prints only
CATALOGUE: dict[str, tuple[str, ...]] = {
    "ann_params": ("ann_params*",),
    "build_scale": ("build_scale*",),
    "cache_replay": ("cache_replay*",),
    "compare": ("compare*",),
    "compat": ("compat*",),
    "console_load": ("console_load*",),
    "console_scale": ("console_scale*",),
    "decision_latency": ("decision_latency*",),
    "encoder_speed": ("encoder_speed*", "encoder_runtime*", "query_encoder_speed*"),
    "es_vectors": ("es_vectors*",),
    "filters": ("filters*", "filter_calibration*"),
    "floor": (),
    "hostile": ("hostile-*",),
    "load": ("load*",),
    "mmaicm_latency": ("mmaicm_latency*",),
    "msem_ablation": ("msem_ablation*",),
    "multilingual": ("multilingual*",),
    "peer": (),
    "publishing": ("publishing*",),
    "replicas": ("replicas-*",),
    "rerank_latency": ("rerank_latency*",),
    "responses": (),
    "security_probe": ("security-probe*",),
    "siamese_latency": ("siamese_latency*",),
    "small_talk": ("smalltalk*",),
    "store_import": ("store_import*",),
    "synonyms": ("synonyms*",),
    "tenants": ("tenants*",),
    "turns": ("turns*",),
}


def summary(name: str, width: int = 100) -> str:
    """The first sentence of the benchmark's docstring, cut to `width` (read without importing the module:
    some need extras)."""
    doc = ast.get_docstring(ast.parse((BENCH / f"{name}.py").read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    text = re.split(r"(?<=\.)\s", text, maxsplit=1)[0].rstrip(":")
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def _date(path: Path) -> str:
    """The date a JSON report says it was written ("" when it does not say): file times mean nothing in a clone."""
    if path.suffix != ".json":
        return ""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(report.get("date", "")) if isinstance(report, dict) else ""


def latest(name: str) -> Path | None:
    """The benchmark's newest result: by the report's own date, then by name."""
    found = [p for p in RESULTS.iterdir() if any(fnmatch(p.name, pattern) for pattern in CATALOGUE[name])] \
        if RESULTS.is_dir() else []
    reports = [p for p in found if p.suffix == ".json"] or found
    return max(reports, key=lambda p: (_date(p), p.name), default=None)


def listing() -> list[str]:
    width = max(map(len, CATALOGUE))
    lines = []
    for name in CATALOGUE:
        result = latest(name)
        shown = result.relative_to(BENCH.parent).as_posix() if result else "(prints only)"
        lines.append(f"{name:<{width}}  {summary(name)}\n{'':<{width}}  latest: {shown}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if args[0] == "list":
        print("\n".join(listing()))
        return 0
    if args[0] == "run" and len(args) >= 2:
        if args[1] not in CATALOGUE:
            print(f"bench: no benchmark {args[1]!r}; `python -m bench list` names them", file=sys.stderr)
            return 2
        sys.path.insert(0, str(BENCH.parent))
        module = importlib.import_module(f"bench.{args[1]}")
        sys.argv = [f"bench/{args[1]}.py", *args[2:]]  # for the benchmarks whose main reads sys.argv
        code = module.main(args[2:]) if inspect.signature(module.main).parameters else module.main()
        return code if isinstance(code, int) else 0
    print("usage: python -m bench list | run NAME [ARGS]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
