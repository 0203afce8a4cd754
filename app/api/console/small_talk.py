"""The console's Small talk page: whether the KB answers "hi", "thanks" and "are you a bot?" as small talk, in
which persona, and its own answers for any kind. Saved as the KB's stored settings (`faq kb settings` writes the
same ones) and served from the next request on."""
from __future__ import annotations

import typing

from fastapi import Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.api.roles import needs
from app.api.console.pages import (checked_post, current, flash, kb_state, kb_url, page_router, pydantic_problems,
                                   redirect, render)
from app.conversation.small_talk.answers import KINDS, load_answers
from app.settings import KbSettings, Persona

router = page_router()
PERSONAS = typing.get_args(Persona)


def _page(request: Request, session, kb: str, values: dict, errors: dict, status: int = 200) -> Response:
    return render(request, "small_talk.html", status, session=session, kb=kb, values=values, errors=errors,
                  kinds=KINDS, personas=PERSONAS, shipped=load_answers()["personas"])


@router.get("/kbs/{kb}/smalltalk", dependencies=needs("viewer"))
async def small_talk_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    own = state.settings.small_talk_answers or {}
    values = {"enabled": state.settings.small_talk, "persona": state.settings.small_talk_persona,
              "answers": {k: "\n".join(own.get(k, [])) for k in KINDS}}
    return _page(request, session, kb, values, {})


@router.post("/kbs/{kb}/smalltalk", dependencies=needs("editor"))
async def save_small_talk(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    answers = {k: [line.strip() for line in fields.get(f"answers_{k}", "").splitlines() if line.strip()] for k in KINDS}
    values = {"enabled": fields.get("enabled") == "on", "persona": fields.get("persona", ""),
              "answers": {k: fields.get(f"answers_{k}", "") for k in KINDS}}
    own = {k: v for k, v in answers.items() if v}
    stored = dict(await run_in_threadpool(state.stored_settings))
    stored.update(small_talk=values["enabled"], small_talk_persona=values["persona"])
    if own:
        stored["small_talk_answers"] = own
    else:
        stored.pop("small_talk_answers", None)
    try:
        checked = KbSettings.model_validate(stored).model_dump(exclude_none=True)
    except ValidationError as exc:
        return _page(request, session, kb, values, pydantic_problems(exc), 422)
    await run_in_threadpool(state.store.catalog.set_settings, kb, checked, "small_talk.update")
    await run_in_threadpool(state.apply_settings, checked)
    await flash(session, "Small talk saved: it applies from the next question on.")
    return redirect(kb_url(kb, "/smalltalk"))
