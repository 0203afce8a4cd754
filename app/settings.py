"""All runtime configuration in one place, read from the environment with the `FAQ_` prefix.

Imports only pydantic: what a value means (which encoder a spec loads, which engine "auto" picks) is
decided by the code that uses it (app/match/assembly.py, app/match/, index/lexical.py); here values are only parsed and
checked, so a bad variable fails at start-up with its name.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: the arms a request can run (app/match/arms.py): ANN or BM25 recall, each with or without the re-ranking stages
Arm = Literal["ann", "ann+rerank", "lexical", "lexical+rerank"]
ARMS: tuple[str, ...] = get_args(Arm)
#: how an encoder or the cross-encoder runs (models/encoders/runtime.py, models/matchers/cross_encoder.py)
Runtime = Literal["auto", "onnx-int8", "onnx", "torch"]
RUNTIMES: tuple[str, ...] = get_args(Runtime)
LexicalEngine = Literal["auto", "tantivy", "elasticsearch"]
#: the shipped small-talk answers' voices (app/conversation/small_talk/answers.json)
Persona = Literal["professional", "friendly", "witty"]
#: how a KB's edits reach its users (app/release/publishing.py)
Publishing = Literal["immediate", "reviewed"]
#: a KB's own small-talk answers: at most this many per kind, each at most this long
MAX_SMALL_TALK_ANSWERS, MAX_SMALL_TALK_CHARS = 20, 1000


def json_setting(name: str, value: object) -> object:
    """A setting given as JSON text (the command line, an environment variable) parsed, anything else as it
    is; blank text is unset. Raises ValueError naming the setting."""
    import json

    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value.strip() else None
    except ValueError as exc:
        raise ValueError(f"{name}: not JSON ({exc.msg})") from None


def small_talk_answers(value: object) -> dict[str, list[str]] | None:
    """A KB's own small-talk answers, `{kind: [answer, ...]}` (a JSON string from the command line or
    FAQ_SMALL_TALK_ANSWERS is read as such); an empty list keeps the shipped ones for that kind."""
    from app.conversation.small_talk.answers import KINDS

    value = json_setting("small_talk_answers", value)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError('small_talk_answers: a JSON object {"kind": ["answer", ...]}')
    out = {}
    for kind, answers in value.items():
        if kind not in KINDS:
            raise ValueError(f"small_talk_answers: unknown kind {kind!r}; the kinds are {', '.join(KINDS)}")
        if not isinstance(answers, list) or not all(isinstance(a, str) and a.strip() for a in answers):
            raise ValueError(f"small_talk_answers.{kind}: a list of non-empty strings")
        if len(answers) > MAX_SMALL_TALK_ANSWERS or any(len(a) > MAX_SMALL_TALK_CHARS for a in answers):
            raise ValueError(f"small_talk_answers.{kind}: at most {MAX_SMALL_TALK_ANSWERS} answers of at most "
                             f"{MAX_SMALL_TALK_CHARS} characters")
        for i, a in enumerate(answers):
            problem = storable_problem(a)
            if problem:  # sent to clients as it is: it must be text every JSON body and database can hold
                raise ValueError(f"small_talk_answers.{kind}[{i}]: {problem}")
        out[kind] = [a.strip() for a in answers]
    return out
LEXICAL_ENGINES: tuple[str, ...] = get_args(LexicalEngine)
#: the languages a query is recognised in (models/language.py SUPPORTED, repeated: settings import only pydantic)
LanguageCode = Literal["en", "es", "de", "fr", "it", "pt", "nl"]
LANGUAGE_CODES: tuple[str, ...] = get_args(LanguageCode)


def language_list(value: object) -> list[str] | None:
    """A KB's languages: "en,es" (the command line, FAQ_LANGUAGES) or a list, as lowercase ISO 639-1
    codes, each once; blank is unset. Raises ValueError naming the unknown code and the supported ones."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [part for part in (p.strip() for p in value.split(",")) if part]
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
        raise ValueError("languages: a comma-separated list of ISO 639-1 codes, e.g. en,es")
    codes = list(dict.fromkeys(c.strip().lower() for c in value))
    unknown = [c for c in codes if c not in LANGUAGE_CODES]
    if unknown:
        raise ValueError(f"languages: {', '.join(map(repr, unknown))} not supported; "
                         f"the supported languages are {', '.join(LANGUAGE_CODES)}")
    return codes or None
