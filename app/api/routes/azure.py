"""`POST /language/:query-knowledgebases?projectName={kb}&deploymentName=...&api-version=...`: Azure AI Language
question answering's runtime API (versions 2021-10-01 and 2023-04-01), as `azure-ai-language-questionanswering`'s
QuestionAnsweringClient calls it, answered from KB `projectName` (docs/migrate-from-azure.md has every field).

The key is the KB's read token in `Ocp-Apim-Subscription-Key`. Scores are our probability (0-1, Azure's scale).
Errors come in Azure's shape, `{"error": {"code", "message", "details", "innererror"}}`, with the status codes
the client maps to its exceptions (401 ClientAuthenticationError, 404 ResourceNotFoundError, others
HttpResponseError); 2023-04-01 also names the code in `x-ms-error-code`. `faqMatch` carries our decision.
"""
from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from app.api import compat
from app.settings import KbSettingsRefused
from app.api.roles import acting_for_key
from app.api.schemas import OptionalText
from kb.filters import CombinedFilter, FaqFilter, fold
from kb.records import MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS, MAX_SOURCE_CHARS

router = APIRouter(tags=["azure"])
API_VERSIONS = ("2021-10-01", "2023-04-01")
#: Azure's default answer when nothing matches (a project's settings.defaultAnswer replaces it)
DEFAULT_ANSWER = "No good match found in KB."
DEFAULT_TOP = 3
Operation = Literal["AND", "OR", "and", "or", "And", "Or"]


class MetadataRecord(compat.Loose):
    key: str = Field(min_length=1, max_length=MAX_METADATA_KEY_CHARS)
    value: str = Field(min_length=1, max_length=MAX_METADATA_VALUE_CHARS)


class MetadataFilter(compat.Loose):
    metadata: list[MetadataRecord] | None = Field(default=None, max_length=compat.MAX_FILTERS)
    logicalOperation: Operation | None = None


class QueryFilters(compat.Loose):
    metadataFilter: MetadataFilter | None = None
    sourceFilter: list[str] | None = Field(default=None, max_length=compat.MAX_FILTERS)
    logicalOperation: Operation | None = None


class AnswerContext(compat.Loose):
    previousQnaId: int | None = None
    previousUserQuery: OptionalText = Field(default=None, max_length=compat.MAX_QUESTION_CHARS)


class ShortAnswerOptions(compat.Loose):
    enable: bool | None = None
    confidenceScoreThreshold: float | None = Field(default=None, ge=0.0, le=1.0)
    topAnswersWithSpan: int | None = Field(default=None, ge=1, le=10)


class AnswersOptions(compat.Loose):
    qnaId: int | None = None
    question: OptionalText = Field(default=None, max_length=compat.MAX_QUESTION_CHARS)
    top: int = Field(default=DEFAULT_TOP, ge=1, le=compat.MAX_TOP)
    userId: OptionalText = Field(default=None, max_length=200)
    confidenceScoreThreshold: float = Field(default=0.0, ge=0.0, le=1.0)
    context: AnswerContext | None = None
    rankerType: Literal["Default", "QuestionOnly"] | None = None
    filters: QueryFilters | None = None
    answerSpanRequest: ShortAnswerOptions | None = None
    includeUnstructuredSources: bool | None = None


