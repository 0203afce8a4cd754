"""The README's configuration table is `Settings`: the same variables both ways, the same defaults where
the README gives a literal one, every choice of a Literal field listed, and each variable parsed when set."""
from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from app.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"
PREFIX = Settings.model_config["env_prefix"]

#: one value per variable, set in the environment, and what Settings must make of it
EXAMPLES: dict[str, tuple[str, object]] = {
    "FAQ_DATA_DIR": ("/srv/faq", Path("/srv/faq")),
    "FAQ_DATABASE_URL": ("postgresql://faq@db/faq", "postgresql://faq@db/faq"),
    "FAQ_KB": ("support", "support"),
    "FAQ_MAX_RESIDENT_KBS": ("8", 8),
    "FAQ_TRUSTED_PROXIES": ("10.0.0.0/8, 192.168.1.5", "10.0.0.0/8,192.168.1.5"),
    "FAQ_MATCH_REQUIRES_KEY": ("true", True),
    "FAQ_ENCODER": ("minilm", "minilm"),
    "FAQ_QUERY_ENCODER": ("/srv/query-encoder", "/srv/query-encoder"),
    "FAQ_MODEL_CACHE": ("/opt/models", Path("/opt/models")),
    "FAQ_ENCODER_RUNTIME": ("onnx", "onnx"),
    "FAQ_ENCODER_THREADS": ("3", 3),
    "FAQ_QUERY_CACHE_SIZE": ("0", 0),
    "FAQ_DEVICE": ("cpu", "cpu"),
    "FAQ_TORCH_THREADS": ("1", 1),
    "FAQ_ENCODE_WORKERS": ("2", 2),
    "FAQ_ANN_N_TREES": ("50", 50),
    "FAQ_ANN_SEARCH_K": ("-1", -1),
    "FAQ_KEEP_VERSIONS": ("5", 5),
    "FAQ_DEFAULT_TOP_K": ("3", 3),
    "FAQ_DEFAULT_THRESHOLD": ("0.7", 0.7),
    "FAQ_TARGET_PRECISION": ("0.9", 0.9),
    "FAQ_OOS_SHARE": ("0.1", 0.1),
    "FAQ_SCORING": ("calibration", "calibration"),
    "FAQ_DECISION_MODEL": ("/srv/decision.json", Path("/srv/decision.json")),
    "FAQ_POOL_VARIANTS": ("3", 3),
    "FAQ_SMALL_TALK": ("false", False),
    "FAQ_SMALL_TALK_PERSONA": ("witty", "witty"),
    "FAQ_PUBLISHING": ("reviewed", "reviewed"),
    "FAQ_SMALL_TALK_ANSWERS": ('{"thanks": ["Any time!"]}', {"thanks": ["Any time!"]}),
    "FAQ_ANSWER_WEIGHT": ("0.3", 0.3),
    "FAQ_MAX_BODY_BYTES": ("1024", 1024),
    "FAQ_MAX_UPLOAD_BYTES": ("1048576", 1048576),
    "FAQ_BODY_TIMEOUT_S": ("2.5", 2.5),
    "FAQ_REQUEST_TIMEOUT_MS": ("500", 500),
    "FAQ_MAX_QUEUED_QUERIES": ("256", 256),
    "FAQ_MAX_CONNECTIONS": ("64", 64),
    "FAQ_KB_POLL_SECONDS": ("0", 0.0),
    "FAQ_QUERY_LOG": ("false", False),
    "FAQ_METRICS_TOKEN": ("m3trics", "m3trics"),
    "FAQ_METRICS_KB_LABELS": ("false", False),
    "FAQ_FEEDBACK_REQUIRES_SESSION": ("true", True),
    "FAQ_QUERY_LOG_RETENTION_DAYS": ("0", 0),
    "FAQ_ADMIN_TOKEN": ("s3cret" * 6, "s3cret" * 6),
    "FAQ_ES_URL": ("http://es:9200", "http://es:9200"),
    "FAQ_LEXICAL_ENGINE": ("tantivy", "tantivy"),
    "FAQ_LEXICAL_K": ("10", 10),
    "FAQ_ES_INDEX_PREFIX": ("kb", "kb"),
    "FAQ_ES_TIMEOUT_S": ("0.5", 0.5),
    "FAQ_VECTOR_STORE": ("elasticsearch", "elasticsearch"),
    "FAQ_DEFAULT_ARM": ("lexical", "lexical"),
    "FAQ_AB_SPLIT": ("ann:90, lexical:10", "ann:90,lexical:10"),
    "FAQ_RERANKER": ("models/a,models/b", "models/a,models/b"),
    "FAQ_RERANK_K": ("10", 10),
    "FAQ_RERANK_WEIGHT": ("0.4", 0.4),
    "FAQ_RERANK_RUNTIME": ("torch", "torch"),
    "FAQ_SYNONYMS": ('[["wifi", "wi-fi"]]', [["wifi", "wi-fi"]]),
    "FAQ_LANGUAGES": ("en, ES", ["en", "es"]),
    "FAQ_DEFAULT_ANSWER": ("Ask at reception.", "Ask at reception."),
}