#: the longest default answer a KB keeps (the FAQ answer limit of kb/records.py)
MAX_DEFAULT_ANSWER_CHARS = 20000


def storable_default_answer(value: str | None) -> str | None:
    """The default answer, held to the rule of every text the routes send (`storable_problem`)."""
    problem = None if value is None else storable_problem(value)
    if problem:
        raise ValueError(f"default_answer: {problem}")
    return value


def synonym_groups(value: object) -> list[list[str]] | None:
    """A KB's synonyms, `[["wifi", "wi-fi"], ...]` (a JSON string from the command line or FAQ_SYNONYMS is
    read as such), each term's spacing collapsed."""
    value = json_setting("synonyms", value)
    if value is None:
        return None
    problem = synonym_problem(value)
    if problem:
        raise ValueError(f'synonyms: {problem}, e.g. [["wifi", "wi-fi", "wireless internet"]]')
    return [[" ".join(t.split()) for t in group] for group in value] or None


#: a synonym group's terms, and how many groups a KB keeps (each query is rewritten with all of them)
MAX_SYNONYM_GROUPS = 1000
MAX_SYNONYM_TERMS = 20
MAX_SYNONYM_CHARS = 100


def synonym_problem(groups: object) -> str | None:
    """Why `groups` is not a list of synonym groups (each 2..MAX_SYNONYM_TERMS distinct non-empty terms)."""
    if not isinstance(groups, list):
        return "must be a list of groups, each a list of terms"
    if len(groups) > MAX_SYNONYM_GROUPS:
        return f"at most {MAX_SYNONYM_GROUPS} groups, got {len(groups)}"
    for i, group in enumerate(groups):
        if not isinstance(group, list) or not all(isinstance(t, str) for t in group):
            return f"group {i} must be a list of strings"
        terms = [t.strip() for t in group]
        if len(set(t.lower() for t in terms)) != len(terms) or len(terms) < 2:
            return f"group {i} must hold at least 2 distinct terms"
        if len(terms) > MAX_SYNONYM_TERMS:
            return f"group {i} has {len(terms)} terms, at most {MAX_SYNONYM_TERMS}"
        if any(not t or len(t) > MAX_SYNONYM_CHARS or "\x00" in t for t in terms):
            return f"group {i}: every term is 1-{MAX_SYNONYM_CHARS} characters, without NUL"
        if storable_problem("".join(terms)):
            return f"group {i}: a term holds an unpaired surrogate (not valid Unicode text)"
    return None


def storable_problem(text: str) -> str | None:
    """Why `text` cannot be stored or sent as text (kb/records.py `text_problem`, which this module may not
    import, words the same rule): NUL, which PostgreSQL text cannot hold, or a lone surrogate, which no
    database driver or JSON body can encode."""
    if "\x00" in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (it contains an unpaired surrogate)"
    return None


def split_weights(text: str) -> tuple[tuple[str, int], ...]:
    """'ann:90,lexical:10' -> (("ann", 90), ("lexical", 10)); raises ValueError naming the bad part."""
    weights: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        arm, sep, weight = part.partition(":")
        arm = arm.strip()
        if arm not in ARMS:
            raise ValueError(f"FAQ_AB_SPLIT: unknown arm {arm!r} in {part!r}; valid arms: {', '.join(ARMS)}")
        try:
            w = int(weight) if sep else -1
        except ValueError:
            w = -1
        if w < 0:
            raise ValueError(f"FAQ_AB_SPLIT: {part!r} needs a weight, a whole number >= 0 (e.g. 'ann:90,lexical:10')")
        if arm in (a for a, _ in weights):
            raise ValueError(f"FAQ_AB_SPLIT: arm {arm!r} is listed twice")
        weights.append((arm, w))
    if not weights or sum(w for _, w in weights) <= 0:
        raise ValueError(f"FAQ_AB_SPLIT: {text!r} has no arm with a weight > 0 (e.g. 'ann:90,lexical:10')")
    return tuple(weights)


