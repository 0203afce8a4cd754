"""Who may do what on a KB: people's roles, and `require_role(role)`, the dependency every /admin route and
every console page declares.

A KB's tokens (`faq kb token --role ROLE --name TEXT`) each hold one role (app/store/catalog.py ROLES), each
allowed what the one before it is and more:

| role      | may                                                                                           |
|-----------|-----------------------------------------------------------------------------------------------|
| viewer    | console pages, Try a question (and its feedback), export; the admin API's GET routes          |
| editor    | + the draft: FAQ create, update, delete; import; review (accept, dismiss, restore); small talk |
| publisher | + publish, roll back; Build now, activate a build, reload the index                           |
| admin     | + tokens, settings, deleting the KB                                                           |

FAQ_ADMIN_TOKEN is the deployment's admin, of every KB. A KB's read token is no role: it is the match-only key
(/match, /feedback, the test deployment of /match; app/api/deps.py require_reader).

The API answers a token that does not reach the KB as it always has (app/api/deps.py: 401 missing or unknown,
with the wrong-token throttle; 403 another KB's; 429); one that reaches it without the role gets 403 naming
the role it needs. The console finds its user in the session (redirected to sign-in without one) and answers
the same 403 as its problem page.

Who passed is the request's principal (`principal_of`, for the console's header and what it shows) and, for the
audit log, the request's actor (app/store/audit.py `acting_as`) while the route runs. The dependency is an
async generator, so the actor is set in the request's own context: a sync route runs in the thread pool with a
copy of that context (anyio's `to_thread.run_sync`), so the store's writes there see it too.
"""
from __future__ import annotations

import functools
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool

from app.api.auth_throttle import client_address
from app.api.deps import BEARER, refuse
from app.api.resident_kbs import ResidentKbs
from app.settings import DEFAULT_KB, KB_NAME_PATTERN
from app.store.audit import Actor, acting_as
from app.store.catalog import READ_KIND, ROLES, TOKEN_KINDS

__all__ = ["ROLES", "Principal", "acting_for_key", "may", "needs", "principal_of", "refusal", "require_role"]

#: the name FAQ_ADMIN_TOKEN acts under
DEPLOYMENT_ADMIN_NAME = "admin"


def may(role: str, needed: str) -> bool:
    """Does `role` include `needed`? The read kind includes no role."""
    return role in ROLES and ROLES.index(role) >= ROLES.index(needed)


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a token's `name` (its label) and `role` (or "read"), the KB it belongs to and
    its id; `kb` None is FAQ_ADMIN_TOKEN."""

    name: str
    role: str
    kb: str | None = None
    token_id: int | None = None

    def may(self, needed: str) -> bool:
        return may(self.role, needed)

    @property
    def shown(self) -> str:
        """As the console's header names it."""
        return f"{self.name} (FAQ_ADMIN_TOKEN)" if self.kb is None else f"{self.name} ({self.role})"


DEPLOYMENT_ADMIN = Principal(DEPLOYMENT_ADMIN_NAME, "admin")


def principal_of_info(info: Any) -> Principal:
    """A live KB token (app/store/catalog.py TokenInfo) as a principal; an unnamed one is "token ID"."""
    return Principal(name=info.label or f"token {info.id}", role=info.kind, kb=info.kb, token_id=info.id)


def principal_of_token(resident_kbs: ResidentKbs, token: str) -> Principal | None:
    """FAQ_ADMIN_TOKEN or a live KB token as a principal, else None (a lookup: run it off the event loop)."""
    if resident_kbs.is_admin_token(token):
        return DEPLOYMENT_ADMIN
    info = resident_kbs.token_info(token) if token else None
    return principal_of_info(info) if info is not None else None


def principal_of(request: Request) -> Principal | None:
    """Who the request was let through as (set by `require_role`); None before that, or on open pages."""
    return getattr(request.state, "principal", None)


