"""The console's sign-in and out, and the KB picker (FAQ_ADMIN_TOKEN's sessions reach every KB).

Wrong tokens on the sign-in form are counted per client address (app/api/auth_throttle.py, scope CONSOLE:
the form names no KB); past the limit the form answers 429 without checking the token."""
from __future__ import annotations

import re
import secrets

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.api.auth_throttle import CONSOLE, LIMIT, WINDOW_S, AuthThrottle, client_address
from app.api.roles import needs
from app.api.console.pages import (COOKIE, LOGIN_COOKIE, checked_post, current, form, kb_state, kb_url, page_router,
                                   problem_page, redirect, render, sessions_of, set_cookie, signed_in)
from app.api.resident_kbs import ResidentKbs
from app.store.catalog import ROLES
from kb.records import field_problem

MAX_TOKEN_CHARS = 512

router = page_router()


@router.get("/login")
async def login_page(request: Request) -> Response:
    if await signed_in(request, show_flash=False) is not None:
        return redirect("/console")
    return _login_form(request)


def _login_form(request: Request, status: int = 200, error: str | None = None) -> Response:
    # a second tab's sign-in page keeps the first one's value, so signing in from either still works
    login_csrf = request.cookies.get(LOGIN_COOKIE) or ""
    if not re.fullmatch(r"[A-Za-z0-9_-]{43}", login_csrf):
        login_csrf = secrets.token_urlsafe(32)
    response = render(request, "login.html", status=status, login_csrf=login_csrf, error=error)
    set_cookie(request, response, LOGIN_COOKIE, login_csrf, "/console/login")
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
    throttle: AuthThrottle = request.app.state.auth_throttle
    address = client_address(request)
    wait_s = throttle.retry_after(address, CONSOLE)
    if wait_s is not None:
        response = problem_page(request, 429, f"too many wrong tokens from your address: try again in {wait_s} s "
                                              f"(at most {LIMIT} per {WINDOW_S:.0f} s; this token was not checked)")
        response.headers["Retry-After"] = str(wait_s)
        return response
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    admin = resident_kbs.settings.admin_token
    if admin and secrets.compare_digest(token.encode("utf-8"), admin.encode("utf-8")):
        session = await run_in_threadpool(sessions_of(request).open, None, None, token)
        target = "/console/kbs"
    else:
        info = await run_in_threadpool(resident_kbs.token_info, token)
        if info is None:
            throttle.failed(address, CONSOLE)
            return _login_form(request, 401, "token: not FAQ_ADMIN_TOKEN nor a token of a KB (`faq kb token`)")
        if info.kind not in ROLES:  # a real token, not a guess: not counted
            return _login_form(request, 403, f"token: this is the read key of KB {info.kb!r}, for /match only; the "
                                             f"console takes a person's token (`faq kb token --kb {info.kb} --role "
                                             f"viewer`)")
        session = await run_in_threadpool(sessions_of(request).open, info.kb, info.id)
        target = kb_url(info.kb, "/faqs")
    response = redirect(target)
    set_cookie(request, response, COOKIE, session.id, "/console")
    response.delete_cookie(LOGIN_COOKIE, path="/console/login", httponly=True, samesite="strict")
    return response


@router.post("/logout", dependencies=needs("viewer"))
async def logout(request: Request) -> Response:
    session, _ = await checked_post(request)
    await run_in_threadpool(sessions_of(request).close, session.id)
    response = redirect("/console/login")
    response.delete_cookie(COOKIE, path="/console", httponly=True, samesite="strict")
    return response


# -- KBs -------------------------------------------------------------------------------------------
@router.get("", dependencies=needs("viewer"))
@router.get("/", dependencies=needs("viewer"))
async def home(request: Request) -> Response:
    session = await current(request)
    return redirect("/console/kbs" if session.kb is None else kb_url(session.kb, "/faqs"))


@router.get("/kbs", dependencies=needs("viewer"))
async def kbs(request: Request) -> Response:
    session = await current(request)
    if session.kb is not None:
        return redirect(kb_url(session.kb, "/faqs"))
    names = await run_in_threadpool(request.app.state.service.store.catalog.names)
    return render(request, "kbs.html", session=session, kbs=names)


@router.get("/kbs/{kb}", dependencies=needs("viewer"))
async def kb_home(request: Request, kb: str) -> Response:
    session = await current(request)
    await kb_state(request, session, kb)
    return redirect(kb_url(kb, "/faqs"))