def parse_trusted_proxies(text: str) -> str:
    """FAQ_TRUSTED_PROXIES normalised ("*" or addresses and networks, comma-separated); raises ValueError
    naming the first entry that is neither. uvicorn would take a typo as a name nobody connects from and
    silently trust no proxy."""
    import ipaddress

    entries = [e.strip() for e in text.split(",") if e.strip()]
    if entries == ["*"]:
        return "*"
    if not entries:
        raise ValueError("FAQ_TRUSTED_PROXIES is empty: list the proxies' addresses or networks, or '*'")
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False) if "/" in entry else ipaddress.ip_address(entry)
        except ValueError:
            raise ValueError(f"FAQ_TRUSTED_PROXIES: {entry!r} is not an IP address or network "
                             "(e.g. '127.0.0.1,10.0.0.0/8', or '*')") from None
    return ",".join(entries)

#: FAQ_ADMIN_TOKEN's least length: it reaches every KB, so it must be a long random secret
MIN_ADMIN_TOKEN_CHARS = 32

#: a KB's name (kb/records.py KB_NAME_PATTERN, repeated here because settings import only pydantic)
KB_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
DEFAULT_KB = "default"


class KbSettings(BaseModel):
    """What one KB may set for itself (stored with it: `faq kb settings`); unset fields follow the
    deployment's FAQ_* values. Each field means what the Settings field of the same name means."""

    model_config = ConfigDict(extra="forbid")

    default_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    target_precision: float | None = Field(default=None, gt=0.0, lt=1.0)
    answer_weight: float | None = Field(default=None, ge=0.0, le=0.9)
    encoder: str | None = Field(default=None, min_length=1, max_length=500)
    keep_versions: int | None = Field(default=None, ge=1, le=100)
    default_arm: Arm | None = None
    ab_split: str | None = Field(default=None, max_length=500)
    small_talk: bool | None = None
    small_talk_persona: Persona | None = None
    small_talk_answers: dict[str, list[str]] | None = None
    publishing: Publishing | None = None

    # groups of terms a query may use for the KB's own (kb/synonyms.py), and the answer the QnA Maker and
    # Azure routes give when nothing matches (unset: each service's own)
    synonyms: list[list[str]] | None = None
    default_answer: str | None = Field(default=None, min_length=1, max_length=MAX_DEFAULT_ANSWER_CHARS)
    languages: list[LanguageCode] | None = None

    @field_validator("small_talk_answers", mode="before")
    @classmethod
    def _own_answers(cls, value: object) -> dict[str, list[str]] | None:
        return small_talk_answers(value)

    @field_validator("default_answer")
    @classmethod
    def _storable_default_answer(cls, value: str | None) -> str | None:
        return storable_default_answer(value)

    @field_validator("synonyms", mode="before")
    @classmethod
    def _synonyms(cls, value: object) -> list[list[str]] | None:
        return synonym_groups(value)

    @field_validator("languages", mode="before")
    @classmethod
    def _languages(cls, value: object) -> list[str] | None:
        return language_list(value)

    @field_validator("ab_split")
    @classmethod
    def _valid_split(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return ",".join(f"{arm}:{w}" for arm, w in split_weights(value))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FAQ_", env_file=".env", extra="ignore")

    # Storage. The embedded default is SQLite under data_dir; PostgreSQL via FAQ_DATABASE_URL.
    data_dir: Path = Path("var")
    database_url: str | None = None
    # The KB the `faq` commands act on when they are given no --kb; the service serves every KB (the
    # routes without /kbs/{kb} serve `default`). A KB's index versions live in its own folder (`index_dir`).
    kb: str = Field(default=DEFAULT_KB, pattern=KB_NAME_PATTERN)
    # KBs held in memory at once by the service; the least recently used one beyond it is unloaded
    # (and loaded again on its next request)
    max_resident_kbs: int = Field(default=32, ge=1, le=100_000)
    # true: /match, /match/batch and /feedback need `Authorization: Bearer <token>`, a read or admin
    # token of that KB (`faq kb token --kind read`) or FAQ_ADMIN_TOKEN
    match_requires_key: bool = False
    # Encoder spec: "mpnet" (all-mpnet-base-v2: accurate mode), "minilm" (all-MiniLM-L6-v2: fast mode),
    # "msem" (the general MSEM shipped in models/default) or a model folder from `faq train msem`.
    # Unset: the service uses the encoder the current index was built with (manifest `encoder_spec`),
    # and builds use the default (app/match/assembly.py `encoder_spec`: mpnet when installed, else minilm).
    encoder: str | None = None
    # A `faq train query-encoder` folder: queries are encoded by it (MiniLM mapped into the build encoder's
    # space), FAQ phrasings and answers still by the encoder above ("balanced" mode). It must have been fitted
    # to the build's encoder. Unset: the one the current build recorded, else the build's encoder itself.
    query_encoder: str | None = None
    # Where all-mpnet-base-v2 is reassembled on first use (models/encoders/mpnet.py); unset: <data_dir>/models
    # (`mpnet_cache`, what every model load is given). The ONNX exports of the runtime below are cached there
    # too (<model_cache>/onnx/).
    model_cache: Path | None = None
    # Where encoders and stages run ("cpu", "cuda", "cuda:1", ...); unset: CUDA when present, else the CPU
    # (models/encoders/base.py `pick_device`).
    device: str | None = None
    # How the encoder runs (models/encoders/runtime.py): "auto" (int8 ONNX on CPU, PyTorch on CUDA), "onnx-int8",
    # "onnx" (fp32, equal to PyTorch) or "torch". Unset: builds use "auto" and the service follows the
    # runtime the current index was built with (manifest `encoder_runtime`); a build is never served
    # with int8 vectors when it was built with fp32 ones, or the other way round.
    encoder_runtime: Runtime | None = None
    # ONNX Runtime intra-op threads per encoder; unset: one per core
    encoder_threads: int | None = Field(default=None, ge=1, le=256)

    @property
    def mpnet_cache(self) -> Path:
        return self.model_cache or self.data_dir / "models"
    # Annoy parameters: defaults chosen by bench/ann_params.py (recall@10 >= 0.99 on 100k questions).
    ann_n_trees: int = 100
    ann_search_k: int = 50000  # nodes inspected per query; -1 = Annoy default (n_trees * k): far too low for recall@10 >= 0.99
    keep_versions: int = 3
    # Serving.
    admin_token: str | None = None
    # PyTorch's intra-op threads, set when the service starts (app/api/resources.py); also the cross-encoder's
    # ONNX Runtime threads
    torch_threads: int = 2
    encode_workers: int = 1
    # exact query cache (app/match/cache.py QueryCache): finished results of repeated queries, emptied by
    # every index swap and KB change; 0 = off
    query_cache_size: int = Field(default=4096, ge=0, le=1_000_000)
    default_top_k: int = 5
    default_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    # How a FAQ's score is made. "model": the decision model trained across KBs (index/decision.py), put on
    # each build's own scale by its background and held-out phrasings; builds without them fall back to
    # "calibration": the build's logistic curve of the first-stage cosine.
    scoring: Literal["model", "calibration"] = "model"
    # Answer when the score reaches the threshold whose expected precision in the build's table is at
    # least this; unset: default_threshold. A request's own `threshold` wins over both.
    target_precision: float | None = Field(default=None, gt=0.0, lt=1.0)
    # The share of out-of-scope questions the expected-precision table assumes of the traffic.
    oos_share: float = Field(default=0.2, ge=0.0, lt=1.0)
    # Small talk ("hi", "thanks", "are you a bot?"): answered with `decision: "chitchat"` in the persona's
    # voice (app/conversation/small_talk/answers.json), or the KB's own answers per kind (a JSON object {kind: [answer, ...]});
    # false: matched as any other query
    small_talk: bool = True
    small_talk_persona: Persona = "professional"
    small_talk_answers: dict[str, list[str]] | None = None
    # How edits reach users: "immediate" (every edit is live at once) or "reviewed" (edits go to the KB's
    # draft, answered on the `test` deployment; production answers from the latest publication: `faq kb publish`)
    publishing: Publishing = "immediate"
    # Synonyms: groups of terms that mean the same in this KB (JSON [["wifi", "wi-fi"], ...]); each query's
    # terms are replaced by the one the KB uses most before matching, on every arm (kb/synonyms.py)
    synonyms: list[list[str]] | None = None
    # The answer of the QnA Maker and Azure routes when nothing matches; unset: each service's own
    default_answer: str | None = Field(default=None, min_length=1, max_length=MAX_DEFAULT_ANSWER_CHARS)
    # The languages the KB answers (ISO 639-1, "en,es"): a query clearly in another one is answered
    # `abstain` with reason "language" (models/language.py); unset: every language is matched
    languages: Annotated[list[LanguageCode] | None, NoDecode] = None

    @field_validator("small_talk_answers", mode="before")
    @classmethod
    def _own_answers(cls, value: object) -> dict[str, list[str]] | None:
        return small_talk_answers(value)

    @field_validator("default_answer")
    @classmethod
    def _storable_default_answer(cls, value: str | None) -> str | None:
        return storable_default_answer(value)

    @field_validator("synonyms", mode="before")
    @classmethod
    def _synonyms(cls, value: object) -> list[list[str]] | None:
        return synonym_groups(value)

    @field_validator("languages", mode="before")
    @classmethod
    def _languages(cls, value: object) -> list[str] | None:
        return language_list(value)
    # The decision model file; unset: the one `faq index calibrate` fitted on this KB's own labels
    # (<data_dir>/decision_model.json) when there is one, else the cross-KB model shipped in index/.
    decision_model: Path | None = None

    @property
    def kb_decision_model(self) -> Path:
        return self.kb_dir / "decision_model.json"
    # a FAQ's cosine = mean of its best N phrasings' cosines (index/pooling.py); 1 = its best alone.
    # Builds calibrate N = 1..5 (index/calibration.py), hence the cap. Unset: 1 for builds whose answers
    # are evidence, else 2 (app/match/pipeline.py `Pipeline.served_pool`).
    pool_variants: int | None = Field(default=None, ge=1, le=5)
    # the answer's share of a FAQ's score: (1 - w) * phrasing cosine + w * answer cosine (index/answers.py).
    # Used only by builds whose KB has real answers; 0 = phrasings alone; 0.6 chosen on the Brightwater dev
    # queries with mpnet (docs/results.md). Builds calibrate 0.05 steps
    # up to 0.9 and a served weight is rounded to the nearest one.
    answer_weight: float = Field(default=0.6, ge=0.0, le=0.9)
    max_body_bytes: int = 64 * 1024
    # the console's KB file upload (POST /console/kbs/{kb}/import) alone: a KB file is larger than any API
    # body, and it is read and checked before anything is written
    max_upload_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024, le=256 * 1024 * 1024)
    # Admission control (app/api/workers.py MatchBatcher). A request not answered within
    # request_timeout_ms gets a 503 and its queued work is dropped; a body not received within
    # body_timeout_s gets a 408 and the connection is closed, as does a connection whose request
    # headers take longer (app/api/server.py). At most max_queued_queries queries wait
    # for the encoder (a /match/batch request counts as its number of queries), and batch requests may
    # fill only half of that, so single queries are still admitted while batches queue.
    request_timeout_ms: int = Field(default=10_000, ge=10, le=600_000)
    body_timeout_s: float = Field(default=10.0, gt=0, le=600)
    max_queued_queries: int = Field(default=1024, ge=128, le=1_000_000)
    # open connections (and their requests) per process; beyond it uvicorn answers 503 at once, so a
    # connection flood cannot exhaust memory or file descriptors
    max_connections: int = Field(default=1000, ge=16, le=1_000_000)
    # Who may say, in X-Forwarded-For and X-Forwarded-Proto, which client and scheme a request came with:
    # comma-separated addresses or networks of the proxies in front, or "*". The client address keys the
    # failed-sign-in throttle and the scheme decides the console cookie's Secure flag, so a proxy that is
    # not listed makes every client look like the proxy, and one listed that should not be lets a client
    # choose its own address. uvicorn's own default.
    trusted_proxies: str = "127.0.0.1,::1"
    kb_poll_seconds: float = 5.0
    query_log: bool = True
    # query-log rows older than this many days are deleted (`faq db prune`, and hourly by the service);
    # 0 = keep forever
    query_log_retention_days: int = Field(default=90, ge=0, le=36_500)
    # true: feedback on a query logged with a session_id must carry the same session_id
    feedback_requires_session: bool = False
    # set: GET /metrics needs `Authorization: Bearer <it>` (or FAQ_ADMIN_TOKEN); unset: /metrics is open
    metrics_token: str | None = None
    # false: no metric carries a KB's name (per-KB series are summed under kb="_all", which no KB can be
    # named), so /metrics does not tell which KBs exist
    metrics_kb_labels: bool = True
    # Lexical baseline: Elasticsearch URL; empty means the embedded engine.
    es_url: str | None = None
    # "auto": Elasticsearch when FAQ_ES_URL is set, else the embedded tantivy index; or "tantivy" /
    # "elasticsearch" explicitly. Builds always write the tantivy index (and the ES one with a URL).
    lexical_engine: LexicalEngine = "auto"
    lexical_k: int = Field(default=30, ge=1, le=1000)  # BM25 candidates per query (the paper's 30)
    es_index_prefix: str = "faq"  # ES index of a build: "<prefix>-<version>"
    es_timeout_s: float = Field(default=2.0, gt=0)  # per ES request while serving: fail fast -> 503
    # Where a build's phrasing (and answer) vectors are searched: "annoy" (the build folder, in process) or
    # "elasticsearch" (also written to FAQ_ES_URL as `<prefix>-vec-<kb>-<version>`, kNN-searched there, alias
    # `<prefix>-vec-<kb>` on the current version: index/elasticsearch/vectors.py, docs/elasticsearch.md)
    vector_store: Literal["annoy", "elasticsearch"] = "annoy"
    # Arms (ARMS above, app/match/arms.py): the arm of a request that names none; FAQ_AB_SPLIT ("ann:90,lexical:10")
    # overrides it with a split sticky per session_id.
    default_arm: Arm = "ann"
    ab_split: str | None = None
    # The re-ranking stages (FAQ_RERANKER keeps its name for users): one folder or several comma-separated, of
    # any kind in app/stages/ (cross-encoder, MMAICM, analogy, Siamese); None = none installed, so
    # `rerank: true` / the `+rerank` arms answer 409. rerank_k = FAQs the stages re-score per query.
    reranker: str | None = None
    rerank_k: int = Field(default=20, ge=1, le=200)
    # cross-encoder weight in its pool with the calibrated cosine (models/matchers/cross_encoder.py `pool`); unset: the
    # cross-encoder folder's `fusion_weight`
    rerank_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    # how the cross-encoder runs (models/matchers/cross_encoder.py RUNTIMES): "auto" = int8 ONNX when the folder has it,
    # "onnx" = fp32 ONNX (exact, slower on one thread), "torch" (what CUDA uses)
    rerank_runtime: Runtime = "auto"

    @field_validator("device", "model_cache", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value  # set but empty (e.g. compose's ${FAQ_DEVICE:-}): unset

    @field_validator("admin_token", mode="before")
    @classmethod
    def _long_admin_token(cls, value: object) -> object:
        if value == "":  # set but empty (e.g. compose's ${FAQ_ADMIN_TOKEN:-}): unset
            return None
        # it reaches every KB: a short one could be guessed (openssl rand -hex 24 gives 48 characters)
        if isinstance(value, str) and len(value) < MIN_ADMIN_TOKEN_CHARS:
            raise ValueError(f"FAQ_ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_CHARS} characters, got "
                             f"{len(value)}: make one with `openssl rand -hex 24`")
        return value

    # The choices are checked before their Literal type is, so that the error names the variable.
    @field_validator("encoder_runtime", mode="before")
    @classmethod
    def _known_encoder_runtime(cls, value: str | None) -> str | None:
        if value == "":  # set but empty (e.g. compose's ${FAQ_ENCODER_RUNTIME:-}): unset
            return None
        if value is not None and value not in RUNTIMES:
            raise ValueError(f"FAQ_ENCODER_RUNTIME must be auto, onnx-int8, onnx or torch, got {value!r}")
        return value

    @field_validator("rerank_runtime", mode="before")
    @classmethod
    def _known_runtime(cls, value: str) -> str:
        if value not in RUNTIMES:
            raise ValueError(f"FAQ_RERANK_RUNTIME must be auto, onnx-int8, onnx or torch, got {value!r}")
        return value

    @field_validator("lexical_engine", mode="before")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in LEXICAL_ENGINES:
            raise ValueError(f"FAQ_LEXICAL_ENGINE must be auto, tantivy or elasticsearch, got {value!r}")
        return value

    @field_validator("default_arm", mode="before")
    @classmethod
    def _known_arm(cls, value: str) -> str:
        if value not in ARMS:
            raise ValueError(f"FAQ_DEFAULT_ARM must be one of {', '.join(ARMS)}, got {value!r}")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: str) -> str:
        return parse_trusted_proxies(value)

    @field_validator("ab_split")
    @classmethod
    def _valid_split(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return ",".join(f"{arm}:{w}" for arm, w in split_weights(value))  # raises with the bad part named

    @property
    def kb_dir(self) -> Path:
        """The KB's own files: the data dir itself for `default` (as before KBs), else <data_dir>/kbs/<kb>."""
        return self.data_dir if self.kb == DEFAULT_KB else self.data_dir / "kbs" / self.kb

    @property
    def index_dir(self) -> Path:
        return self.kb_dir / "indexes"

    def for_kb(self, kb: str, stored: dict | None = None) -> Settings:
        """These settings for KB `kb`, with the KB's stored settings (KbSettings) over the FAQ_* values.
        Raises ValueError for a malformed name, KbSettingsRefused (a ValueError) for a bad stored value."""
        import re

        if not re.fullmatch(KB_NAME_PATTERN, kb or ""):
            raise ValueError(f"a KB name is 1-64 characters of a-z, 0-9, '-' and '_', starting with a letter "
                             f"or digit; got {kb!a}")
        try:
            own = KbSettings.model_validate(stored or {}).model_dump(exclude_none=True)
        except ValidationError as exc:  # stored by an older version, or written to the database by hand
            raise KbSettingsRefused(kb, exc) from None
        return self.model_copy(update={"kb": kb, **own})

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'faq.db').as_posix()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()