def env_name(field: str) -> str:
    return f"{PREFIX}{field}".upper()


def readme_rows() -> dict[str, tuple[str, str]]:
    """variable -> (its default cell, the row's description) from the README's configuration table; a row
    naming two variables (`FAQ_A` / `FAQ_B`) gives each its part of a default written `a / b`."""
    text = README.read_text(encoding="utf-8")
    table = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`FAQ_"):
            continue
        names = re.findall(r"FAQ_[A-Z0-9_]+", cells[0])
        defaults = cells[1].split(" / ") if len(names) > 1 else [cells[1]]
        assert len(defaults) == len(names), f"README row {cells[0]}: {len(names)} variables, defaults {cells[1]!r}"
        for name, default in zip(names, defaults):
            assert name not in rows, f"{name} is in the README's table twice"
            rows[name] = (default.strip(), cells[2])
    return rows


def literal(cell: str) -> tuple[bool, object]:
    """(True, value) for a default the README writes as a literal (a number, true/false, unset, or one
    backticked word); (False, None) for one it explains in words (computed when unset)."""
    if cell == "unset":
        return True, None
    if cell in ("true", "false"):
        return True, cell == "true"
    if re.fullmatch(r"-?\d+(\.\d+)?", cell):
        return True, float(cell)
    word = re.fullmatch(r"`([\w.+,:-]+)`", cell)
    return (True, word.group(1)) if word else (False, None)


def choices(annotation: object) -> list[object]:
    """The values a Literal type (or a union holding one) allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [c for arg in typing.get_args(annotation) for c in choices(arg)]


def test_the_readme_stays_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_the_readme_table_names_exactly_the_settings():
    documented = set(readme_rows())
    fields = {env_name(f) for f in Settings.model_fields}
    assert documented - fields == set(), "in the README but not a Settings field"
    assert fields - documented == set(), "a Settings field missing from the README"
    assert set(EXAMPLES) == fields, "give every variable an example value below"


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_readme_defaults_and_choices_agree_with_the_field(field):
    default_cell, description = readme_rows()[env_name(field)]
    info = Settings.model_fields[field]
    is_literal, value = literal(default_cell)
    if not is_literal:  # explained in words: what the code does while the variable is unset
        assert info.default is None, f"{env_name(field)}: README says {default_cell!r}, the field's default is {info.default!r}"
    elif isinstance(value, float):
        assert isinstance(info.default, (int, float)) and not isinstance(info.default, bool) and info.default == value
    elif isinstance(value, str):
        assert str(info.default) == value
    else:
        assert info.default is value
    missing = [c for c in choices(info.annotation) if f"`{c}`" not in description]
    assert not missing, f"{env_name(field)}: the README does not list {missing}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_readme_variable_works_when_set(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    for other in EXAMPLES:
        monkeypatch.delenv(other, raising=False)
    raw, expected = EXAMPLES[name]
    monkeypatch.setenv(name, raw)
    field = name[len(PREFIX):].lower()
    assert getattr(Settings(), field) == expected
