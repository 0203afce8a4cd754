"""`faq quickstart`: the main job on embedded defaults — import the bundled demo FAQ, build the index,
serve /match. Each step is the same command an operator would run by hand."""
from __future__ import annotations

import argparse
from pathlib import Path

DEMO_KB = Path(__file__).resolve().parent.parent / "demo" / "faq.jsonl"


def _quickstart(args: argparse.Namespace) -> int:
    from app.cli.main import main

    kb = args.kb or str(DEMO_KB)
    for step in (["kb", "import", kb], ["index", "build"]):
        print(f"$ faq {' '.join(step)}", flush=True)
        rc = main(step)
        if rc:
            return rc
    if args.no_serve:
        return 0
    print(f"$ faq serve --host {args.host} --port {args.port}", flush=True)
    return main(["serve", "--host", args.host, "--port", str(args.port)])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="import the demo FAQ (or --kb FILE), build the index and serve /match")
    p.add_argument("--kb", help="knowledge base JSONL/CSV (default: the bundled demo FAQ)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-serve", action="store_true", help="stop after building the index")
    p.set_defaults(func=_quickstart)
