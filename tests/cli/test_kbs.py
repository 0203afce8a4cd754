"""Several KBs through the CLI: `--kb NAME` on the kb/index/eval commands, `faq kb list|create|delete|settings|
token`, each KB's rows and index folder kept apart, and a wrong KB name refused with exit 2."""
from __future__ import annotations

import io
import json

import pytest

from cli.main import main
from tests.helpers.kb import INDEX_TEST_FAQS, write_kb_jsonl

SUPPORT = {"reset": ["How do I reset my password?", "I forgot my password"], "hours": ["When are you open?"]}
SALES = {"pricing": ["How much does it cost?", "What are your prices?"], "trial": ["Is there a free trial?"],
         "discount": ["Do you have discounts?"]}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def two_kbs(faq_env, tmp_path, capsys):
    """`default` holds SUPPORT, KB `sales` SALES (created by its import)."""
    assert run(capsys, "kb", "import", str(write_kb_jsonl(tmp_path / "support.jsonl", SUPPORT)))[0] == 0
    code, out, _ = run(capsys, "kb", "import", str(write_kb_jsonl(tmp_path / "sales.jsonl", SALES)), "--kb", "sales")
    assert code == 0
    assert out.splitlines()[:2] == ["Created KB 'sales'.", f"Imported {tmp_path / 'sales.jsonl'} into KB 'sales': "
                                                           "4 rows, 3 FAQs"]
    return faq_env


def _store(settings, kb="default"):
    from app.store import FaqStore

    return FaqStore(settings.db_url, kb=kb)


def test_each_kb_has_its_own_rows_stats_and_export(two_kbs, tmp_path, capsys):
    code, out, _ = run(capsys, "kb", "import", str(tmp_path / "sales.jsonl"), "--kb", "sales", "--json")
    report = json.loads(out)
    assert code == 0 and report["kb"] == "sales" and not report["kb_created"] and report["changes"] == 0

    code, out, _ = run(capsys, "kb", "stats", "--kb", "sales", "--json")
    stats = json.loads(out)
    assert code == 0 and (stats["kb"], stats["faqs"], stats["variants"]) == ("sales", 3, 4)
    code, out, _ = run(capsys, "kb", "stats")
    assert code == 0 and "KB:                 default" in out and "FAQs:               2" in out

    for kb, faqs in (("default", SUPPORT), ("sales", SALES)):
        target = tmp_path / f"export-{kb}.jsonl"
        assert run(capsys, "kb", "export", str(target), "--kb", kb)[0] == 0
        rows = [json.loads(line) for line in target.read_text().splitlines()]
        assert [(r["faq_id"], r["question"]) for r in rows] == [(f, q) for f, qs in faqs.items() for q in qs]

    code, out, _ = run(capsys, "kb", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "FAQS", "PHRASINGS", "REVISION", "INDEX", "SETTINGS"]
    assert lines[1].split() == ["*", "default", "2", "3", "1", "-", "-"]  # * = the KB without --kb
    assert lines[2].split() == ["sales", "3", "4", "1", "-", "-"]
    code, out, _ = run(capsys, "kb", "list", "--json")
    listed = {k["name"]: k for k in json.loads(out)}
    assert set(listed) == {"default", "sales"} and listed["sales"]["variants"] == 4 and listed["sales"]["index"] is None


def test_faq_kb_picks_the_kb_without_kb_option(two_kbs, monkeypatch, capsys):
    from app.settings import get_settings

    monkeypatch.setenv("FAQ_KB", "sales")
    get_settings.cache_clear()
    code, out, _ = run(capsys, "kb", "stats", "--json")
    assert code == 0 and json.loads(out)["kb"] == "sales"
    assert json.loads(run(capsys, "kb", "stats", "--kb", "default", "--json")[1])["kb"] == "default"
    assert run(capsys, "kb", "list")[1].splitlines()[2].startswith("* sales")


def test_a_dry_run_import_into_a_new_kb_creates_nothing(faq_env, tmp_path, capsys):
    code, out, _ = run(capsys, "kb", "import", str(write_kb_jsonl(tmp_path / "s.jsonl", SALES)), "--kb", "new",
                       "--dry-run")
    assert code == 0 and out.splitlines()[0] == "KB 'new' does not exist: the import would create it."
    assert "  FAQs:      3 created, 0 updated, 0 unchanged" in out and "Variants:  4 added" in out
    with _store(faq_env) as store:
        assert store.catalog.names() == ["default"]
    # a file that does not read leaves no empty KB behind
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert run(capsys, "kb", "import", str(bad), "--kb", "new")[0] == 2
    with _store(faq_env) as store:
        assert store.catalog.names() == ["default"]


