"""The console's pages: sign-in, the KB picker, try a question, and the FAQ list and editor.

Every page answers HTML (errors too: a 403 or 422 is a page saying what went wrong, never JSON). Forms
are parsed here from `application/x-www-form-urlencoded` bodies; every field passes the same rules as
the API's JSON fields (app/api/schemas.py), and the work goes through the API's own code: `_match` for
questions, `KbState.record_feedback` for feedback, the store's FAQ calls and the admin API's
`_refresh` for writes.
"""
from __future__ import annotations

import logging
import re
import secrets
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.api.routes.admin import _refresh
from app.api.routes.match import MatchTrace, _match
from app.api.schemas import MAX_ID_CHARS, FaqCreate, FaqReplace, MatchRequest
from app.api.state import QueryLogDisabled, KbState
from app.api.resident_kbs import ResidentKbs, UnknownKb
from app.api.workers import DeadlineExceeded, Overloaded
from app.api.console.explain import explain
from app.api.console.sessions import ConsoleSession, Sessions
from app.pipeline import NoIndexError
from app.settings import KB_NAME_PATTERN
from app.store import (FaqExists, FaqNotFound, FeedbackAlreadyRecorded, FeedbackSessionMismatch,
                       KbValidationError)
from index.es_vectors import VectorStoreUnavailable
from index.lexical import LexicalUnavailable
from kb.records import field_problem

log = logging.getLogger(__name__)

COOKIE = "faq_console"
LOGIN_COOKIE = "faq_console_login"  # the sign-in form's CSRF value, before there is a session
PAGE_SIZE = 20
MAX_PAGE = 1_000_000
MAX_TOKEN_CHARS = 512
MAX_SEARCH_CHARS = 200
#: the version check and the write it guards happen under this lock, so two saves in this process
#: cannot both pass the check
_write_lock = threading.Lock()

templates = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True)
router = APIRouter(prefix="/console", include_in_schema=False)


class Answer(Exception):
    """A page that ends the request early (redirect to sign-in, 403, 404, 422): raised from helpers,
    answered by the handler `mount_console` registers."""

    def __init__(self, response: Response):
        self.response = response


# -- rendering -----------------------------------------------------------------------------------
def render(request: Request, name: str, status: int = 200, session: ConsoleSession | None = None,
           **context: Any) -> HTMLResponse:
    html = templates.get_template(name).render(
        session=session, csrf=session.csrf if session else "", flash=session.shown_flash if session else None,
        **context)
    return HTMLResponse(html, status_code=status)


def problem_page(request: Request, status: int, message: str, session: ConsoleSession | None = None) -> HTMLResponse:
    return render(request, "problem.html", status=status, session=session, status_code=status, message=message)


def _set_cookie(request: Request, response: Response, name: str, value: str, path: str) -> None:
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                        path=path)


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def kb_url(kb: str, page: str = "") -> str:
    return f"/console/kbs/{quote(kb, safe='')}{page}"


templates.globals["kb_url"] = kb_url


# -- input -----------------------------------------------------------------------------------------
async def form(request: Request) -> dict[str, str]:
    """The urlencoded body as {field: first value}; 400 when it is not UTF-8 or not urlencoded."""
    mime = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if body and mime != "application/x-www-form-urlencoded":
        raise Answer(problem_page(request, 415, "the console takes form posts (application/x-www-form-urlencoded)"))
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200,
                          errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise Answer(problem_page(request, 400, f"the form body could not be read: {exc}")) from exc
    fields: dict[str, str] = {}
    for key, value in pairs:
        fields.setdefault(key, value)
    return fields


def _field_of(location: str) -> str:
    """"questions[2] is empty" / ("questions", 2) -> "questions": the form field a problem belongs to."""
    return re.split(r"[\[\s.]", location.strip(), maxsplit=1)[0]


def pydantic_problems(exc: ValidationError) -> dict[str, str]:
    problems: dict[str, str] = {}
    for error in exc.errors():
        loc = [str(p) for p in error.get("loc", ())]
        name = loc[0] if loc else "form"
        where = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:])
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        problems.setdefault(name, (f"{name}{where}: " if where else "") + message)
    return problems


