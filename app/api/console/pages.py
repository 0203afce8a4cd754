"""What every console page shares: rendering, reading forms, who is asking, and the early response.

Every page answers HTML (errors too: a 403 or 422 is a page saying what went wrong, never JSON; so are
the router's 404 and 405, the request guard's 413 and a 500, through `error_page`). Every page but the
sign-in form gets its user from `current`, which checks the session again (`Sessions.allowed`). Forms
are parsed here from `application/x-www-form-urlencoded` bodies; every field passes the same rules as
the API's JSON fields (app/api/schemas.py). A helper that must end the request (sign-in needed, a bad
field, an unknown KB) raises `EarlyResponse` with the page to send; `mount_console` answers it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.api.console.sessions import ConsoleSession, Sessions
from app.api.roles import Principal, principal_of, refusal
from app.api.middleware.security_headers import SECURITY_HEADERS
from app.api.state import KbState
from app.api.resident_kbs import ResidentKbs, UnknownKb
from app.settings import KB_NAME_PATTERN, LANGUAGE_CODES

PREFIX = "/console"
COOKIE = "faq_console"
LOGIN_COOKIE = "faq_console_login"  # the sign-in form's CSRF value, before there is a session

templates = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True)


def page_router() -> APIRouter:
    """A console page module's router; `mount_console` includes each one."""
    return APIRouter(prefix=PREFIX, include_in_schema=False)


class EarlyResponse(Exception):
    """A page that ends the request early (redirect to sign-in, 403, 404, 422): raised from helpers,
    answered by the handler `mount_console` registers."""

    def __init__(self, response: Response):
        self.response = response


# -- rendering -----------------------------------------------------------------------------------
def render(request: Request, name: str, status: int = 200, session: ConsoleSession | None = None,
           **context: Any) -> HTMLResponse:
    # who is signed in, for the header, and what the page offers them: a control their role may not use is left out
    principal = principal_of(request) if session is not None else None
    html = templates.get_template(name).render(
        session=session, csrf=session.csrf if session else "", flash=session.shown_flash if session else None,
        principal=principal, may=lambda role: principal is not None and principal.may(role), **context)
    return HTMLResponse(html, status_code=status)


def problem_page(request: Request, status: int, message: str, session: ConsoleSession | None = None) -> HTMLResponse:
    return render(request, "problem.html", status=status, session=session, status_code=status, message=message)


#: the error pages' messages for the router's own errors, whose detail is only the status's name
ROUTER_ERRORS = {404: "there is no console page at this address",
                 405: "this console page does not take that method"}


def is_console_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def error_page(request: Request, status: int, message: str, headers: dict[str, str] | None,
               extra: dict[str, Any]) -> Response | None:
    """A console path's error (404, 405, the request guard's 400/408/413/415, a 422, 429, 500...) as the
    problem page, with the error's status and headers (Allow, Retry-After): registered with
    `app.api.errors.add_error_page`; None for every other path, which keeps the API's JSON."""
    if not is_console_path(request.url.path):
        return None
    if status in ROUTER_ERRORS and message in ("Not Found", "Method Not Allowed"):
        message = ROUTER_ERRORS[status]
    if extra.get("request_id"):
        message = f"{message} (request id {extra['request_id']})"
    response = problem_page(request, status, message)
    response.headers.update(headers or {})
    # a 500 is answered outside the middlewares (by Starlette's outermost one), so the page brings its own
    response.headers.update(SECURITY_HEADERS)
    response.headers["cache-control"] = "no-store"
    return response


def set_cookie(request: Request, response: Response, name: str, value: str, path: str) -> None:
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                        path=path)


def redirect(url: str) -> RedirectResponse:
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
        raise EarlyResponse(problem_page(request, 415,
                                         "the console takes form posts (application/x-www-form-urlencoded)"))
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200,
                          errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise EarlyResponse(problem_page(request, 400, f"the form body could not be read: {exc}")) from exc
    fields: dict[str, str] = {}
    for key, value in pairs:
        fields.setdefault(key, value)
    return fields


#: the FAQ form's answer in another language: the field `answers_<code>` (one per language the FAQ has), and the
#: language and text of one to add
ANSWER_FIELD_PREFIX = "answers_"
NEW_ANSWER_LANGUAGE = "new_answer_language"
NEW_ANSWER = "new_answer"
#: the languages' names, as the FAQ form's language picker shows them
LANGUAGE_NAMES = {"en": "English", "es": "Spanish", "de": "German", "fr": "French", "it": "Italian",
                  "pt": "Portuguese", "nl": "Dutch"}


def answers_shown(answers: dict[str, str]) -> dict[str, Any]:
    """An FAQ's answers per language as the FAQ form shows them: `answers` [(code, text)] in LANGUAGE_CODES order
    (codes outside it last, as given), and `new_languages`, the codes it offers to add an answer in."""
    order = {code: i for i, code in enumerate(LANGUAGE_CODES)}
    shown = sorted(answers.items(), key=lambda item: order.get(item[0], len(order)))
    return {"answers": shown, "answer_names": LANGUAGE_NAMES,
            "new_languages": [(c, LANGUAGE_NAMES.get(c, c)) for c in LANGUAGE_CODES if c not in answers]}


