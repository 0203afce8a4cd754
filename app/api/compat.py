"""What the QnA Maker and Azure question answering routes share (app/api/routes/qnamaker.py, azure.py):
a QnA id for every FAQ, an FAQ as a QnA pair, a question matched through the same `service.match` as
`/match` (same pipeline, query log, metrics and cache), and the key check.

QnA ids: an FAQ whose id is a number (imported from QnA Maker or Azure) keeps it; the others get a stable
number (kb/formats/base.py `qna_ids`), the same one `faq kb export --format qnamaker|azure` writes.

Which answers a compat route returns: the decision of `/match` decides. `answer`: the FAQ, then the other
matches above the request's threshold, up to `top`. `clarify`: the options (the services' way to ask
"did you mean"). `abstain`: the service's no-match answer (id -1, score 0). `chitchat`: the small-talk
reply as a pair with metadata `editorial: chitchat`, as Azure's chit-chat pairs have. The request's own
threshold filters on top of that, as the services do. A pair's answer is the FAQ's answer in the question's
language when it has one (`service.answer_in`, as /match answers); a qnaId lookup has no question: `answer`.

A qnaId lookup reaches only what a question could: a pair the request's filters exclude, or a context-only
pair the previous pair does not prompt to, is the no-match answer. A userId is the request's session (its A/B
arm, its query log rows); neither service limits its length, so one longer than a session id is logged as a
digest of it, the same for all of that user's requests.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fastapi import Request
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api import service
from app.api.deps import Refusal, key_refusal
from app.api.resident_kbs import ResidentKbs, UnknownKb
from app.api.errors import body_problem, format_validation_errors, problem_of
from app.api.schemas import MAX_SESSION_CHARS, MatchContext, MatchRequest, MatchResponse
from app.api.state import KbState
from app.settings import DEFAULT_KB, KB_NAME_PATTERN
from app.store.catalog import TOKEN_KINDS
from app.conversation.turns import Turn, plan_turn
from kb.filters import CombinedFilter, FaqFilter
from kb.formats.base import qna_ids

NO_MATCH_ID = -1
#: conditions in one request's filters (each costs a pass over the KB's FAQs)
MAX_FILTERS = 50
#: the longest question the compat routes take: /match's limit
MAX_QUESTION_CHARS = 1000
MAX_TOP = 50


class Loose(BaseModel):
    """A request model of either service: fields it does not know are ignored, as the services do (a bot
    may send newer ones)."""

    model_config = ConfigDict(extra="ignore")


@dataclass
class Pair:
    """An FAQ as both services show a QnA pair."""

    id: int
    faq_id: str | None
    questions: list[str]
    answer: str
    score: float  # 0..1
    source: str | None
    metadata: dict[str, str]
    context_only: bool = False
    prompts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Outcome:
    """What a compat route answers: the pairs and what `/match` decided (null for a qnaId lookup)."""

    pairs: list[Pair]
    response: MatchResponse | None = None
    deployment: str = "production"  # which one answered: production (published) or test (the draft)

    def extra(self) -> dict[str, Any]:
        """The extra field the official clients ignore: our decision, options and expected precision."""
        r = self.response
        if r is None:
            found = bool(self.pairs) and self.pairs[0].id != NO_MATCH_ID
            return {"decision": "answer" if found else "abstain", "lookup": True, "deployment": self.deployment}
        return {"requestId": r.request_id, "decision": r.decision, "faqId": r.answer.faq_id if r.answer else None,
                "options": [o.faq_id for o in r.options], "threshold": r.threshold,
                "expectedPrecision": r.expected_precision, "context": r.context.applied,
                "indexVersion": r.index_version, "deployment": r.deployment}


class QnaIdMap:
    """faq_id <-> QnA id for the served snapshot, worked out once per snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: Any = None
        self._ids: dict[str, int] = {}
        self._faqs: dict[int, str] = {}

    def of(self, retriever: Any) -> tuple[dict[str, int], dict[int, str]]:
        key = (id(retriever), getattr(retriever, "kb_revision", None))
        with self._lock:
            if key != self._key:
                self._ids = qna_ids(retriever.answers.keys())
                self._faqs = {n: f for f, n in self._ids.items()}
                self._key = key
            return self._ids, self._faqs


def id_map(state: KbState) -> QnaIdMap:
    # kept on the state, so it goes when the KB is unloaded (setdefault: two first requests share one)
    return state.__dict__.setdefault("_qna_ids", QnaIdMap())


def faq_of(state: KbState, qna_id: int | None, deployment: str = "production") -> str | None:
    """The FAQ a QnA id names in the deployment's snapshot, or None."""
    if qna_id is None:
        return None
    _, faqs = id_map(state).of(state.require_retriever(deployment))
    return faqs.get(qna_id)


