"""Request and response bodies of the HTTP API (pydantic v2).

Request models forbid unknown fields and are strict about types (no "5" for an int, no "yes" for a
bool) so a client mistake is reported instead of silently coerced. The limits live here as constants
so the error messages, the OpenAPI docs and the tests agree.

Every string a client can send (body fields, list items, the admin routes' path and query parameters)
goes through `STORABLE`, the KB's own rule for text a database can hold (kb.records.text_problem): NUL
and lone surrogates are a 422 naming the field here, never a database error after part of the work
is done.
"""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator, model_validator,
)

from app.match.arms import ARMS
from app.settings import LANGUAGE_CODES
from app.release.publishing import MAX_NOTE_CHARS, MAX_NUMBER_DIGITS
from kb.filters import FaqFilter, parse_filter
from kb.records import MAX_FOLLOW_UPS, MAX_METADATA_KEYS, text_problem

MAX_QUERY_CHARS = 1000
MAX_TOP_K = 50
MAX_BATCH = 64
MAX_ID_CHARS = 200  # faq ids (same limit as the faqs table)
MAX_SESSION_CHARS = 128  # query_log.session_id
MAX_REQUEST_ID_CHARS = 64  # query_log.request_id
MAX_PAGE_OFFSET = 2**31 - 1  # far past any KB, and an int every database's OFFSET takes
VALID_ARMS = ARMS  # ann, ann+rerank, lexical, lexical+rerank (app/match/arms.py)


def _storable(value: Any) -> Any:
    # Before the type check: pydantic itself rejects a lone surrogate in a plain `str` field, but
    # only as "must be a string", and lets it through inside a list.
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is not None:
            raise ValueError(problem)
    return value


#: the validator every client-sent string carries (Annotated[str, STORABLE], also on query/path params)
STORABLE = BeforeValidator(_storable)


def _filter_grammar(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None:
        parse_filter(value)  # a FilterError names the part at fault (errors.py reads its field)
    return value


#: a filter checked against its grammar (kb/filters.py), which holds every string in it to `text_problem`
FILTER_GRAMMAR = AfterValidator(_filter_grammar)
#: validators that check every string inside a structured field themselves, as STORABLE does for one string
CHECKS_ITS_TEXT = (FILTER_GRAMMAR,)
Text = Annotated[str, STORABLE]
OptionalText = Annotated[str | None, STORABLE]



class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable_keys(cls, data: Any) -> Any:
        # an unknown field is reported by its name, and a name with a lone surrogate cannot be
        # written into the JSON error body
        if isinstance(data, dict):
            for key in data:
                problem = text_problem(key) if isinstance(key, str) else None
                if problem is not None:
                    raise ValueError(f"field names {problem}")
        return data


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace only")
    return value


# -- /match -------------------------------------------------------------------------------------
class MatchContext(_Strict):
    """The previous turn of the conversation (docs/context.md)."""

    previous_faq_id: OptionalText = Field(default=None, min_length=1, max_length=MAX_ID_CHARS,
                                          description="the FAQ answered (or picked) in the previous turn")
    previous_query: OptionalText = Field(default=None, min_length=1, max_length=MAX_QUERY_CHARS,
                                         description="the user's previous message")


class ChitchatOut(BaseModel):
    kind: Literal["greeting", "thanks", "goodbye", "bot_identity", "how_are_you", "praise", "complaint",
                  "acknowledgement", "help"]
    answer: str = Field(description="the reply in the KB's persona, or the KB's own answer for the kind")


class ContextOut(BaseModel):
    applied: Literal["none", "follow_up", "prompted", "unknown_previous"] = Field(
        description="follow_up: the query was one of the previous FAQ's prompts, its FAQ is the answer; prompted: "
                    "the previous FAQ's context-only follow-ups were candidates; unknown_previous: previous_faq_id "
                    "is not an FAQ of the KB (deleted?), matched without context; none: no context given")
    note: str | None = None


class MatchRequest(_Strict):
    query: Text = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="the user's question")
    top_k: int | None = Field(default=None, ge=1, le=MAX_TOP_K, description="FAQs to return (default 5)")
    threshold: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="minimum score for an answer; unset: the threshold of FAQ_TARGET_PRECISION in the build's "
                    "expected-precision table, else FAQ_DEFAULT_THRESHOLD"
    )
    rerank: bool = Field(default=False, description="re-rank the top FAQ_RERANK_K FAQs with the cross-encoder (FAQ_RERANKER); 409 when none is installed")
    arm: OptionalText = Field(
        default=None,
        description=f"retrieval arm, one of {', '.join(VALID_ARMS)}; unset: by configuration (FAQ_AB_SPLIT, "
        "sticky per session_id, else FAQ_DEFAULT_ARM)")
    session_id: OptionalText = Field(default=None, max_length=MAX_SESSION_CHARS,
                                     description="the user's session: keeps one A/B arm for the whole session")
    context: MatchContext | None = Field(default=None, description="the previous turn: previous_faq_id, previous_query")
    filter: Annotated[dict[str, Any] | None, FILTER_GRAMMAR] = Field(
        default=None, description='only FAQs that pass: {"all": [C...], "any": [C...], "none": [C...]}, a condition C '
        'being {"key": K, "value": V} (metadata), {"tag": T} or {"source": S}; docs/filters.md')
    deployment: Literal["production", "test"] = Field(
        default="production", description="production: the published KB; test: the draft, with edits not yet "
                                          "published (any key of the KB; not logged)")

    _query_not_blank = field_validator("query")(_not_blank)
    # a filter the JSON grammar cannot say (the Azure route's metadata OR source), set by the server itself
    _built_filter: Any = PrivateAttr(default=None)

    def parsed_filter(self) -> FaqFilter | None:
        if self._built_filter is not None:
            return self._built_filter
        return None if self.filter is None else parse_filter(self.filter)

    @field_validator("arm")
    @classmethod
    def _known_arm(cls, value: str | None) -> str | None:
        if value is not None and value not in VALID_ARMS:
            raise ValueError(f"unknown arm {value!r}; valid arms: {', '.join(VALID_ARMS)}")
        return value