def form_answers(fields: dict[str, str]) -> dict[str, str]:
    """The posted `answers_<code>` fields, in form order: {code: text}, empty ones included."""
    return {key[len(ANSWER_FIELD_PREFIX):]: value for key, value in fields.items()
            if key.startswith(ANSWER_FIELD_PREFIX)}


def form_values(fields: dict[str, str]) -> dict[str, Any]:
    """The FAQ form's fields as the form shows them again (new, edit, and a review cluster's draft); answers per
    language as `answers_shown` gives them."""
    values: dict[str, Any] = {name: fields.get(name, "") for name in (
        "faq_id", "answer", "questions", "tags", "metadata", "source", "follow_ups", "context_only", "version",
        NEW_ANSWER_LANGUAGE, NEW_ANSWER)}
    return {**values, **answers_shown(form_answers(fields))}


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
        if name not in ("faq_id", "answer", "questions", "question", "tags", "metadata", "source", "follow_ups",
                        "context_only", "answers"):
            name = "form"
        name = "questions" if name == "question" else name
        problems[name] = f"{problems[name]}; {message}" if name in problems else message
    return problems


# -- who is asking -------------------------------------------------------------------------------
def sessions_of(request: Request) -> Sessions:
    return request.app.state.console_sessions


async def signed_in(request: Request, show_flash: bool = True) -> ConsoleSession | None:
    """The request's session (with the message the previous action left for this page, unless
    `show_flash` is false: a redirect shows none) when what it was opened with still reaches its KBs
    (`Sessions.allowed`); a session that fails the check (a revoked KB token, a changed FAQ_ADMIN_TOKEN)
    is closed, so no page keeps it alive."""
    def load() -> ConsoleSession | None:
        sessions = sessions_of(request)
        session = sessions.get(request.cookies.get(COOKIE))
        if session is None:
            return None
        session.principal = sessions.principal(session, request.app.state.resident_kbs)
        if session.principal is None:
            sessions.close(session.id)
            return None
        if show_flash:
            session.shown_flash = session.take_flash()
        return session

    return await run_in_threadpool(load)


async def current(request: Request) -> ConsoleSession:
    """The request's checked session (`signed_in`), else a redirect to the sign-in page. Every page but
    the sign-in form starts here (its `require_role` first: the page's own call finds the session it loaded)."""
    session = getattr(request.state, "console_session", None)
    if session is not None:
        return session
    session = await signed_in(request)
    request.state.console_session = session
    if session is None:
        response = redirect("/console/login")
        if COOKIE in request.cookies:
            response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
        raise EarlyResponse(response)
    return session


async def console_principal(request: Request, role: str) -> Principal:
    """Who is signed in, when they may reach the page's KB and their role includes `role` (app/api/roles.py
    `require_role` asks this for the console's pages): a redirect to sign-in without a live session, else the
    403 page for another KB's token or one naming the role it lacks."""
    session = await current(request)
    principal = session.principal  # set by `signed_in`, which keeps no session without one
    request.state.principal = principal
    kb = request.path_params.get("kb")
    # before the page reads its form, as the API checks a token before its body; a malformed name is
    # `kb_state`'s 422
    if (session.kb is not None and kb is not None and kb != session.kb and len(kb) <= 64
            and re.fullmatch(KB_NAME_PATTERN, kb)):
        raise EarlyResponse(problem_page(request, 403, f"this token belongs to another KB: it cannot reach KB {kb!r}",
                                         session=session))
    if not principal.may(role):
        raise EarlyResponse(problem_page(request, 403, refusal(principal, role), session=session))
    return principal


async def flash(session: ConsoleSession, message: str) -> None:
    """Leave `message` for the next page this session shows (after the redirect)."""
    await run_in_threadpool(session.store.set, session.digest, flash=message)


async def checked_post(request: Request) -> tuple[ConsoleSession, dict[str, str]]:
    session = await current(request)
    fields = await form(request)
    if not session.csrf_ok(fields.get("csrf")):
        raise EarlyResponse(problem_page(request, 403, "missing or wrong CSRF token: reload the page and try again",
                                         session=session))
    return session, fields


async def kb_state(request: Request, session: ConsoleSession, kb: str) -> KbState:
    """The KB's served state, after the API's checks in the API's order: a malformed name is 422, a KB
    the session's token may not reach is 403 whether or not it exists, an unknown KB is 404."""
    if len(kb) > 64 or not re.fullmatch(KB_NAME_PATTERN, kb):
        raise EarlyResponse(problem_page(request, 422, "kb: must be 1-64 characters of a-z, 0-9, '-' and '_', "
                                                       "starting with a letter or digit", session=session))
    # `session` came from `current`, which checked it still reaches its KBs
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    if session.kb is not None and session.kb != kb:
        raise EarlyResponse(problem_page(request, 403, f"this token belongs to another KB: it cannot reach KB {kb!r}",
                                         session=session))
    state = resident_kbs.peek(kb)
    if state is not None:
        return state
    try:
        return await run_in_threadpool(resident_kbs.get, kb)
    except UnknownKb as exc:
        raise EarlyResponse(problem_page(request, 404, f"{exc}: `faq kb list` shows the KBs",
                                         session=session)) from exc