def pair(retriever: Any, ids: dict[str, int], faq_id: str, score: float, language: str | None = None) -> Pair:
    """The FAQ as a QnA pair; its answer in `language` (the question's) when it has one, as /match answers."""
    answer, _tags = retriever.answers.get(faq_id, ("", []))
    details = retriever.details.get(faq_id)
    follow_ups = list(getattr(details, "follow_ups", None) or [])
    return Pair(id=ids.get(faq_id, NO_MATCH_ID), faq_id=faq_id,
                questions=[q for _, q in retriever.faq_variants(faq_id)],
                answer=service.answer_in(retriever, faq_id, language, answer), score=score,
                source=getattr(details, "source", None), metadata=dict(getattr(details, "metadata", None) or {}),
                context_only=bool(getattr(details, "context_only", False)),
                prompts=[{"displayOrder": i, "qnaId": ids[f["faq_id"]], "displayText": f["text"]}
                         for i, f in enumerate(follow_ups) if f["faq_id"] in ids])


def small_talk_pair(kind: str, answer: str) -> Pair:
    # a stable id per kind, far from the FAQs' (kb/formats/base.py numbers those from 1_000_000 up)
    return Pair(id=900_000 + zlib.crc32(kind.encode()) % 90_000, faq_id=None, questions=[], answer=answer, score=1.0,
                source="chitchat", metadata={"editorial": "chitchat", "kind": kind})


def no_match(answer: str) -> Pair:
    return Pair(id=NO_MATCH_ID, faq_id=None, questions=[], answer=answer, score=0.0, source=None, metadata={})


def lookup(state: KbState, qna_id: int, *, flt: FaqFilter | CombinedFilter | None = None,
           previous_qna_id: int | None = None, deployment: str = "production") -> Outcome | None:
    """The pair with this QnA id, score 1 (both services answer a qnaId without ranking); None if unknown,
    or if a question could not be answered with it either: the request's filters exclude it, or it is
    context-only and the previous pair does not prompt to it."""
    retriever = state.require_retriever(deployment)
    ids, faqs = id_map(state).of(retriever)
    faq_id = faqs.get(qna_id)
    if faq_id is None:
        return None
    # the match path's own rules (app/match/): a lookup must not reach what a query cannot
    if flt is not None and not flt.is_empty and faq_id not in retriever.select(flt).faq_ids:
        return None
    if faq_id in getattr(retriever, "context_only", frozenset()):
        previous = faqs.get(previous_qna_id) if previous_qna_id is not None else None
        if faq_id not in plan_turn(Turn(previous_faq_id=previous), "", retriever).prompted:
            return None
    return Outcome([pair(retriever, ids, faq_id, 1.0)], deployment=deployment)


def session_of(user_id: str | None) -> str | None:
    """The session a compat request is logged and given its A/B arm under: its userId, or a digest of one
    longer than a session id may be (neither service limits userId), the same for all of that user's
    requests so the arm stays theirs."""
    if not user_id:
        return None
    if len(user_id) <= MAX_SESSION_CHARS:
        return user_id
    return "userId-sha256:" + hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()


async def ask(state: KbState, question: str, *, top: int, threshold: float, default_answer: str,
              flt: FaqFilter | CombinedFilter | None = None, previous_qna_id: int | None = None,
              previous_query: str | None = None, user_id: str | None = None,
              deployment: str = "production") -> Outcome:
    """Match `question` as `/match` does and turn its decision into pairs (module docstring)."""
    previous = faq_of(state, previous_qna_id, deployment) if previous_qna_id is not None else None
    context = None
    if previous is not None or previous_query:
        context = MatchContext(previous_faq_id=previous, previous_query=previous_query or None)
    # ranked as deep as /match ranks by default whatever `top` is: the decision (clarify needs rivals) is the same
    depth = max(top, state.settings.default_top_k)
    item = MatchRequest(query=question, top_k=depth, session_id=session_of(user_id), context=context,
                        deployment=deployment)
    if flt is not None and not flt.is_empty:
        item._built_filter = flt
    response = (await service.match(state, [item]))[0]
    retriever = state.require_retriever(deployment)
    ids, _ = id_map(state).of(retriever)
    if response.decision == "chitchat" and response.chitchat is not None:
        return Outcome([small_talk_pair(response.chitchat.kind, response.chitchat.answer)], response)
    if response.decision == "answer" and response.answer is not None:
        chosen = [(response.answer.faq_id, response.answer.score)]
        chosen += [(m.faq_id, m.score) for m in response.matches if m.faq_id != response.answer.faq_id]
    elif response.decision == "clarify":
        chosen = [(o.faq_id, o.score) for o in response.options]
    else:
        chosen = []
    pairs = [pair(retriever, ids, f, s, response.language) for i, (f, s) in enumerate(chosen[:top])
             if i == 0 or s > threshold]
    if pairs and pairs[0].score < threshold:
        pairs = []
    return Outcome(pairs or [no_match(default_answer)], response)


