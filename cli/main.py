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


def settings_problems(exc) -> list[str]:
    """A Settings ValidationError as one line per variable, each naming it (FAQ_...)."""
    lines = []
    for error in exc.errors():
        message = str(error.get("msg", "")).removeprefix("Value error, ")
        name = "FAQ_" + str(error["loc"][0]).upper() if error.get("loc") else "settings"
        lines.append(message if message.startswith(name) else f"{name}: {message}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # an evaluation study (`faq eval NAME ARGS`, cli/eval.py) parses its own arguments; any other command knows all
    if getattr(args, "study", None) is not None:
        args.study_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from pydantic import ValidationError

    from app.store import KbNotFound
    from cli.scope import KbChoiceError

    try:
        return int(args.func(args) or 0)
    except (KbChoiceError, KbNotFound) as exc:  # a wrong --kb is bad input, not a crash
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        for line in settings_problems(exc):  # a wrong FAQ_* variable is bad input too: one line each
            print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