@pytest.mark.parametrize("argv", [
    ["kb", "stats"], ["kb", "export", "-"], ["kb", "mine"], ["kb", "lint"], ["kb", "settings"], ["kb", "token"],
    ["kb", "token", "--list"], ["index", "build", "--no-progress"], ["index", "calibrate", "--reset"],
    ["index", "list"], ["index", "activate", "20990101T000000Z-ffffff"], ["index", "verify"], ["index", "sweep"],
    ["eval", "online"],
])
def test_an_unknown_or_malformed_kb_exits_2_with_the_reason(faq_env, capsys, argv):
    code, out, err = run(capsys, *argv, "--kb", "nope")
    assert code == 2 and "Traceback" not in err
    assert err.strip() == "error: no KB named 'nope': create it with `faq kb import FILE --kb nope` (or `faq kb list`)"
    code, _, err = run(capsys, *argv, "--kb", "No Such")
    assert code == 2 and err.startswith("error: --kb: a KB name is 1-64 characters of a-z, 0-9, '-' and '_'")
    assert "'No Such'" in err


def test_index_versions_live_in_the_kbs_own_folder_and_keep_its_count(faq_env, tmp_path, monkeypatch, capsys):
    from app.settings import get_settings
    from index.artifacts import BuildRegistry

    monkeypatch.setenv("FAQ_ENCODER", "minilm")
    monkeypatch.setenv("FAQ_TORCH_THREADS", "1")
    get_settings.cache_clear()
    kb = write_kb_jsonl(tmp_path / "kb.jsonl", {f: qs for f, _, qs in INDEX_TEST_FAQS[:12]})
    assert run(capsys, "kb", "import", str(kb), "--kb", "shop")[0] == 0
    assert run(capsys, "kb", "settings", "--kb", "shop", "--set", "keep_versions=2")[0] == 0
    build = ["index", "build", "--kb", "shop", "--no-progress", "--no-lexical", "--n-trees", "5"]
    assert run(capsys, *build)[0] == 0
    code, out, _ = run(capsys, *build)
    assert code == 0 and "now current" in out
    folder = faq_env.data_dir / "kbs" / "shop" / "indexes"
    registry = BuildRegistry(folder)
    first, second = registry.versions()
    assert registry.current() == second
    assert not (faq_env.data_dir / "indexes").exists()  # the default KB's folder is untouched

    code, out, _ = run(capsys, "index", "list", "--kb", "shop")
    assert code == 0 and out.splitlines()[2].startswith("* " + second)
    assert run(capsys, "index", "list")[1].strip() == "no index versions yet: run `faq index build`"
    assert run(capsys, "index", "activate", first, "--kb", "shop")[1].strip() == f"current -> {first}"
    assert registry.current() == first
    assert run(capsys, "index", "activate", first)[0] == 1  # not a version of the default KB
    code, out, _ = run(capsys, "index", "verify", "--kb", "shop")
    assert code == 0 and out.startswith(f"{first}: OK")
    assert run(capsys, "kb", "list")[1].splitlines()[2].split()[4:] == [first, "keep_versions=2"]

    # keep_versions 1: after the next build only it is left, the previous current one included
    assert run(capsys, "kb", "settings", "--kb", "shop", "--set", "keep_versions=1")[0] == 0
    code, out, _ = run(capsys, *build)
    assert code == 0 and "pruned old versions" in out
    (third,) = registry.versions()
    assert third not in (first, second) and registry.current() == third