async def respond(state: KbState, *, qna_id: int | None, question: str, top: int, threshold: float,
                  default_answer: str, flt: FaqFilter | CombinedFilter | None, previous_qna_id: int | None,
                  previous_query: str | None, user_id: str | None,
                  deployment: str = "production") -> Outcome | tuple[int, str, dict[str, str]]:
    """What both routes answer: the pair a qnaId names (the no-match answer when it names none), else the
    question matched (`ask`); or `service_error`'s (status, message, headers), which each route writes in
    its own service's error shape."""
    try:
        if qna_id is not None:
            return (lookup(state, qna_id, flt=flt, previous_qna_id=previous_qna_id, deployment=deployment)
                    or Outcome([no_match(default_answer)], deployment=deployment))
        return await ask(state, question, top=top, threshold=threshold, default_answer=default_answer, flt=flt,
                         previous_qna_id=previous_qna_id, previous_query=previous_query, user_id=user_id,
                         deployment=deployment)
    except Exception as exc:  # noqa: BLE001 - only the service's own errors are answered here
        problem = service_error(exc)
        if problem is None:
            raise
        return problem


async def state_for(request: Request, kb: str) -> KbState:
    """The KB's served state (loaded on its first request); UnknownKb when there is none."""
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    state = resident_kbs.peek(kb)
    if state is not None:
        return state
    return await run_in_threadpool(resident_kbs.get, kb)


async def check_key(request: Request, name: str, key: str) -> tuple[str | None, Refusal | None]:
    """(the KB `name` names, or None when no KB can have that name; why `key` may not read it, or None).
    The key must be a token of the KB (its read key, or a person's of any role) or FAQ_ADMIN_TOKEN, whatever
    FAQ_MATCH_REQUIRES_KEY says (both services always need their key); with a name no KB can have, it is checked
    against the default KB, so a refusal looks the same whether or not such a KB could exist."""
    kb = name if re.fullmatch(KB_NAME_PATTERN, name) else None
    refusal = await run_in_threadpool(key_refusal, request, kb or DEFAULT_KB, key, TOKEN_KINDS, "read")
    if refusal is not None and refusal.status == 403 and kb is None:
        refusal = Refusal(401, refusal.reason)  # another KB's token, on a name no KB has: no KB to belong to
    return kb, refusal


@dataclass
class BadBody:
    """Why a request body was refused: the field (`body` for the whole) and the reason."""

    target: str
    message: str
    invalid_json: bool = False
    #: the request guard's refusals of the body itself (408 too slow, 413 too large, 415 not JSON) keep theirs
    status: int = 400
    headers: dict[str, str] = field(default_factory=dict)
    #: each status's code in the services' error shapes
    CODES: ClassVar[dict[int, str]] = {408: "RequestTimeout", 413: "PayloadTooLarge", 415: "UnsupportedMediaType"}

    @property
    def code(self) -> str | None:
        """The error code of a status other than 400 (None: the route's own code for a bad argument)."""
        return self.CODES.get(self.status)


async def read_body(request: Request, model: Any) -> Any:
    """The JSON body as `model` (an empty body is `{}`), or a BadBody naming the first bad field and why,
    in the words of /match's errors (app/api/errors.py)."""
    try:
        raw = await request.body()
    except StarletteHTTPException as exc:  # the request guard's (app/api/middleware/request_guard.py)
        return BadBody("body", str(exc.detail), status=exc.status_code, headers=dict(exc.headers or {}))
    try:
        return model.model_validate(json.loads(raw or b"{}"))
    except ValidationError as exc:
        first = exc.errors()[0]
        return BadBody(".".join(str(p) for p in first["loc"]) or "body", _reason(first))
    except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, a huge number, nesting past the stack
        return BadBody("body", f"the body is not valid JSON: {body_problem(exc) or exc}", invalid_json=True)


def _reason(error: Any) -> str:
    """Why a field was refused, from a pydantic error, without pydantic's wording."""
    kind, ctx = error.get("type"), error.get("ctx") or {}
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind == "string_unicode":  # a lone surrogate (JSON's \ud800 escape) in a field without STORABLE
        return "must be valid Unicode text (it contains an unpaired surrogate)"
    return format_validation_errors([error])[0]["message"]


__all__ = ["MAX_FILTERS", "MAX_QUESTION_CHARS", "MAX_TOP", "Loose", "NO_MATCH_ID", "BadBody", "Outcome", "Pair", "UnknownKb", "ask",
           "check_key", "small_talk_pair", "faq_of", "lookup", "no_match", "read_body", "respond", "session_of",
           "state_for"]


def service_error(exc: BaseException) -> tuple[int, str, dict[str, str]] | None:
    """(status, message, headers) of an error `service.match` raises that is not a bug (app/api/errors.py
    `problem_of`, the one table), which each compat route writes in its service's shape; None for others."""
    problem = problem_of(exc)
    return None if problem is None else (problem.status, problem.message, dict(problem.headers))

def body_schema(model: Any) -> dict[str, Any]:
    """`openapi_extra` documenting `model` as the JSON body of a route that reads its body by hand (to answer
    errors in another service's shape), with the model's nested definitions inlined."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.split("/")[-1]])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline(schema)}}}}
