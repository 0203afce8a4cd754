"""`POST /qnamaker/knowledgebases/{kb}/generateAnswer`: the QnA Maker runtime API, as Bot Framework bots and
`botbuilder-ai`'s QnAMaker call it, answered from KB `kb` (docs/migrate-from-azure.md has every field).

The key is the KB's read token (`faq kb token --kb NAME --kind read`) in `Authorization: EndpointKey <key>`
(always needed). Scores are our probability on QnA Maker's 0-100 scale. Errors come in QnA Maker's shape,
`{"error": {"code", "message", "target"}}`, with its codes (BadArgument, Unauthorized, Forbidden, KbNotFound,
QuotaExceeded, ServiceError). `faqMatch` carries our decision, options and expected precision.
"""
from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import Field, field_validator

from app.api import compat
from app.settings import KbSettingsRefused
from app.api.roles import acting_for_key
from app.api.schemas import OptionalText
from kb.filters import FaqFilter, fold
from kb.records import MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS

router = APIRouter(tags=["qnamaker"])
#: QnA Maker's own no-match answer (its App Service's DefaultAnswer setting)
DEFAULT_ANSWER = "No good match found in KB."


class StrictFilter(compat.Loose):
    name: str = Field(min_length=1, max_length=MAX_METADATA_KEY_CHARS)
    value: str = Field(min_length=1, max_length=MAX_METADATA_VALUE_CHARS)


class QnaContext(compat.Loose):
    previousQnAId: int | None = None
    previousUserQuery: OptionalText = Field(default=None, max_length=compat.MAX_QUESTION_CHARS)

    @field_validator("previousQnAId", mode="before")
    @classmethod
    def _id(cls, value: Any) -> Any:
        return _qna_id(value)


class GenerateAnswer(compat.Loose):
    question: OptionalText = Field(default=None, max_length=compat.MAX_QUESTION_CHARS)
    top: int = Field(default=1, ge=1, le=compat.MAX_TOP)
    scoreThreshold: float = Field(default=0.0, ge=0.0, le=100.0)
    strictFilters: list[StrictFilter] | None = Field(default=None, max_length=compat.MAX_FILTERS)
    strictFiltersCompoundOperationType: Literal["AND", "OR", "and", "or", "And", "Or"] | None = None
    context: QnaContext | None = None
    qnaId: int | None = None
    isTest: bool = False  # true: the KB's draft (edits not yet published), as QnA Maker's test index
    rankerType: OptionalText = Field(default=None, max_length=50)
    userId: OptionalText = Field(default=None, max_length=200)

    @field_validator("qnaId", mode="before")
    @classmethod
    def _id(cls, value: Any) -> Any:
        return _qna_id(value)


def _qna_id(value: Any) -> Any:
    """QnA Maker's runtime takes ids as numbers or strings; 0 and "" mean none (botbuilder sends qnaId 0)."""
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return None
        if value.lstrip("-").isdigit() and len(value) < 12:
            value = int(value)
    return None if value == 0 else value


def error(status: int, code: str, message: str, target: str | None = None,
          headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if target is not None:
        body["target"] = target
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _filter(body: GenerateAnswer) -> FaqFilter | None:
    if not body.strictFilters:
        return None
    conditions = tuple(sorted({("key", fold(f.name), fold(f.value)) for f in body.strictFilters}))
    if (body.strictFiltersCompoundOperationType or "AND").upper() == "OR":
        return FaqFilter(any_of=conditions)
    return FaqFilter(all_of=conditions)


def answer_json(p: compat.Pair) -> dict[str, Any]:
    if p.id == compat.NO_MATCH_ID:  # as the service writes its no-match answer
        return {"questions": [], "answer": p.answer, "score": 0.0, "id": p.id, "source": None, "metadata": []}
    return {"questions": p.questions, "answer": p.answer, "score": round(p.score * 100.0, 2), "id": p.id,
            "source": p.source, "metadata": [{"name": k, "value": v} for k, v in p.metadata.items()],
            "context": {"isContextOnly": p.context_only,
                        "prompts": [{**x, "qna": None} for x in p.prompts]}}


def _key(request: Request) -> str:
    raw = request.headers.get("authorization") or request.headers.get("ocp-apim-subscription-key") or ""
    scheme, _, rest = raw.strip().partition(" ")
    return rest.strip() if scheme.lower() in ("endpointkey", "bearer") and rest else raw.strip()


@router.post("/qnamaker/knowledgebases/{kb}/generateAnswer", summary="QnA Maker's generateAnswer, from KB `kb`",
             dependencies=[Depends(acting_for_key(_key, lambda request: request.path_params.get("kb")))],
             openapi_extra={**compat.body_schema(GenerateAnswer),
                 "parameters": [{"name": "Authorization", "in": "header", "required": False,
                                 "schema": {"type": "string"}, "description": "EndpointKey <the KB's read token>"}]},
             responses={200: {"description": "answers, best first; the no-match answer (id -1) when none fits"},
                        400: {"description": "BadArgument"}, 401: {"description": "Unauthorized"},
                        403: {"description": "Forbidden: a key of another KB"},
                        404: {"description": "KbNotFound"}, 429: {"description": "QuotaExceeded"}})
async def generate_answer(request: Request, kb: str) -> JSONResponse:
    name = kb
    kb, refusal = await compat.check_key(request, name, _key(request))
    if refusal is not None and refusal.status == 429:
        return error(429, "QuotaExceeded", refusal.reason, headers={"Retry-After": str(refusal.retry_after)})
    if refusal is not None and refusal.status == 403:
        return error(403, "Forbidden", refusal.reason)
    if refusal is not None:
        return error(401, "Unauthorized", "Access denied: send the KB's read key as `Authorization: EndpointKey "
                                          "<key>` (`faq kb token --kb NAME --kind read`)")
    if kb is None:
        return error(404, "KbNotFound", f"no knowledge base {name!r}: KB names are a-z, 0-9, '-' and '_'")
    body = await compat.read_body(request, GenerateAnswer)
    if isinstance(body, compat.BadBody):
        return error(body.status, body.code or "BadArgument",
                     body.message if body.invalid_json or body.code else f"{body.target}: {body.message}",
                     body.target, headers=body.headers)
    if body.qnaId is None and not (body.question or "").strip():
        return error(400, "BadArgument", "question must not be empty (or send qnaId)", "question")
    try:
        state = await compat.state_for(request, kb)
    except compat.UnknownKb:
        return error(404, "KbNotFound", f"no knowledge base {kb!r} (`faq kb list`)")
    except KbSettingsRefused as exc:
        return error(503, "ServiceUnavailable", str(exc))
    ctx = body.context
    outcome = await compat.respond(
        state, qna_id=body.qnaId, question=body.question or "", top=body.top, threshold=body.scoreThreshold / 100.0,
        default_answer=state.settings.default_answer or DEFAULT_ANSWER, flt=_filter(body),
        previous_qna_id=ctx.previousQnAId if ctx else None, previous_query=ctx.previousUserQuery if ctx else None,
        user_id=body.userId, deployment="test" if body.isTest else "production")
    if not isinstance(outcome, compat.Outcome):
        status, message, headers = outcome
        return error(status, "QuotaExceeded" if status == 429 else "ServiceError", message, headers=headers)
    decision = outcome.response.decision if outcome.response is not None else "answer"
    return JSONResponse({"answers": [answer_json(p) for p in outcome.pairs], "debugInfo": None,
                         # botbuilder's QnAMakerDialog asks "did you mean" when this is on: our clarify
                         "activeLearningEnabled": decision == "clarify", "faqMatch": outcome.extra()})