class BatchMatchRequest(_Strict):
    queries: list[MatchRequest] = Field(min_length=1, max_length=MAX_BATCH)

    @field_validator("queries")
    @classmethod
    def _one_deployment(cls, value: list[MatchRequest]) -> list[MatchRequest]:
        if len({q.deployment for q in value}) > 1:
            raise ValueError("every query of a batch must ask the same deployment (production or test)")
        return value


class FollowUpOut(BaseModel):
    faq_id: str = Field(description="the FAQ this prompt leads to")
    text: str = Field(description="the prompt to show after the answer")


class _FaqFieldsOut(BaseModel):
    """The FAQ's fields a conversation shows with its answer (kb/records.py)."""

    metadata: dict[str, str] = Field(default_factory=dict, description="the FAQ's metadata (keys lower-case)")
    tags: list[str] = Field(default_factory=list)
    source: str | None = Field(default=None, description="where the answer comes from")
    follow_ups: list[FollowUpOut] = Field(default_factory=list, description="prompts to show after the answer, in order")


class AnswerOut(_FaqFieldsOut):
    faq_id: str
    answer: str
    score: float = Field(description="probability 0..1 that this FAQ is the right answer")


class MatchOut(_FaqFieldsOut):
    faq_id: str
    question: str = Field(description="the FAQ's question variant that matched best")
    answer: str
    score: float = Field(description="probability 0..1 that this FAQ is the right answer")


class Timings(BaseModel):
    encode: float
    retrieve: float
    rerank: float
    decide: float = 0.0
    total: float