# -- settings a KB stored that this version refuses: one message for the CLI, the API and the compat routes --
def setting_rule(field: str) -> str:
    """What KbSettings accepts for `field`, in words: 'a number >= 0 and <= 1'."""
    from typing import Literal, get_args, get_origin

    info = KbSettings.model_fields[field]
    kinds = [a for a in getattr(info.annotation, "__args__", (info.annotation,)) if a is not type(None)]
    if kinds and get_origin(kinds[0]) is Literal:
        return "one of " + ", ".join(get_args(kinds[0]))
    kind = {int: "a whole number", float: "a number", str: "text of", bool: "true or false"}.get(
        kinds[0] if kinds else str, "a value")
    bounds = []
    for rule in info.metadata:
        for attr, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(rule, attr, None) is not None:
                bounds.append(f"{word} {getattr(rule, attr):g}")
        if getattr(rule, "min_length", None) is not None:
            bounds.append(f"at least {rule.min_length} character{'' if rule.min_length == 1 else 's'}")
        if getattr(rule, "max_length", None) is not None:
            bounds.append(f"at most {rule.max_length} characters")
    return kind + (" " + " and ".join(bounds) if bounds else "")


def settings_problems(exc: ValidationError, what: str = "--set") -> list[str]:
    """One line per field KbSettings refused, naming the field and what it accepts."""
    lines = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err["loc"]) or "settings"
        if err["type"] == "extra_forbidden" or field not in KbSettings.model_fields:
            lines.append(f"{what} {field}: not a KB setting; a KB can set {', '.join(KbSettings.model_fields)}")
        elif err["type"] == "value_error":  # a field's own check says what is wrong in its own words
            lines.append(f"{what} {field}={err.get('input')!r}: {err['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"{what} {field}={err.get('input')!r}: must be {setting_rule(field)}")
    return lines


class KbSettingsRefused(ValueError):
    """A KB's stored settings hold a value this version refuses (stored by an older one, or by hand): nothing
    can use the KB until they are fixed, and the message says how."""

    def __init__(self, kb: str, exc: ValidationError):
        super().__init__(f"KB {kb!r} has stored settings this version refuses: "
                         f"{'; '.join(settings_problems(exc, 'stored'))}; fix them with "
                         f"`faq kb settings --kb {kb} --unset KEY`")
        self.kb = kb
