"""The verbs the HTTP routes and the console share: match queries, record feedback, make a KB write visible,
and an FAQ as the API shows it.

Both front ends call these, so a question asked on the console is answered, logged and counted exactly as
a `/match` request, and a console FAQ write refreshes the served retriever as an admin API write does.
Each front end turns the exceptions raised here into its own answer (JSON errors, or pages).
"""
from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from starlette.concurrency import run_in_threadpool

from app.api.schemas import FaqOutModel, MatchRequest, MatchResponse
from app.api.state import KbState
from app.match.arms import arm_split, resolve_arm, uses_stages
from app.match import MatchQuery, MatchResult, NoStagesError
from app.conversation.turns import Turn
from models.language import Detection
from models.language import detect as detect_language

log = logging.getLogger(__name__)



# -- match -----------------------------------------------------------------------------------------
def arm_of(state: KbState, item: MatchRequest) -> str:
    """The arm a request runs: its own `arm`, else the A/B split (sticky per session_id; without a
    session, random per request), else FAQ_DEFAULT_ARM; `rerank: true` adds the re-ranking stage."""
    arm = item.arm
    if arm is None:
        split = arm_split(state.settings)
        arm = split.assign(item.session_id or uuid.uuid4().hex) if split is not None else state.settings.default_arm
    return resolve_arm(arm, item.rerank)


@dataclass
class MatchTrace:
    """What one `match` call ranked with, for the console's "why it matched": the pipeline's own results
    carry more than a response shows (each FAQ's cosines), and the retriever they were ranked on is the one
    to explain them with. Handing them back costs nothing; matching again would encode and search twice, and
    after a hot swap could explain another index's answer."""

    retriever: Any = None
    results: list[MatchResult] = field(default_factory=list)


async def match(state: KbState, items: list[MatchRequest], trace: MatchTrace | None = None) -> list[MatchResponse]:
    """Answer `items` on the KB's served index through its batcher, count them in the metrics and queue their
    query-log rows. Raises NoStagesError when an arm needs re-ranking stages and none is installed, and the
    batcher's and pipeline's own errors (NoIndexError, Overloaded, DeadlineExceeded, LexicalUnavailable...)."""
    arms = [arm_of(state, item) for item in items]
    for arm in arms:
        if uses_stages(arm) and not state.stages:
            raise NoStagesError(state.stage_problem, arm)
    # one deployment per request (a batch's queries share it: schemas.py); pinned: this request finishes on this
    # index even if a swap happens
    deployment = items[0].deployment if items else "production"
    retriever = state.require_retriever(deployment)
    pipeline = state.pipeline_for(deployment)
    settings = state.settings
    rewrite = state.rewrites.for_retriever(settings.synonyms, retriever)
    # the client's own words are read for their language once, whatever the synonyms make of them: it routes the
    # query's vector and calibration (the pipeline), picks the answers' language and passes the KB's `languages`
    detections = [detect_language(item.query) for item in items]
    queries = [
        MatchQuery(
            query=rewrite(item.query),
            top_k=item.top_k if item.top_k is not None else settings.default_top_k,
            threshold=item.threshold,
            arm=arm,
            filter=item.parsed_filter(),
            turn=None if item.context is None else Turn(item.context.previous_faq_id, item.context.previous_query),
            language=detection.language,
        )
        for item, arm, detection in zip(items, arms, detections)
    ]
    assert state.batcher is not None
    state.in_flight += 1  # the KB is not unloaded under this request (app/api/resident_kbs.py)
    try:
        results = await state.batcher.submit(queries, retriever, pipeline)
    finally:
        state.in_flight -= 1
    if trace is not None:
        trace.retriever, trace.results = retriever, list(results)
    # the client's own words are echoed and logged, whatever the synonyms made of them
    responses = [in_language(_response(arm, result, retriever, item.query, detection.language, deployment),
                             settings.languages, detection)
                 for item, arm, result, detection in zip(items, arms, results, detections)]
    for response in responses:
        state.metrics.observe_match(response.timings_ms.model_dump(), answered=response.answer is not None,
                                    cached=response.cached, kb=state.kb, decision=response.decision)
    if settings.query_log and deployment == "production":  # the draft's answers are the editors', not users'
        state.log_matches([_log_row(item, response) for item, response in zip(items, responses)])
    return responses


def in_language(response: MatchResponse, languages: list[str] | None, detection: Detection) -> MatchResponse:
    """The response with its query's language (`detection`, of the client's words), and refused (abstain, reason
    "language") when the KB answers only `languages` and the query is clearly in another (models/language.py
    `Detection.is_foreign`)."""
    response.language = detection.language
    if languages and response.decision != "chitchat" and detection.is_foreign(languages):
        response.decision, response.reason = "abstain", "language"
        response.answer, response.options = None, []
    return response