class MatchResponse(BaseModel):
    request_id: str
    query: str
    arm: str
    index_version: str
    answer: AnswerOut | None
    matches: list[MatchOut]
    decision: Literal["answer", "clarify", "abstain", "chitchat"] = Field(
        description="answer: `answer` is the FAQ; clarify: no FAQ is sure enough but the `options` together are "
                    "(ask the user which one they mean, and send the pick to /feedback as faq_id); abstain: none fits; "
                    "chitchat: the message is small talk, `chitchat` holds its kind and the KB's reply")
    chitchat: ChitchatOut | None = Field(default=None, description="decision chitchat: the kind and the reply")
    options: list[MatchOut] = Field(default_factory=list, description="clarify: the plausible FAQs, best first")
    threshold: float = Field(description="the score the answer needed")
    expected_precision: float | None = Field(
        default=None, description="the share of answers given at this threshold expected to be right (the build's "
                                  "table, for FAQ_OOS_SHARE of out-of-scope traffic); null when the build has no table or a "
                                  "re-ranking stage made the score")
    timings_ms: Timings
    cached: bool = Field(default=False, description="answered from the query cache (same query, options and index)")
    context: ContextOut = Field(default_factory=lambda: ContextOut(applied="none"),
                                description="what the request's context changed")
    language: str = Field(default="en", description="the query's language as detected (ISO 639-1; text in a script "
                                                    "no supported language uses is labelled with its own language, or "
                                                    "`und` when it cannot be told)")
    reason: Literal["language"] | None = Field(
        default=None, description="why the decision was forced: language: the query is in none of the KB's "
                                  "`languages`, so it is not answered (abstain)")
    deployment: Literal["production", "test"] = Field(
        default="production", description="which deployment answered: production (the published KB) or test "
                                          "(the draft)")


class BatchMatchResponse(BaseModel):
    results: list[MatchResponse]


# -- /feedback ----------------------------------------------------------------------------------
class FeedbackRequest(_Strict):
    """Feedback is recorded once per request_id (a second one is a 409). `faq_id` must name an FAQ of
    the knowledge base. `session_id`, when given, must be the one the /match request was sent with."""

    request_id: Text = Field(min_length=1, max_length=MAX_REQUEST_ID_CHARS)
    correct: bool | None = None
    faq_id: OptionalText = Field(default=None, min_length=1, max_length=MAX_ID_CHARS,
                                 description="the FAQ that answers the query (must exist)")
    session_id: OptionalText = Field(
        default=None, max_length=MAX_SESSION_CHARS,
        description="the session_id the /match request was sent with; a different one is refused (403), and with "
                    "FAQ_FEEDBACK_REQUIRES_SESSION it is required for requests that were sent with one")

    @model_validator(mode="after")
    def _something_to_record(self) -> "FeedbackRequest":
        if self.correct is None and self.faq_id is None:
            raise ValueError("give `correct` and/or `faq_id`")
        return self


class FeedbackResponse(BaseModel):
    request_id: str
    recorded: bool


# -- decisions ----------------------------------------------------------------------------------
class PrecisionRow(BaseModel):
    threshold: float
    expected_precision: float | None
    answer_rate: float


class DecisionInfo(BaseModel):
    scoring: Literal["model", "calibration"] = Field(
        description="model: the cross-KB decision model on this build's scale; calibration: the build's cosine curve")
    threshold: float = Field(description="the threshold a request without one is answered at")
    expected_precision: float | None = Field(description="the table's expected precision at that threshold")
    target_precision: float | None = Field(description="FAQ_TARGET_PRECISION, when set")
    oos_share: float = Field(description="the out-of-scope share of traffic the table assumes (FAQ_OOS_SHARE)")
    traffic_queries: int | None = Field(
        default=None, description="logged queries of this build the table comes from (their own scores, no labels, "
                                  "the actual out-of-scope share); null: the table replayed at build time")
    model_labels: int | None = Field(default=None, description="labels of this KB the model was refitted on "
                                                               "(`faq index calibrate`); null: the cross-KB model")
    table: list[PrecisionRow] | None = Field(description="threshold -> expected precision and answer rate")


# -- health -------------------------------------------------------------------------------------
class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    ready: bool
    index_version: str | None = None
    encoder_id: str | None = None
    encoder_runtime: str | None = Field(default=None, description="how the encoder runs: onnx-int8, onnx or torch")
    query_encoder_id: str | None = Field(default=None, description="the encoder of the queries when it is not the "
                                         "build's (FAQ_QUERY_ENCODER, balanced mode)")
    reason: str | None = None
    # parts that cannot answer while /match still can, e.g. {"lexical": "Elasticsearch at ... is unreachable"}
    degraded: dict[str, str] | None = None
    decision: DecisionInfo | None = None


