"""Which KB a `faq` command acts on, resolved the same way by every command: `--kb NAME`, else FAQ_KB
(settings `kb`, `default` when unset), with the KB's stored settings (`faq kb settings`) applied over the
FAQ_* values, so that a command sees the threshold, encoder, keep count and folders the KB is served with.

A malformed name or a KB that does not exist is the operator's mistake, not a crash: `KbChoiceError`
and `app.store.KbNotFound` reach cli/main.py, which prints their message and exits 2.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any


from app.settings import KbSettingsRefused, Settings, get_settings
from app.store import FaqStore, KbNotFound
from kb.records import kb_name_problem

KB_HELP = "the KB to act on (default: FAQ_KB, else 'default'; `faq kb list` shows them)"


class KbChoiceError(Exception):
    """--kb (or FAQ_KB) names no KB the command can act on; the message says why and what to do."""


def add_kb_option(parser: argparse.ArgumentParser, help: str = KB_HELP) -> None:
    parser.add_argument("--kb", metavar="NAME", default=None, help=help)


def kb_name(args: argparse.Namespace) -> str:
    """The KB `args` names (--kb, else FAQ_KB); raises KbChoiceError naming the rule a bad name breaks."""
    name = getattr(args, "kb", None)
    if name is None:
        name = get_settings().kb
    problem = kb_name_problem(name)
    if problem:
        raise KbChoiceError(f"--kb: {problem}")
    return name


def settings_for(name: str, stored: dict[str, Any] | None = None) -> Settings:
    """The deployment's settings for KB `name` with its `stored` settings over them. A bad FAQ_* value raises
    pydantic's ValidationError titled "Settings" as is, which cli/main.py reports naming the variable."""
    # read before the handler below: a bad deployment value is not the KB's stored settings' fault, and
    # blaming them would send the operator to `--unset` a key the KB does not even have
    deployment = get_settings()
    try:
        return deployment.for_kb(name, stored)
    except KbSettingsRefused as exc:  # stored by an older version, or written to the database by hand
        raise KbChoiceError(str(exc)) from None


@dataclass
class KbScope:
    """A command's KB: its name, its settings, and the store scoped to it (the caller closes it)."""

    name: str
    settings: Settings
    store: FaqStore
    created: bool = False

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> KbScope:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_kb(args: argparse.Namespace, *, create: bool = False, migrate: bool = True) -> KbScope:
    """The KB `args` names, its database migrated first (`migrate=False`: only checked, raising
    SchemaNotReady, for dry runs that must change nothing). `create`: make the KB when it does not
    exist (`faq kb import`); otherwise a missing KB raises KbNotFound."""
    from migrations.runner import migrated_store

    name = kb_name(args)
    base = settings_for(name)
    store = migrated_store(base) if migrate else FaqStore.from_settings(base)
    try:
        created = False
        if not store.kb_exists():
            if not create:
                raise KbNotFound(name)
            created = store.catalog.ensure(name)
        settings = settings_for(name, store.catalog.settings(name))
    except BaseException:
        store.close()
        raise
    return KbScope(name, settings, store, created)


def kb_settings(args: argparse.Namespace) -> Settings:
    """The settings of the KB `args` names, for commands that need its folders but not its store."""
    with open_kb(args) as scope:
        return scope.settings