def store_problems(exc: Exception) -> dict[str, str]:
    problems: dict[str, str] = {}
    for message in list(getattr(exc, "errors", None) or [str(exc)]):
        name = _field_of(message)
        if name not in ("faq_id", "answer", "questions", "question", "tags"):
            name = "form"
        name = "questions" if name == "question" else name
        problems[name] = f"{problems[name]}; {message}" if name in problems else message
    return problems


# -- who is asking -------------------------------------------------------------------------------
def sessions_of(request: Request) -> Sessions:
    return request.app.state.console_sessions


async def current(request: Request) -> ConsoleSession:
    """The request's session (with the message the previous action left for this page), else a redirect
    to the sign-in page."""
    def load() -> ConsoleSession | None:
        session = sessions_of(request).get(request.cookies.get(COOKIE))
        if session is not None:
            session.shown_flash = session.take_flash()
        return session

    session = await run_in_threadpool(load)
    if session is None:
        raise Answer(_redirect("/console/login"))
    return session


async def flash(session: ConsoleSession, message: str) -> None:
    """Leave `message` for the next page this session shows (after the redirect)."""
    await run_in_threadpool(session.store.set, session.digest, flash=message)


async def checked_post(request: Request) -> tuple[ConsoleSession, dict[str, str]]:
    session = await current(request)
    fields = await form(request)
    if not session.csrf_ok(fields.get("csrf")):
        raise Answer(problem_page(request, 403, "missing or wrong CSRF token: reload the page and try again",
                                  session=session))
    return session, fields


async def kb_state(request: Request, session: ConsoleSession, kb: str) -> KbState:
    """The KB's served state, after the API's checks in the API's order: a malformed name is 422, a KB
    the session's token may not reach is 403 whether or not it exists, an unknown KB is 404."""
    if len(kb) > 64 or not re.fullmatch(KB_NAME_PATTERN, kb):
        raise Answer(problem_page(request, 422, "kb: must be 1-64 characters of a-z, 0-9, '-' and '_', starting "
                                                "with a letter or digit", session=session))
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    if not await run_in_threadpool(sessions_of(request).allowed, session, resident_kbs):
        await run_in_threadpool(sessions_of(request).close, session.id)  # the token was revoked (or FAQ_ADMIN_TOKEN changed)
        raise Answer(_redirect("/console/login"))
    if session.kb is not None and session.kb != kb:
        raise Answer(problem_page(request, 403, f"this token belongs to another KB: it cannot reach KB {kb!r}",
                                  session=session))
    state = resident_kbs.peek(kb)
    if state is not None:
        return state
    try:
        return await run_in_threadpool(resident_kbs.get, kb)
    except UnknownKb as exc:
        raise Answer(problem_page(request, 404, f"{exc}: `faq kb list` shows the KBs", session=session)) from exc


# -- sign-in and out -----------------------------------------------------------------------------
@router.get("/login")
async def login_page(request: Request) -> Response:
    if await run_in_threadpool(sessions_of(request).get, request.cookies.get(COOKIE)) is not None:
        return _redirect("/console")
    return _login_form(request)


def _login_form(request: Request, status: int = 200, error: str | None = None) -> Response:
    # a second tab's sign-in page keeps the first one's value, so signing in from either still works
    login_csrf = request.cookies.get(LOGIN_COOKIE) or ""
    if not re.fullmatch(r"[A-Za-z0-9_-]{43}", login_csrf):
        login_csrf = secrets.token_urlsafe(32)
    response = render(request, "login.html", status=status, login_csrf=login_csrf, error=error)
    _set_cookie(request, response, LOGIN_COOKIE, login_csrf, "/console/login")
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    fields = await form(request)
    expected = request.cookies.get(LOGIN_COOKIE) or ""
    sent = fields.get("csrf") or ""
    if not expected or not secrets.compare_digest(sent.encode("utf-8", "surrogatepass"), expected.encode()):
        return problem_page(request, 403, "missing or wrong CSRF token: reload the sign-in page and try again")
    token = fields.get("token", "").strip()
    problem = field_problem(token, MAX_TOKEN_CHARS) if token else "must not be empty"
    if problem is not None:
        return _login_form(request, 422, f"token: {problem}")
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    admin = resident_kbs.settings.admin_token
    if admin and secrets.compare_digest(token.encode("utf-8"), admin.encode("utf-8")):
        session = await run_in_threadpool(sessions_of(request).open, None, None, token)
        target = "/console/kbs"
    else:
        info = await run_in_threadpool(resident_kbs.token_info, token)
        if info is None or info.kind != "admin":
            return _login_form(request, 401, "token: not FAQ_ADMIN_TOKEN nor a KB admin token (`faq kb token`)")
        session = await run_in_threadpool(sessions_of(request).open, info.kb, info.id)
        target = kb_url(info.kb, "/faqs")
    response = _redirect(target)
    _set_cookie(request, response, COOKIE, session.id, "/console")
    response.delete_cookie(LOGIN_COOKIE, path="/console/login", httponly=True, samesite="strict")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    session, _ = await checked_post(request)
    await run_in_threadpool(sessions_of(request).close, session.id)
    response = _redirect("/console/login")
    response.delete_cookie(COOKIE, path="/console", httponly=True, samesite="strict")
    return response


