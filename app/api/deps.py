"""FastAPI dependencies: the KB a request is for (its served state) and who may reach it.

Routes are mounted twice (app/api/factory.py): bare (`/match`, `/admin/...`: KB `default`) and under
`/kbs/{kb}`. `kb_path` validates the name (422), `get_state` finds the KB's state (404 for an unknown
KB, loading a resident-less one first), and the token checks run before either reveals whether a KB
exists: a KB token used on another KB gets 403 whatever that KB is. `readiness_state` is readyz's: it
loads a KB only for a caller with a token of it, so anonymous probes cannot churn the resident KBs.
`require_metrics_reader` guards /metrics with FAQ_METRICS_TOKEN. A client address with too many wrong
tokens for a KB gets 429 before its token is looked at (app/api/auth_throttle.py). What a token's role may
do on the admin API and the console is app/api/roles.py's `require_role`, which checks the token with `refuse`.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Annotated


from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from app.api.auth_throttle import LIMIT, WINDOW_S, AuthThrottle, client_address
from app.api.state import KbState
from app.api.resident_kbs import ResidentKbs, UnknownKb
from app.settings import DEFAULT_KB, KB_NAME_PATTERN
from app.store.catalog import TOKEN_KINDS

# auto_error=False: we answer a missing token ourselves, with the same 401 as a wrong one
_bearer = HTTPBearer(auto_error=False, description="FAQ_ADMIN_TOKEN, or a token of the KB (`faq kb token`)")


async def kb_path(kb: Annotated[str, Path(pattern=KB_NAME_PATTERN, max_length=64,
                                          description="the KB's name (`faq kb list`)")]) -> str:
    # async: a sync dependency costs every /kbs/{kb} request a round trip through the thread pool
    return kb


def _kb_of(request: Request) -> str:
    """The request's KB, checked here too: FastAPI collects `kb_path`'s error but goes on solving the
    other dependencies, which must not answer 404 or 403 for a name that can never exist."""
    kb = request.path_params.get("kb")
    if kb is None:
        return DEFAULT_KB
    if len(kb) > 64 or not re.fullmatch(KB_NAME_PATTERN, kb):
        raise RequestValidationError([{
            "type": "value_error", "loc": ("path", "kb"),
            "msg": "must be 1-64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"}])
    return kb


async def get_state(request: Request) -> KbState:
    # async although it rarely awaits: FastAPI runs a sync dependency in its thread pool, and that
    # round trip to a worker thread and back cost every request more than the rest of this dependency
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    if request.path_params.get("kb") is None:
        return resident_kbs.default
    kb = _kb_of(request)
    state = resident_kbs.peek(kb)
    if state is not None:
        return state
    try:
        return await run_in_threadpool(resident_kbs.get, kb)  # a KB's first request loads it
    except UnknownKb as exc:
        raise _unknown(exc) from exc


def _unknown(exc: UnknownKb) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=f"{exc}: `faq kb list` shows the KBs")


async def readiness_state(request: Request,
                          credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> KbState | None:
    """The state /readyz reports on; None for a KB that exists but is not resident and is not loaded
    for this caller.

    Bare /readyz: the default KB, always resident, no token needed (load balancers probe it). Under
    /kbs/{kb}: a caller with FAQ_ADMIN_TOKEN or any token of the KB is answered as /match
    would be served (the KB loaded if need be, 404 for an unknown one); a token that is sent must be
    valid (401/403 as for /match). Without a token: with FAQ_MATCH_REQUIRES_KEY, the 401 of /match,
    whatever the KB, so the answer tells nothing about which KBs exist; without it, the KB's state if
    it is resident (its place in the least-recently-used order untouched), else None or 404 from
    the catalogue alone. Nothing is loaded or unloaded for a caller without a token."""
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    if request.path_params.get("kb") is None:
        return resident_kbs.default
    kb = _kb_of(request)
    token = credentials.credentials if credentials is not None else ""
    if token:
        await run_in_threadpool(_refuse, request, token, TOKEN_KINDS, "read")
        return await get_state(request)
    if resident_kbs.settings.match_requires_key:
        _refuse(request, "", TOKEN_KINDS, "read")  # no token: refused without any lookup
    state = resident_kbs.peek(kb, touch=False)
    if state is not None:
        return state
    if not await run_in_threadpool(resident_kbs.exists, kb):
        raise _unknown(UnknownKb(kb))
    return None


async def require_metrics_reader(request: Request,
                                 credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """With FAQ_METRICS_TOKEN set: 401 unless the bearer is it or FAQ_ADMIN_TOKEN (a KB's token is not
    enough: the metrics are every KB's). Unset: /metrics is open."""
    settings = request.app.state.resident_kbs.settings
    if not settings.metrics_token:
        return
    given = (credentials.credentials if credentials is not None else "").encode("utf-8", "surrogatepass")
    # both compared every time, in constant time: how long the refusal takes tells nothing
    matches = [secrets.compare_digest(given, secret.encode("utf-8"))
               for secret in (settings.metrics_token, settings.admin_token) if secret]
    if not any(matches):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                            detail="missing or invalid metrics token: send `Authorization: Bearer "
                                   "<FAQ_METRICS_TOKEN>` or FAQ_ADMIN_TOKEN",
                            headers={"WWW-Authenticate": "Bearer"})


