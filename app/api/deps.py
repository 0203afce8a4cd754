"""FastAPI dependencies: the service state and the admin bearer-token check."""
from __future__ import annotations

import secrets

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.state import ServiceState

# auto_error=False: we answer a missing token ourselves, with the same 401 as a wrong one
_bearer = HTTPBearer(auto_error=False, description="FAQ_ADMIN_TOKEN")


async def get_state(request: Request) -> ServiceState:
    # async although it awaits nothing: FastAPI runs a sync dependency in its thread pool, and that
    # round trip to a worker thread and back cost every request more than the rest of this dependency
    return request.app.state.service


def require_admin(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> None:
    """401 unless `Authorization: Bearer <FAQ_ADMIN_TOKEN>`; the comparison is constant-time."""
    expected = request.app.state.service.settings.admin_token
    given = credentials.credentials if credentials is not None else ""
    # compare_digest on bytes: no early exit on the first differing character (timing side channel)
    if not expected or not secrets.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED,
            detail="missing or invalid admin token: send `Authorization: Bearer <FAQ_ADMIN_TOKEN>`",
            headers={"WWW-Authenticate": "Bearer"},
        )