# -- KBs -------------------------------------------------------------------------------------------
@router.get("")
@router.get("/")
async def home(request: Request) -> Response:
    session = await current(request)
    return _redirect("/console/kbs" if session.kb is None else kb_url(session.kb, "/faqs"))


@router.get("/kbs")
async def kbs(request: Request) -> Response:
    session = await current(request)
    if session.kb is not None:
        return _redirect(kb_url(session.kb, "/faqs"))
    names = await run_in_threadpool(request.app.state.service.store.kbs.names)
    return render(request, "kbs.html", session=session, kbs=names)


@router.get("/kbs/{kb}")
async def kb_home(request: Request, kb: str) -> Response:
    session = await current(request)
    await kb_state(request, session, kb)
    return _redirect(kb_url(kb, "/faqs"))


# -- try a question ------------------------------------------------------------------------------
@router.get("/kbs/{kb}/try")
async def try_page(request: Request, kb: str) -> Response:
    session = await current(request)
    await kb_state(request, session, kb)
    return render(request, "try.html", session=session, kb=kb, query="", top_k="", errors={}, result=None)


@router.post("/kbs/{kb}/try")
async def try_question(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    query, top_k = fields.get("query", ""), fields.get("top_k", "").strip()
    page = {"session": session, "kb": kb, "query": query, "top_k": top_k, "result": None}
    values: dict[str, Any] = {"query": query}
    if top_k:
        if not top_k.isascii() or not top_k.isdigit():
            return render(request, "try.html", 422, errors={"top_k": "must be an integer"}, **page)
        # a long digit string is still just out of range: MatchRequest's own bound (<= 50) gives the message
        values["top_k"] = int(top_k) if len(top_k) <= 6 else 10**6
    try:
        item = MatchRequest.model_validate(values)
    except ValidationError as exc:
        return render(request, "try.html", 422, errors=pydantic_problems(exc), **page)
    trace = MatchTrace()
    try:
        result = (await _match(state, [item], trace))[0]
    except NoIndexError as exc:
        return render(request, "try.html", 503, errors={"form": str(exc) or "no index built: run `faq index build`"},
                      **page)
    except (Overloaded, DeadlineExceeded, LexicalUnavailable, VectorStoreUnavailable) as exc:
        return render(request, "try.html", 503, errors={"form": f"{exc}: try again later"}, **page)
    except HTTPException as exc:
        return render(request, "try.html", exc.status_code, errors={"form": str(exc.detail)}, **page)
    page["result"] = result
    why, why_problem = None, None
    if trace.results and state.pipeline is not None:
        try:
            # the word weights' encoder call runs here, off the batcher: the console is low traffic, and
            # the answer above is already logged and counted as /match would have it
            why = await run_in_threadpool(explain, state.pipeline, trace.retriever, result.query, trace.results[0])
        except Exception as exc:  # noqa: BLE001 - the answer is shown whatever befalls its explanation
            log.exception("could not explain the console question")
            why_problem = f"the explanation could not be worked out: {type(exc).__name__}"
    return render(request, "try.html", errors={}, logged=state.settings.query_log, why=why, why_problem=why_problem,
                  **page)


@router.post("/kbs/{kb}/feedback")
async def feedback(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    request_id = fields.get("request_id", "")
    verdict = fields.get("correct", "")
    # "the right FAQ is ...": typed, else picked from the FAQs the page showed
    right = fields.get("other_faq_id", "").strip() or fields.get("faq_id", "").strip()
    problem = field_problem(request_id, 64) if request_id else "must not be empty"
    if problem is not None:
        return problem_page(request, 422, f"request_id: {problem}", session=session)
    if verdict == "other":
        problem = field_problem(right, MAX_ID_CHARS) if right else "pick the FAQ that answers the question, or type its id"
        if problem is not None:
            return problem_page(request, 422, f"faq_id: {problem}", session=session)
    elif verdict not in ("true", "false"):
        return problem_page(request, 422, "correct: must be true, false or other", session=session)
    correct = None if verdict == "other" else verdict == "true"
    try:
        found = await run_in_threadpool(state.record_feedback, request_id, correct, right if correct is None else None,
                                        None)
    except QueryLogDisabled as exc:
        return problem_page(request, 409, str(exc), session=session)
    except FeedbackAlreadyRecorded as exc:
        return problem_page(request, 409, str(exc), session=session)
    except (FeedbackSessionMismatch, FaqNotFound) as exc:
        return problem_page(request, 422, str(exc), session=session)
    if not found:
        return problem_page(request, 404, f"request_id: unknown request {request_id!r}", session=session)
    await flash(session, (f"Feedback recorded: the right FAQ is {right!r}." if correct is None
                     else f"Feedback recorded: the answer was {'right' if correct else 'wrong'}."))
    return _redirect(kb_url(kb, "/try"))


# -- FAQs ----------------------------------------------------------------------------------------
@router.get("/kbs/{kb}/faqs")
async def faqs(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    q = request.query_params.get("q", "").strip()
    raw_page = request.query_params.get("page", "1").strip() or "1"
    if q and (problem := field_problem(q, MAX_SEARCH_CHARS)) is not None:
        return problem_page(request, 422, f"q: {problem}", session=session)
    if not raw_page.isascii() or not raw_page.isdigit() or len(raw_page) > 7 or not 1 <= int(raw_page) <= MAX_PAGE:
        return problem_page(request, 422, f"page: must be an integer from 1 to {MAX_PAGE}", session=session)
    page = int(raw_page)
    store = state.store
    items = await run_in_threadpool(store.list_faqs, (page - 1) * PAGE_SIZE, PAGE_SIZE, q or None)
    total = await run_in_threadpool(store.count_faqs, q or None)
    pages = max(1, -(-total // PAGE_SIZE))
    return render(request, "faqs.html", session=session, kb=kb, items=items, total=total, q=q, page=page,
                  pages=pages)


def _faq_fields(fields: dict[str, str]) -> dict[str, Any]:
    """The form's text as the API's JSON shape: phrasings one per line, tags separated by commas."""
    questions = [line.strip() for line in fields.get("questions", "").splitlines() if line.strip()]
    tags = [t.strip() for t in fields.get("tags", "").split(",") if t.strip()]
    return {"answer": fields.get("answer", ""), "questions": questions, "tags": tags}


def _form_values(fields: dict[str, str]) -> dict[str, str]:
    return {name: fields.get(name, "") for name in ("faq_id", "answer", "questions", "tags", "version")}


@router.get("/kbs/{kb}/faqs/new")
async def new_faq_page(request: Request, kb: str) -> Response:
    session = await current(request)
    await kb_state(request, session, kb)
    return render(request, "faq_form.html", session=session, kb=kb, creating=True, values=_form_values({}),
                  errors={})


@router.post("/kbs/{kb}/faqs/new")
async def create_faq(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    page = {"session": session, "kb": kb, "creating": True, "values": _form_values(fields)}
    try:
        body = FaqCreate.model_validate({"faq_id": fields.get("faq_id", "").strip(), **_faq_fields(fields)})
    except ValidationError as exc:
        return render(request, "faq_form.html", 422, errors=pydantic_problems(exc), **page)

    def write() -> Any:
        return state.store.create_faq(body.faq_id, body.answer, body.questions, tags=body.tags)

    try:
        await run_in_threadpool(write)
    except FaqExists:
        return render(request, "faq_form.html", 409, errors={"faq_id": f"an FAQ {body.faq_id!r} already exists"},
                      **page)
    except KbValidationError as exc:
        return render(request, "faq_form.html", 422, errors=store_problems(exc), **page)
    await run_in_threadpool(_refresh, state)
    await flash(session, f"Created FAQ {body.faq_id!r}.")
    return _redirect(kb_url(kb, "/faqs"))


def _faq_id(request: Request, fields: dict[str, str] | None, session: ConsoleSession) -> str:
    faq_id = (fields if fields is not None else request.query_params).get("id", "")
    problem = field_problem(faq_id, MAX_ID_CHARS) if faq_id else "must not be empty"
    if problem is not None:
        raise Answer(problem_page(request, 422, f"id: {problem}", session=session))
    return faq_id


def _version(faq: Any) -> str:
    return faq.updated_at.isoformat() if faq.updated_at is not None else ""


@router.get("/kbs/{kb}/faqs/edit")
async def edit_faq_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    faq_id = _faq_id(request, None, session)
    faq = await run_in_threadpool(state.store.get_faq, faq_id)
    if faq is None:
        return problem_page(request, 404, f"no FAQ {faq_id!r} in KB {kb!r}", session=session)
    values = {"faq_id": faq.faq_id, "answer": faq.answer, "questions": "\n".join(faq.questions),
              "tags": ", ".join(faq.tags), "version": _version(faq)}
    return render(request, "faq_form.html", session=session, kb=kb, creating=False, values=values, errors={})


@router.post("/kbs/{kb}/faqs/edit")
async def save_faq(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    faq_id = _faq_id(request, fields, session)
    values = _form_values(fields)
    values["faq_id"] = faq_id
    page = {"session": session, "kb": kb, "creating": False, "values": values}
    try:
        body = FaqReplace.model_validate(_faq_fields(fields))
    except ValidationError as exc:
        return render(request, "faq_form.html", 422, errors=pydantic_problems(exc), **page)
    seen = fields.get("version", "")

    def write() -> tuple[str, Any]:
        with _write_lock:
            stored = state.store.get_faq(faq_id)
            if stored is None:
                return "gone", None
            if _version(stored) != seen:
                return "changed", stored
            return "saved", state.store.update_faq(faq_id, answer=body.answer, questions=body.questions,
                                                   tags=body.tags)

    try:
        outcome, faq = await run_in_threadpool(write)
    except FaqNotFound:
        outcome, faq = "gone", None
    except KbValidationError as exc:
        return render(request, "faq_form.html", 422, errors=store_problems(exc), **page)
    if outcome == "gone":
        return render(request, "faq_form.html", 404, errors={"form": (
            f"FAQ {faq_id!r} was deleted by someone else: nothing was saved. Your text is still below; "
            "copy it, or create the FAQ again.")}, **page)
    if outcome == "changed":
        return render(request, "faq_form.html", 409, stored=faq, errors={"form": (
            "Someone else saved this FAQ after you opened it: nothing was saved. Your text is still below, and "
            "the saved version beside it; open the FAQ again to edit the saved version.")}, **page)
    await run_in_threadpool(_refresh, state)
    await flash(session, f"Saved FAQ {faq_id!r}.")
    return _redirect(kb_url(kb, "/faqs"))


@router.post("/kbs/{kb}/faqs/delete")
async def delete_faq(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    faq_id = _faq_id(request, fields, session)
    seen = fields.get("version", "")

    def remove() -> str:
        with _write_lock:
            stored = state.store.get_faq(faq_id)
            if stored is None:
                return "gone"
            if _version(stored) != seen:  # deleting what the user has not seen would lose that edit
                return "changed"
            return "deleted" if state.store.delete_faq(faq_id) else "gone"

    outcome = await run_in_threadpool(remove)
    if outcome == "gone":
        return problem_page(request, 404, f"no FAQ {faq_id!r} in KB {kb!r}", session=session)
    if outcome == "changed":
        return problem_page(request, 409, f"FAQ {faq_id!r} was saved by someone else after you opened it: nothing "
                                          "was deleted. Open it again to see the saved version.", session=session)
    await run_in_threadpool(_refresh, state)
    await flash(session, f"Deleted FAQ {faq_id!r}.")
    return _redirect(kb_url(kb, "/faqs"))