def _faq_fields(faq_id: str, retriever: Any) -> dict:
    """The FAQ's metadata, tags, source and follow-ups from the KB snapshot the answering retriever reflects,
    which is where its answer text comes from too, so an edit shows in both after the same refresh."""
    answers = getattr(retriever, "answers", None) or {}
    details = (getattr(retriever, "details", None) or {}).get(faq_id)
    tags = answers.get(faq_id, (None, []))[1]
    if details is None:
        return {"metadata": {}, "tags": list(tags or []), "source": None, "follow_ups": []}
    return {"metadata": dict(details.metadata), "tags": list(tags or []), "source": details.source,
            "follow_ups": [dict(f) for f in details.follow_ups]}


def answer_in(retriever: Any, faq_id: str, language: str | None, answer: str) -> str:
    """The FAQ's answer in `language` when it has one (its `answers`, from the KB snapshot the retriever reflects,
    as `_faq_fields` reads), else `answer`, its main one: the text /match and the compat routes answer with."""
    if language is None:
        return answer
    details = (getattr(retriever, "details", None) or {}).get(faq_id)
    return (getattr(details, "answers", None) or {}).get(language) or answer


def _match_out(m: Any, retriever: Any, language: str | None = None) -> dict:
    return {"faq_id": m.faq_id, "question": m.question, "answer": answer_in(retriever, m.faq_id, language, m.answer),
            "score": m.score, **_faq_fields(m.faq_id, retriever)}


def _response(arm: str, result: MatchResult, retriever: Any = None, asked: str | None = None,
              language: str | None = None, deployment: str = "production") -> MatchResponse:
    """`result` as the API answers it; each answer text in `language` (the query's) where the FAQ has one."""
    answer = result.answer
    return MatchResponse.model_validate(
        {
            "request_id": uuid.uuid4().hex,
            "query": result.query if asked is None else asked,
            "arm": arm,
            "index_version": result.index_version,
            "answer": None if answer is None else {
                "faq_id": answer.faq_id, "answer": answer_in(retriever, answer.faq_id, language, answer.answer),
                "score": answer.score, **_faq_fields(answer.faq_id, retriever)},
            "matches": [_match_out(m, retriever, language) for m in result.matches],
            "decision": result.decision,
            "options": [_match_out(m, retriever, language) for m in result.options],
            "threshold": result.threshold,
            "expected_precision": result.expected_precision,
            "timings_ms": result.timings_ms,
            "cached": result.cached,
            "context": result.context,
            "chitchat": result.small_talk,
            "deployment": deployment,
        }
    )


def _log_row(item: MatchRequest, response: MatchResponse) -> dict:
    """One query_log row: `faq_id` is the FAQ served as the answer (None: no answer) and `score` the best
    match's score either way, so near misses under the threshold stay visible in the log."""
    best = response.matches[0] if response.matches else None
    return {
        "request_id": response.request_id,
        "created_at": datetime.now(timezone.utc),
        "arm": response.arm,
        "session_id": item.session_id,
        "query": response.query,
        "faq_id": response.answer.faq_id if response.answer else None,
        "score": best.score if best else None,
        "latency_ms": response.timings_ms.total,
        "index_version": response.index_version,
        "decision": response.decision,
    }


# -- feedback --------------------------------------------------------------------------------------
async def record_feedback(state: KbState, request_id: str, correct: bool | None, faq_id: str | None,
                          session_id: str | None) -> bool:
    """Record a verdict on a logged answer (off the event loop: it is a database write); False when no such
    request was logged. Raises QueryLogDisabled, FaqNotFound, FeedbackSessionMismatch and
    FeedbackAlreadyRecorded (app/api/state.py, app/store), which each front end answers in its own way."""
    return await run_in_threadpool(state.record_feedback, request_id, correct, faq_id, session_id)


# -- KB writes -------------------------------------------------------------------------------------
def refresh(state: KbState) -> None:
    """Make a KB write visible to /match now. The write itself already succeeded, so a refresh failure
    is logged (the poller retries) rather than reported as a failed write."""
    try:
        state.refresh_kb(reason="admin write")
    except Exception:
        log.exception("could not refresh the retriever after an admin write (the KB poller will retry)")


def faq_out(faq: Any) -> FaqOutModel:
    """A stored FAQ (the store's dataclass or row object) as the API's response model."""
    data = dataclasses.asdict(faq) if dataclasses.is_dataclass(faq) else dict(vars(faq))
    return FaqOutModel.model_validate(data)