def error(status: int, code: str, message: str, version: str | None = None, target: str | None = None,
          inner: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if target is not None:
        body["details"] = [{"code": code, "message": message, "target": target}]
    if inner is not None:
        body["innererror"] = {"code": inner, "message": message}
    headers = dict(headers or {})
    if version == "2023-04-01":
        headers["x-ms-error-code"] = code
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _filter(filters: QueryFilters | None) -> CombinedFilter | None:
    if filters is None:
        return None
    parts = []
    meta = filters.metadataFilter
    if meta is not None and meta.metadata:
        conditions = tuple(sorted({("key", fold(m.key), fold(m.value)) for m in meta.metadata}))
        parts.append(FaqFilter(any_of=conditions) if (meta.logicalOperation or "AND").upper() == "OR"
                     else FaqFilter(all_of=conditions))
    sources = [s.strip() for s in filters.sourceFilter or [] if s.strip()]
    if sources:  # an answer from any of the sources passes
        parts.append(FaqFilter(any_of=tuple(sorted({("source", s[:MAX_SOURCE_CHARS], "") for s in sources}))))
    if not parts:
        return None
    return CombinedFilter(tuple(parts), "or" if (filters.logicalOperation or "AND").upper() == "OR" else "and")


def answer_json(p: compat.Pair) -> dict[str, Any]:
    if p.id == compat.NO_MATCH_ID:
        return {"questions": [], "answer": p.answer, "confidenceScore": 0.0, "id": p.id, "metadata": {}}
    return {"questions": p.questions, "answer": p.answer, "confidenceScore": round(p.score, 4), "id": p.id,
            "source": p.source, "metadata": dict(p.metadata),
            "dialog": {"isContextOnly": p.context_only, "prompts": list(p.prompts)}}


@router.post("/language/:query-knowledgebases", summary="Azure question answering's get answers, from KB projectName",
             dependencies=[Depends(acting_for_key(
                 lambda request: (request.headers.get("ocp-apim-subscription-key") or "").strip(),
                 lambda request: (request.query_params.get("projectName") or "").strip().lower()))],
             openapi_extra=compat.body_schema(AnswersOptions),
             responses={200: {"description": "answers, best first; the default answer (id -1) when none fits"},
                        400: {"description": "InvalidArgument"}, 401: {"description": "a wrong or missing key"},
                        403: {"description": "a key of another project"},
                        404: {"description": "ProjectNotFound, or an api-version this service does not have"}})
async def query_knowledgebases(
    request: Request,
    project_name: str | None = Query(None, alias="projectName", description="the KB's name"),
    deployment_name: str | None = Query(None, alias="deploymentName",
                                        description="test: the KB's draft (edits not yet published); any other "
                                                    "name: the published KB"),
    api_version: str | None = Query(None, alias="api-version", description=" or ".join(API_VERSIONS)),
    key: str | None = Header(None, alias="Ocp-Apim-Subscription-Key", description="the KB's read token"),
) -> JSONResponse:
    # read by hand, not validated by FastAPI: every refusal must come in Azure's shape
    version = api_version
    if version not in API_VERSIONS:  # as Azure's gateway answers a version it does not serve
        return error(404, "404", f"Resource not found: api-version must be one of {', '.join(API_VERSIONS)}")
    project = (project_name or "").strip()
    deployment = (deployment_name or "").strip()
    if not project or not deployment:
        missing = "projectName" if not project else "deploymentName"
        return error(400, "InvalidArgument", f"{missing} is required in the query string", version, missing)
    kb, refusal = await compat.check_key(request, project.lower(), (key or "").strip())
    if refusal is not None and refusal.status == 429:
        return error(429, "TooManyRequests", refusal.reason, version, headers={"Retry-After": str(refusal.retry_after)})
    if refusal is not None and refusal.status == 403:
        return error(403, "403", refusal.reason, version)
    if refusal is not None:
        return error(401, "401", "Access denied due to invalid subscription key or wrong API endpoint. Send the "
                                 "project's read key (`faq kb token --kb NAME --kind read`) as "
                                 "Ocp-Apim-Subscription-Key.", version)
    if kb is None:
        return error(404, "ProjectNotFound", f"no project {project!r}: project names here are KB names",
                     version, inner="KnowledgeBaseNotFound")
    body = await compat.read_body(request, AnswersOptions)
    if isinstance(body, compat.BadBody):
        if body.code is not None:
            return error(body.status, body.code, body.message, version, body.target, headers=body.headers)
        return error(400, "InvalidArgument", f"Invalid input. {body.message if body.invalid_json else body.target + ': ' + body.message}",
                     version, body.target, inner="InvalidRequest" if body.invalid_json else "InvalidParameterValue")
    has_question = bool((body.question or "").strip())
    if body.qnaId is not None and has_question:
        return error(400, "InvalidArgument", "Invalid input. Send either question or qnaId, not both.", version,
                     "qnaId", inner="InvalidParameterValue")
    if body.qnaId is None and not has_question:
        return error(400, "InvalidArgument", "Invalid input. 'Question' must not be empty.", version, "question",
                     inner="InvalidParameterValue")
    try:
        state = await compat.state_for(request, kb)
    except compat.UnknownKb:
        return error(404, "ProjectNotFound", f"no project {project!r} (`faq kb list`)", version,
                     inner="KnowledgeBaseNotFound")
    except KbSettingsRefused as exc:
        return error(503, "ServiceUnavailable", str(exc), version)
    ctx = body.context
    outcome = await compat.respond(
        state, qna_id=body.qnaId, question=body.question or "", top=body.top,
        threshold=body.confidenceScoreThreshold, default_answer=state.settings.default_answer or DEFAULT_ANSWER,
        flt=_filter(body.filters), previous_qna_id=ctx.previousQnaId if ctx else None,
        previous_query=ctx.previousUserQuery if ctx else None, user_id=body.userId,
        deployment="test" if deployment.lower() == "test" else "production")
    if not isinstance(outcome, compat.Outcome):
        status, message, headers = outcome
        return error(status, "TooManyRequests" if status == 429 else "ServiceUnavailable", message, version,
                     headers=headers)
    return JSONResponse({"answers": [answer_json(p) for p in outcome.pairs], "faqMatch": outcome.extra()})