# -- errors -------------------------------------------------------------------------------------
class FieldError(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    error: str
    detail: list[FieldError] | None = None
    request_id: str | None = None


# What any route that reads input may answer instead (the app's handlers and RequestGuardMiddleware
# write ErrorBody for all of them), so OpenAPI documents our error shape, not FastAPI's default one.
#: how every /admin route refuses a caller (app/api/roles.py)
ADMIN_REFUSALS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong token"},
    403: {"model": ErrorBody, "description": "a token of another KB, or of a role that may not do this"},
    429: {"model": ErrorBody, "description": "too many wrong tokens from this address (Retry-After)"},
}

BAD_INPUT_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "invalid JSON"},
    413: {"model": ErrorBody, "description": "body larger than FAQ_MAX_BODY_BYTES"},
    415: {"model": ErrorBody, "description": "Content-Type is not application/json"},
    422: {"model": ErrorBody, "description": "a field is missing, unknown, of the wrong type or out of range"},
}


# -- admin --------------------------------------------------------------------------------------
def _clean_questions(questions: list[str] | None) -> list[str] | None:
    if questions is None:
        return None
    for i, q in enumerate(questions):
        if not q.strip():
            raise ValueError(f"question {i} must not be empty or whitespace only")
    return questions


class FollowUpIn(_Strict):
    """One follow-up prompt; its lengths, and whether the FAQ exists, are the store's checks (kb/records.py)."""

    faq_id: Text
    text: Text


# The FAQ fields of conversation-grade matching: types and counts here, the rest (key and value lengths, keys
# that collide once lower-cased, follow-up targets, language codes) in the store's own checks, which every import
# path shares.
Metadata = Annotated[dict[Text, Text], Field(max_length=MAX_METADATA_KEYS)]
FollowUps = Annotated[list[FollowUpIn], Field(max_length=MAX_FOLLOW_UPS)]
#: the answer in other languages: ISO 639-1 code (app/settings.py LANGUAGE_CODES) -> answer (kb/records.py)
Answers = Annotated[dict[Text, Text], Field(
    max_length=len(LANGUAGE_CODES),
    description=f"the answer in other languages: language code ({', '.join(LANGUAGE_CODES)}) -> answer; /match "
                "answers a query detected in one of them with it")]


class FaqCreate(_Strict):
    faq_id: Text = Field(min_length=1, max_length=MAX_ID_CHARS)
    answer: Text = Field(min_length=1, max_length=20_000)
    questions: list[Text] = Field(min_length=1, max_length=500)
    tags: list[Text] = Field(default_factory=list, max_length=50)
    metadata: Metadata = Field(default_factory=dict)
    source: OptionalText = None
    follow_ups: FollowUps = Field(default_factory=list)
    context_only: bool = False
    answers: Answers = Field(default_factory=dict)

    _faq_id_not_blank = field_validator("faq_id")(_not_blank)
    _answer_not_blank = field_validator("answer")(_not_blank)
    _questions_ok = field_validator("questions")(_clean_questions)


class FaqReplace(_Strict):
    """PUT: the whole FAQ except its id."""

    answer: Text = Field(min_length=1, max_length=20_000)
    questions: list[Text] = Field(min_length=1, max_length=500)
    tags: list[Text] = Field(default_factory=list, max_length=50)
    metadata: Metadata = Field(default_factory=dict)
    source: OptionalText = None
    follow_ups: FollowUps = Field(default_factory=list)
    context_only: bool = False
    answers: Answers = Field(default_factory=dict)

    _answer_not_blank = field_validator("answer")(_not_blank)
    _questions_ok = field_validator("questions")(_clean_questions)