def _article(role: str) -> str:
    return "an" if role[:1] in "aeiou" else "a"


def refusal(principal: Principal, needed: str) -> str:
    """The 403's message: the role needed and the one the token has."""
    if principal.role == READ_KIND:
        return (f"this needs the {needed} role; your token is the read key of KB {principal.kb!r}, for /match and "
                f"/feedback only (`faq kb token --kb {principal.kb} --role {needed}` makes a person's token)")
    return (f"this needs the {needed} role; your token is {_article(principal.role)} {principal.role} token of KB "
            f"{principal.kb!r}")


def request_id_of(request: Request) -> str:
    """The request's id: the one a middleware gave it (`request.state.request_id`), else a new one, kept there."""
    found = getattr(request.state, "request_id", None)
    if not found:
        found = uuid.uuid4().hex
        request.state.request_id = found
    return found


def actor_of(principal: Principal, source: str, request: Request) -> Actor:
    return Actor(name=principal.name, role=principal.role, source=source, request_id=request_id_of(request))


def _api_principal(request: Request, token: str) -> Principal:
    # every kind passes the reach check, so a read key that reaches its KB gets the role's 403, not a 401
    refuse(request, token, TOKEN_KINDS, "admin")
    principal = principal_of_token(request.app.state.resident_kbs, token)
    if principal is None:  # revoked between the two lookups
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="missing or invalid admin token",
                            headers={"WWW-Authenticate": "Bearer"})
    return principal


def _is_console(request: Request) -> bool:
    path = request.url.path
    return path == "/console" or path.startswith("/console/")


@functools.cache
def require_role(role: str) -> Callable[..., AsyncIterator[Principal]]:
    """The dependency of a route that needs `role`: the request's principal, acting (app/store/audit.py) while
    the route runs. One per role (cached), so a route listing it twice is checked once."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")

    async def dependency(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(BEARER),
                         ) -> AsyncIterator[Principal]:
        if _is_console(request):
            # the console's own check (app/api/console/pages.py `console_principal`, which mount_console sets
            # here): this module cannot import the console, whose pages import it
            principal, source = await request.app.state.console_principal(request, role), "console"
        else:
            token = credentials.credentials if credentials is not None else ""
            principal, source = await run_in_threadpool(_api_principal, request, token), "api"
            if not principal.may(role):
                raise HTTPException(status.HTTP_403_FORBIDDEN, detail=refusal(principal, role))
            request.state.principal = principal
        with acting_as(actor_of(principal, source, request)):
            yield principal

    dependency.__name__ = dependency.__qualname__ = f"require_{role}"
    return dependency


def acting_for_key(key_of: Callable[[Request], str], kb_of: Callable[[Request], str | None],
                   ) -> Callable[..., AsyncIterator[None]]:
    """The dependency of a route that checks its own key (the QnA Maker and Azure routes, app/api/compat.py):
    the key's principal acts (source "compat") while the route runs. It refuses nothing; the route does. A key
    from an address the wrong-token throttle holds back is not looked up, as the route does not look it up."""

    async def dependency(request: Request) -> AsyncIterator[None]:
        key = key_of(request)
        principal = None
        if key:
            name = kb_of(request) or ""
            kb = name if _kb_name_ok(name) else DEFAULT_KB
            if request.app.state.auth_throttle.retry_after(client_address(request), kb) is None:
                principal = await run_in_threadpool(principal_of_token, request.app.state.resident_kbs, key)
        if principal is None:
            yield
            return
        request.state.principal = principal
        with acting_as(actor_of(principal, "compat", request)):
            yield

    return dependency


def _kb_name_ok(name: str) -> bool:
    return len(name) <= 64 and re.fullmatch(KB_NAME_PATTERN, name) is not None


def needs(role: str) -> list[Any]:
    """A route's `dependencies` for `role`: `@router.post(path, dependencies=needs("editor"))`."""
    return [Depends(require_role(role))]
