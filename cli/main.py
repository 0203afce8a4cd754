"""Entry point of the `faq` console script.

Each command group lives in its own module with `register(subparsers)`; a command's handler is
stored as `func` on its parser and receives the parsed args. Handlers return an exit code.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

# command group modules, in the order they appear in --help
GROUPS = ["cli.kb", "cli.index", "cli.serve", "cli.db", "cli.data", "cli.train", "cli.eval", "cli.model", "cli.demo"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="faq", description="Semantic FAQ retrieval service")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in GROUPS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a group not written yet must not break the others
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from app.store import KbNotFound
    from cli.scope import KbChoiceError

    try:
        return int(args.func(args) or 0)
    except (KbChoiceError, KbNotFound) as exc:  # a wrong --kb is bad input, not a crash
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