class FaqPatch(_Strict):
    """PATCH: only the given fields change (`"source": null` clears the source; `answers` replaces the whole set,
    `{}` clears it)."""

    answer: OptionalText = Field(default=None, min_length=1, max_length=20_000)
    questions: list[Text] | None = Field(default=None, min_length=1, max_length=500)
    tags: list[Text] | None = Field(default=None, max_length=50)
    metadata: Metadata | None = None
    source: OptionalText = None
    follow_ups: FollowUps | None = None
    context_only: bool | None = None
    answers: Answers | None = None

    _questions_ok = field_validator("questions")(_clean_questions)

    @field_validator("answer")
    @classmethod
    def _answer_not_blank(cls, value: str | None) -> str | None:
        return None if value is None else _not_blank(value)


class FaqOutModel(BaseModel):
    faq_id: str
    answer: str
    tags: list[str]
    questions: list[str]
    metadata: dict[str, str] = Field(default_factory=dict)
    source: str | None = None
    follow_ups: list[FollowUpOut] = Field(default_factory=list)
    context_only: bool = False
    answers: dict[str, str] = Field(default_factory=dict, description="the answer in other languages")
    created_at: datetime | None = None
    updated_at: datetime | None = None


class FaqPage(BaseModel):
    total: int
    offset: int
    limit: int
    items: list[FaqOutModel]


class IndexInfo(BaseModel):
    version: str | None
    manifest: dict[str, Any] | None
    delta_size: int | None
    tombstones: int | None
    kb_revision: int | None
    loaded_at: datetime | None
    reason: str | None = None
    decision: DecisionInfo | None = None


class ReloadResult(BaseModel):
    previous_version: str | None
    version: str | None
    swapped: bool


# -- review queues ---------------------------------------------------------------------------------
ReviewKey = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="an item's review_key, as GET /admin/review gives it")]


class ProposedPhrasing(BaseModel):
    review_key: str
    faq_id: str
    question: str = Field(description="what users asked, to add as a phrasing of the FAQ")
    count: int = Field(description="logged queries behind it")
    evidence: dict[str, int] = Field(description="why: key (words agree with a phrasing), feedback_correct, feedback_faq_id, siamese")
    score_max: float | None = None
    matched_phrasing: str | None = None


class UnansweredQuery(BaseModel):
    query: str
    count: int


class UnansweredCluster(BaseModel):
    review_key: str
    size: int = Field(description="logged queries in the cluster")
    queries: list[UnansweredQuery]


class ReviewQueues(BaseModel):
    phrasings: list[ProposedPhrasing]
    clusters: list[UnansweredCluster]
    dismissed_phrasings: int
    dismissed_clusters: int


class AcceptResult(BaseModel):
    faq: FaqOutModel
    added: int = Field(description="1 when the phrasing was added, 0 when the FAQ had it already")


class DismissRequest(_Strict):
    queue: Literal["phrasing", "cluster", "lint"]
    key: Annotated[str | None, Field(None, pattern=r"^[0-9a-f]{64}$",
                                     description="the item's review_key (phrasing and cluster queues)"), STORABLE]
    faq_id: Annotated[str | None, Field(None, max_length=MAX_ID_CHARS,
                                        description="the FAQ of a lint finding (`faq kb lint`): the finding is "
                                                    "dismissed for its answer as it is now"), STORABLE]
    reason: Annotated[str | None, Field(None, max_length=500, description="why; needed for lint findings"), STORABLE]

    @model_validator(mode="after")
    def _one_target(self) -> "DismissRequest":
        if self.queue == "lint" and self.faq_id is None:
            raise ValueError("faq_id: a lint finding is named by its FAQ")
        if self.queue != "lint" and self.key is None:
            raise ValueError(f"key: a {self.queue} is named by its review_key")
        return self


class DismissalOut(BaseModel):
    queue: str
    key: str
    subject: str
    reason: str | None
    dismissed_by: str | None
    created_at: datetime


# -- /admin/publish, /admin/rollback ------------------------------------------------------------------
class PublishRequest(_Strict):
    note: OptionalText = Field(default=None, max_length=MAX_NOTE_CHARS,
                              description="what this publication is")
    force: bool = Field(default=False, description="publish even when the KB's labels say the draft matches worse")


class RollbackRequest(_Strict):
    to: int = Field(ge=1, lt=10**MAX_NUMBER_DIGITS, description="the publication whose content production serves again")
    note: OptionalText = Field(default=None, max_length=MAX_NOTE_CHARS)