@dataclass(frozen=True)
class Refusal:
    """Why a token may not reach a KB: `status` 401 (missing or wrong), 403 (another KB's) or 429 (this
    address guessed too often; `retry_after` seconds), and the reason in words."""

    status: int
    reason: str
    retry_after: int | None = None


def key_refusal(request: Request, kb: str, token: str, kinds: tuple[str, ...], what: str) -> Refusal | None:
    """None when `token` is FAQ_ADMIN_TOKEN or a token of KB `kb` of one of `kinds`, else why not. Each
    route answers a refusal in its own shape (ours below; the QnA Maker and Azure routes in theirs)."""
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    throttle: AuthThrottle = request.app.state.auth_throttle
    address = client_address(request)
    wait_s = throttle.retry_after(address, kb)
    if wait_s is not None:
        return Refusal(429, f"too many wrong {what} tokens for KB {kb!r} from your address: try again in {wait_s} s "
                            f"(at most {LIMIT} failures per {WINDOW_S:.0f} s; this request's token was not checked)",
                       wait_s)
    if resident_kbs.allows(token, kb, kinds):
        return None
    info = resident_kbs.token_info(token) if token else None
    if info is not None and info.kb != kb:
        return Refusal(403, f"this token belongs to another KB: it cannot reach KB {kb!r}")
    if token and info is None:  # a guess: a missing token guesses nothing, a KB's read key is a real token
        throttle.failed(address, kb)
    return Refusal(401, f"missing or invalid {what} token: send `Authorization: Bearer <FAQ_ADMIN_TOKEN>` or a "
                        f"token of KB {kb!r} (`faq kb token --kb {kb}`)")


def _refuse(request: Request, token: str, kinds: tuple[str, ...], what: str) -> None:
    refusal = key_refusal(request, _kb_of(request), token, kinds, what)
    if refusal is None:
        return
    headers = ({"Retry-After": str(refusal.retry_after)} if refusal.status == 429 else
               {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None)
    raise HTTPException(refusal.status, detail=refusal.reason, headers=headers)


#: the `Authorization: Bearer` scheme of the admin API, for the dependencies declared elsewhere (app/api/roles.py)
BEARER = _bearer


def refuse(request: Request, token: str, kinds: tuple[str, ...], what: str) -> None:
    """Raise what a token that may not reach the request's KB as one of `kinds` is answered (422 for a malformed
    KB name, 401, 403, 429); return when it may. app/api/roles.py checks the role after it."""
    _refuse(request, token, kinds, what)


async def require_reader(request: Request,
                         credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """With FAQ_MATCH_REQUIRES_KEY: /match, /match/batch and /feedback need FAQ_ADMIN_TOKEN or a token of the
    KB (its read key or a person's, of any role). Without it, nothing is checked (and nothing is looked up)."""
    resident_kbs: ResidentKbs = request.app.state.resident_kbs
    if not resident_kbs.settings.match_requires_key:
        return
    token = credentials.credentials if credentials is not None else ""
    _kb_of(request)
    await run_in_threadpool(_refuse, request, token, TOKEN_KINDS, "read")


async def require_any_key(request: Request) -> None:
    """401 unless the request carries FAQ_ADMIN_TOKEN or any token of its KB (403: another KB's): what the `test`
    deployment needs whatever FAQ_MATCH_REQUIRES_KEY says, as any key of an Azure project may ask for it."""
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else ""
    await run_in_threadpool(_refuse, request, token, TOKEN_KINDS, "KB")
