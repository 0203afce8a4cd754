"""A bad FAQ_* value is the deployment's to fix: every KB-scoped command names the variable (as `faq kb list`,
`faq serve` and `faq db` do), for a KB that exists and one that does not, and never sends the operator to
`faq kb settings --unset` a key the KB does not have. A KB's own stored settings that this version refuses
are still blamed on the KB."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings as hyp_settings, strategies as st

from cli.main import main
from tests.helpers.kb import write_kb_jsonl

SHORT_TOKEN = "short-admin-token"

#: (variable, value, what the error must say): the three kinds of mistake, each with the words that name it
BAD_VALUES = [
    ("FAQ_ADMIN_TOKEN", SHORT_TOKEN, "FAQ_ADMIN_TOKEN must be at least 32 characters"),
    ("FAQ_DEFAULT_THRESHOLD", "5", "FAQ_DEFAULT_THRESHOLD"),
    ("FAQ_LANGUAGES", "xx", "FAQ_LANGUAGES"),
]

#: every command that resolves a KB (cli/scope.py), with what it needs besides `--kb`
COMMANDS = [
    ["kb", "import", "{kb_file}"], ["kb", "stats"], ["kb", "export", "-"], ["kb", "settings"],
    ["kb", "token"], ["kb", "token", "--list"], ["kb", "delete", "--yes", "{kb}"], ["kb", "mine"], ["kb", "lint"],
    ["index", "list"], ["index", "build", "--no-progress"], ["index", "sweep"], ["index", "calibrate", "--reset"],
    ["index", "verify"], ["index", "activate", "20990101T000000Z-ffffff"], ["eval", "online"],
]


def _argv(command: list[str], kb: str, kb_file: str) -> list[str]:
    argv = [part.format(kb=kb, kb_file=kb_file) for part in command]
    return argv if "{kb}" in command else [*argv, "--kb", kb]


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture
def kb_file(faq_env, tmp_path, capsys):
    """A KB file, imported once into KB `shop` while the settings are still good."""
    path = write_kb_jsonl(tmp_path / "shop.jsonl", {"hours": ["When are you open?"]})
    assert main(["kb", "import", str(path), "--kb", "shop"]) == 0
    capsys.readouterr()
    return str(path)


def _set_bad(monkeypatch, variable: str, value: str) -> None:
    from app.settings import get_settings

    monkeypatch.setenv(variable, value)
    get_settings.cache_clear()


@pytest.mark.parametrize("variable,value,expected", BAD_VALUES, ids=[v for v, _, _ in BAD_VALUES])
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:3]) for c in COMMANDS])
@pytest.mark.parametrize("kb", ["shop", "nope"])
def test_a_bad_deployment_value_is_named_by_every_kb_command(kb_file, monkeypatch, capsys, command, kb,
                                                             variable, value, expected):
    _set_bad(monkeypatch, variable, value)
    code, err = _run(capsys, _argv(command, kb, kb_file))
    assert code == 2, err
    assert err.startswith(f"error: {expected}"), err
    assert "Traceback" not in err and "stored settings" not in err and "--unset" not in err


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:3]) for c in COMMANDS])
def test_any_short_admin_token_is_named_by_every_kb_command(kb_file, monkeypatch, capsys, command):
    # generated tokens: any text an environment variable can hold, 1 to 31 characters
    @hyp_settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=31))
    def check(token: str) -> None:
        from app.settings import get_settings

        before = os.environ.get("FAQ_ADMIN_TOKEN")
        os.environ["FAQ_ADMIN_TOKEN"] = token
        get_settings.cache_clear()
        try:
            code, err = _run(capsys, _argv(command, "nope", kb_file))
        finally:
            if before is None:
                os.environ.pop("FAQ_ADMIN_TOKEN", None)
            else:
                os.environ["FAQ_ADMIN_TOKEN"] = before
            get_settings.cache_clear()
        assert code == 2 and err.startswith("error: FAQ_ADMIN_TOKEN must be at least 32 characters"), (token, err)
        assert "stored settings" not in err

    check()


def test_stored_settings_this_version_refuses_are_still_the_kbs(kb_file, faq_env, capsys):
    from app.store import FaqStore

    with FaqStore(faq_env.db_url, kb="shop") as store:  # as an older version (or a hand edit) left them
        store.catalog.set_settings("shop", {"default_threshold": 5, "colour": "red"})
    code, err = _run(capsys, ["kb", "stats", "--kb", "shop"])
    assert code == 2
    assert err.startswith("error: KB 'shop' has stored settings this version refuses: stored default_threshold=5: "
                          "must be a number >= 0 and <= 1; stored colour: not a KB setting"), err
    assert err.rstrip().endswith("fix them with `faq kb settings --kb shop --unset KEY`")