def test_kb_settings_round_trip_and_validation(two_kbs, capsys):
    code, out, _ = run(capsys, "kb", "settings", "--kb", "sales", "--set", "default_threshold=0.7",
                       "--set", "encoder=minilm", "--set", "keep_versions=5")
    assert code == 0
    assert out.splitlines()[0] == ("KB 'sales': default_threshold unset -> 0.7; encoder unset -> minilm; "
                                   "keep_versions unset -> 5")
    assert "* default_threshold   0.7" in out and "  answer_weight       0.6" in out
    assert "  small_talk_persona  professional" in out
    code, out, _ = run(capsys, "kb", "settings", "--kb", "sales", "--unset", "encoder", "--json")
    data = json.loads(out)
    assert code == 0 and data["stored"] == {"default_threshold": 0.7, "keep_versions": 5}
    assert data["effective"]["encoder"] is None and data["effective"]["answer_weight"] == 0.6
    with _store(two_kbs) as store:
        assert store.catalog.settings("sales") == {"default_threshold": 0.7, "keep_versions": 5}
        assert store.catalog.settings("default") == {}
    # what the commands of that KB see
    from cli.scope import settings_for

    assert settings_for("sales", {"default_threshold": 0.7, "keep_versions": 5}).keep_versions == 5

    for argv, message in [
        (["--set", "keep_versions=0"], "--set keep_versions='0': must be a whole number >= 1 and <= 100"),
        (["--set", "default_threshold=1.5"], "--set default_threshold='1.5': must be a number >= 0 and <= 1"),
        (["--set", "target_precision=1"], "--set target_precision='1': must be a number > 0 and < 1"),
        (["--set", "answer_weight=lots"], "--set answer_weight='lots': must be a number >= 0 and <= 0.9"),
        (["--set", "encoder="], "--set encoder='': must be text of at least 1 character and at most 500"),
        (["--set", "colour=red"], "--set colour: not a KB setting; a KB can set default_threshold, target_precision, "
                                  "answer_weight, encoder, keep_versions"),
        (["--unset", "colour"], "--unset colour: not a KB setting"),
        (["--set", "keep_versions"], "--set 'keep_versions': expected KEY=VALUE"),
        (["--set", "small_talk=maybe"], "--set small_talk='maybe': must be true or false"),
        (["--set", "small_talk_persona=pirate"], "--set small_talk_persona='pirate': must be one of professional, "
                                                 "friendly, witty"),
        (["--set", 'small_talk_answers={"hello": ["hi"]}'], "--set small_talk_answers='{\"hello\": [\"hi\"]}': "
                                                           "small_talk_answers: unknown kind 'hello'"),
        (["--set", "small_talk_answers=[1"], "--set small_talk_answers='[1': small_talk_answers: not JSON"),
        (["--set", "keep_versions=2", "--unset", "keep_versions"], "keep_versions: both --set and --unset"),
    ]:
        code, _, err = run(capsys, "kb", "settings", "--kb", "sales", *argv)
        assert code == 2 and err.startswith(f"error: {message}"), (argv, err)
    with _store(two_kbs) as store:  # a refused change changes nothing
        assert store.catalog.settings("sales") == {"default_threshold": 0.7, "keep_versions": 5}


def test_kb_create(faq_env, capsys):
    code, out, _ = run(capsys, "kb", "create", "faq-2", "--set", "target_precision=0.9")
    assert code == 0 and out.startswith("Created KB 'faq-2' (settings: target_precision=0.9)")
    with _store(faq_env) as store:
        assert store.catalog.names() == ["default", "faq-2"] and store.catalog.settings("faq-2") == {"target_precision": 0.9}
    code, _, err = run(capsys, "kb", "create", "faq-2")
    assert code == 2 and "KB 'faq-2' already exists" in err
    code, _, err = run(capsys, "kb", "create", "_x")
    assert code == 2 and err.startswith("error: NAME: a KB name is 1-64 characters")
    code, _, err = run(capsys, "kb", "create", "x", "--set", "keep_versions=101")
    assert code == 2 and "keep_versions='101': must be a whole number >= 1 and <= 100" in err
    with _store(faq_env) as store:
        assert store.catalog.names() == ["default", "faq-2"]


def test_kb_tokens_create_list_revoke(two_kbs, capsys):
    code, out, err = run(capsys, "kb", "token", "--kb", "sales", "--kind", "read", "--label", "chat widget")
    token = out.strip()
    assert code == 0 and out == token + "\n" and token.startswith("faqkb_")
    assert "read token 1 of KB 'sales' (chat widget)" in err and "cannot be shown again" in err
    admin = run(capsys, "kb", "token", "--kb", "sales")[1].strip()
    with _store(two_kbs) as store:
        info = store.catalog.verify_token(token)
        assert (info.kb, info.kind, info.label) == ("sales", "read", "chat widget")
        assert store.catalog.verify_token(admin).kind == "admin"

    code, out, _ = run(capsys, "kb", "token", "--kb", "sales", "--list")
    assert code == 0 and token not in out and admin not in out
    rows = out.splitlines()[1:]
    assert [r.split()[:2] for r in rows] == [["1", "read"], ["2", "admin"]] and rows[0].endswith("chat widget")
    assert run(capsys, "kb", "token", "--list")[1].startswith("KB 'default' has no tokens")

    code, out, _ = run(capsys, "kb", "token", "--kb", "sales", "--revoke", "1")
    assert code == 0 and out.strip() == "revoked token 1 of KB 'sales'"
    with _store(two_kbs) as store:
        assert store.catalog.verify_token(token) is None and store.catalog.verify_token(admin) is not None
    listed = json.loads(run(capsys, "kb", "token", "--kb", "sales", "--list", "--json")[1])
    assert [(t["id"], t["revoked_at"] is not None) for t in listed] == [(1, True), (2, False)]

    for argv, message in [
        (["--revoke", "1"], "KB 'sales' has no live token 1"),
        (["--revoke", "2", "--kb", "default"], "KB 'default' has no live token 2"),  # another KB's token
        (["--list", "--kind", "read"], "--role, --kind, --name and --label go with creating a token"),
        (["--label", "x" * 201], "--label: at most 200 characters, got 201"),
        (["--json"], "--json goes with --list"),
    ]:
        argv = argv if "--kb" in argv else [*argv, "--kb", "sales"]
        code, _, err = run(capsys, "kb", "token", *argv)
        assert code == 2 and err.startswith(f"error: {message}"), (argv, err)


def test_kb_tokens_have_a_role_and_a_name(two_kbs, capsys):
    made = {}
    for argv in (["--role", "viewer", "--name", "Ana (support)"], ["--role", "editor", "--name", "Ben"],
                 ["--role", "publisher", "--label", "Cy"], ["--kind", "admin", "--label", "old admin"],
                 ["--role", "admin"], ["--kind", "read", "--name", "chat widget"]):
        code, out, err = run(capsys, "kb", "token", "--kb", "sales", *argv)
        assert code == 0 and out.strip().startswith("faqkb_"), err
        made[tuple(argv)] = out.strip()
    with _store(two_kbs) as store:
        found = [(i.kind, i.label) for i in map(store.catalog.verify_token, made.values())]
    assert found == [("viewer", "Ana (support)"), ("editor", "Ben"), ("publisher", "Cy"), ("admin", "old admin"),
                     ("admin", None), ("read", "chat widget")]

    code, out, _ = run(capsys, "kb", "token", "--kb", "sales", "--list")
    header, *rows = out.splitlines()
    assert code == 0 and header.split() == ["ID", "ROLE", "CREATED", "REVOKED", "NAME"]
    assert [r.split()[:2] for r in rows] == [["1", "viewer"], ["2", "editor"], ["3", "publisher"], ["4", "admin"],
                                             ["5", "admin"], ["6", "read"]]
    assert rows[0].endswith("Ana (support)") and rows[2].endswith("Cy") and rows[4].endswith("-")
    listed = json.loads(run(capsys, "kb", "token", "--kb", "sales", "--list", "--json")[1])
    assert [(t["role"], t["name"]) for t in listed] == found
    assert all(token not in out for token in made.values())

    for argv, message in [  # argparse's own refusals
        (["--role", "read"], "argument --role: invalid choice: 'read'"),
        (["--kind", "viewer"], "argument --kind: invalid choice: 'viewer'"),
        (["--role", "editor", "--kind", "read"], "argument --kind: not allowed with argument --role"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(["kb", "token", "--kb", "sales", *argv])
        assert exited.value.code == 2 and message in capsys.readouterr().err, argv
    for argv, message in [
        (["--name", "a", "--label", "b"], "--name and --label are the same"),
        (["--name", "x" * 201], "--name: at most 200 characters, got 201"),
        (["--name", "a\x00b"], "--name: "),
        (["--list", "--role", "viewer"], "--role, --kind, --name and --label go with creating a token"),
        (["--revoke", "1", "--name", "x"], "--role, --kind, --name and --label go with creating a token"),
    ]:
        code, _, err = run(capsys, "kb", "token", "--kb", "sales", *argv)
        assert code == 2 and err.startswith(f"error: {message}"), (argv, err)
    with _store(two_kbs) as store:
        assert len(store.catalog.tokens("sales")) == 6, "no refused command made a token"


def _with_folder(settings, kb: str):
    folder = settings.data_dir / "kbs" / kb / "indexes"
    folder.mkdir(parents=True)
    (folder / "something").write_text("x")
    return folder.parent


def test_kb_delete_asks_then_removes_rows_and_folder(two_kbs, tmp_path, monkeypatch, capsys):
    folder = _with_folder(two_kbs, "sales")
    other = _with_folder(two_kbs, "keep")
    assert run(capsys, "kb", "token", "--kb", "sales")[0] == 0
    with _store(two_kbs) as store:
        store.catalog.create("keep")

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal: --yes or nothing
    code, _, err = run(capsys, "kb", "delete", "sales")
    assert code == 2 and "needs --yes when stdin is not a terminal" in err and folder.is_dir()

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "sale")
    code, _, err = run(capsys, "kb", "delete", "sales")
    assert code == 1 and "KB 'sales': 3 FAQs, 4 phrasings" in err and "not deleted" in err and folder.is_dir()
    prompts = []
    monkeypatch.setattr("builtins.input", lambda prompt: prompts.append(prompt) or "sales")
    code, out, _ = run(capsys, "kb", "delete", "sales")
    assert code == 0 and prompts == ["Type sales to delete it: "]
    assert out.strip() == (f"Deleted KB 'sales': 3 FAQs, 4 phrasings, 0 builds, 1 tokens, 0 query-log rows; "
                           f"removed {folder}")
    assert not folder.exists() and other.is_dir() and two_kbs.data_dir.is_dir()
    with _store(two_kbs) as store:
        assert store.catalog.names() == ["default", "keep"] and store.count_faqs() == 2

    code, _, err = run(capsys, "kb", "delete", "sales", "--yes")
    assert code == 2 and "no KB named 'sales'" in err
    code, _, err = run(capsys, "kb", "delete", "default", "--yes")
    assert code == 2 and "the 'default' KB cannot be deleted" in err
    code, _, err = run(capsys, "kb", "delete", "../var", "--yes")
    assert code == 2 and "a KB name is 1-64 characters" in err
    code, out, _ = run(capsys, "kb", "delete", "keep", "--yes")  # --yes: no question asked
    assert code == 0 and not other.exists() and two_kbs.data_dir.is_dir()


def test_kb_delete_removes_the_elasticsearch_indexes_its_builds_name(faq_env, tmp_path, monkeypatch, capsys,
                                                                      es_emulator_url):
    from app.settings import get_settings
    from index.artifacts import BuildRegistry
    from index.elasticsearch.lexical import ElasticsearchLexicalIndex

    for name, value in (("FAQ_ENCODER", "minilm"), ("FAQ_TORCH_THREADS", "1"), ("FAQ_ES_URL", es_emulator_url),
                        ("FAQ_ES_INDEX_PREFIX", f"t{tmp_path.name[-8:].lower()}")):
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    assert run(capsys, "kb", "import", str(write_kb_jsonl(tmp_path / "kb.jsonl", SALES)), "--kb", "sales")[0] == 0
    assert run(capsys, "index", "build", "--kb", "sales", "--no-progress", "--n-trees", "5")[0] == 0
    registry = BuildRegistry(faq_env.data_dir / "kbs" / "sales" / "indexes")
    es_name = registry.read_manifest(registry.current())["lexical"]["elasticsearch"]["index"]
    es = ElasticsearchLexicalIndex(es_emulator_url, es_name)
    try:
        assert es.exists()
        code, out, _ = run(capsys, "kb", "delete", "sales", "--yes")
        assert code == 0 and out.splitlines()[-1] == f"Deleted Elasticsearch indexes: {es_name}"
        assert not es.exists()
    finally:
        es.close()


def test_eval_online_reads_the_kbs_own_query_log(two_kbs, tmp_path, capsys):
    from datetime import datetime, timezone

    with _store(two_kbs, "sales") as store:
        store.log_queries([{"request_id": f"r{i}", "query": f"price {i}", "faq_id": "pricing", "score": 0.9,
                            "arm": "ann", "latency_ms": 10.0 + i, "created_at": datetime.now(timezone.utc)}
                           for i in range(4)])
    out_dir = tmp_path / "online"
    assert run(capsys, "eval", "online", "--kb", "sales", "--out", str(out_dir))[0] == 0
    assert json.loads((out_dir / "report.json").read_text())["requests"] == 4
    assert "no logged /match requests" in run(capsys, "eval", "online")[1]  # the default KB's log is empty


def test_calibrating_a_kb_without_a_build_names_the_command_with_its_kb(two_kbs, capsys):
    """The CLI says the service's "no index built" (app/match/request.py), with the --kb to run it for."""
    code, _, err = run(capsys, "index", "calibrate", "--kb", "sales")
    assert code == 1 and err == "error: no index built: run `faq index build --kb sales`\n"
    code, _, err = run(capsys, "index", "calibrate")
    assert code == 1 and err == "error: no index built: run `faq index build`\n"
