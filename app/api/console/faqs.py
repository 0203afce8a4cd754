"""The console's FAQ list (search, pages) and editor: new, edit and delete, through the admin API's store
calls and request models, then `service.refresh` so /match sees the change at once. The editor writes the
FAQ fields as text: metadata one `key=value` per line, follow-ups one `faq_id | text` per line, and each answer
in another language in a box of its own (`answers_<code>`; an emptied box removes that language), plus one box
to add a language picked from the supported ones (`new_answer_language`, `new_answer`).

A save or delete names the FAQ version (`updated_at`) the form was opened on: one that changed since is
refused (409) with the user's text kept, so nobody overwrites an edit they have not seen.
"""
from __future__ import annotations

import threading
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.api import service
from app.api.roles import needs
from app.api.console.pages import (NEW_ANSWER, NEW_ANSWER_LANGUAGE, EarlyResponse, answers_shown, checked_post,
                                   current, flash, form_answers, form_values, kb_state, kb_url, page_router,
                                   problem_page, pydantic_problems, redirect, render, store_problems)
from app.api.console.sessions import ConsoleSession
from app.api.schemas import MAX_ID_CHARS, FaqCreate, FaqReplace
from app.store import FaqExists, FaqNotFound, KbValidationError
from kb.records import field_problem

PAGE_SIZE = 20
MAX_PAGE = 1_000_000
MAX_SEARCH_CHARS = 200
#: the version check and the write it guards happen under this lock, so two saves in this process
#: cannot both pass the check
_write_lock = threading.Lock()

router = page_router()


@router.get("/kbs/{kb}/faqs", dependencies=needs("viewer"))
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


class FormProblems(ValueError):
    """Lines of the form's text fields that do not have the shape the field asks for: {field: problem}."""

    def __init__(self, problems: dict[str, str]):
        super().__init__("; ".join(problems.values()))
        self.problems = problems


def _pairs(text: str, separator: str, name: str, shape: str, problems: dict[str, str]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if separator not in line:
            problems.setdefault(name, f"{name} line {n}: expected {shape}")
            continue
        left, right = line.split(separator, 1)
        pairs.append((left, right))
    return pairs


def _answers(fields: dict[str, str], problems: dict[str, str]) -> dict[str, str]:
    """The answers per language the form gives: each non-empty `answers_<code>` box (an empty one drops its
    language), and the new one when its box has text. Whether each code is supported is the store's check."""
    answers = {code: text for code, text in form_answers(fields).items() if text.strip()}
    code, text = fields.get(NEW_ANSWER_LANGUAGE, "").strip(), fields.get(NEW_ANSWER, "")
    if text.strip():
        if not code:
            problems["answers"] = "answers: choose the language of the new answer"
        elif code in answers:
            problems["answers"] = f"answers.{code}: the FAQ already has an answer in {code!r}; edit it in its own box"
        else:
            answers[code] = text
    return answers


def _faq_fields(fields: dict[str, str]) -> dict[str, Any]:
    """The form's text as the API's JSON shape: phrasings one per line, tags separated by commas, metadata
    one `key=value` and follow-ups one `faq_id | text` per line, answers per language as `_answers` reads them.
    Raises FormProblems for lines of neither shape; the values themselves are the request model's and the
    store's to check."""
    questions = [line.strip() for line in fields.get("questions", "").splitlines() if line.strip()]
    tags = [t.strip() for t in fields.get("tags", "").split(",") if t.strip()]
    problems: dict[str, str] = {}
    metadata: dict[str, str] = {}
    for key, value in _pairs(fields.get("metadata", ""), "=", "metadata", "key=value", problems):
        if key in metadata:  # the store names both keys when they differ only in case or spaces
            problems.setdefault("metadata", f"metadata: the key {key!r} is given twice")
        metadata[key] = value
    follow_ups = [{"faq_id": faq_id.strip(), "text": text.strip()}
                  for faq_id, text in _pairs(fields.get("follow_ups", ""), "|", "follow_ups", "faq_id | text", problems)]
    context_only = fields.get("context_only", "")
    if context_only not in ("", "on"):
        problems["context_only"] = "context_only: must be on or absent"
    answers = _answers(fields, problems)
    if problems:
        raise FormProblems(problems)
    return {"answer": fields.get("answer", ""), "questions": questions, "tags": tags, "metadata": metadata,
            "source": fields.get("source", "").strip() or None, "follow_ups": follow_ups,
            "context_only": context_only == "on", "answers": answers}


def _extra(body: Any) -> dict[str, Any]:
    """The FAQ fields of a validated form as the store takes them."""
    return {"metadata": body.metadata, "source": body.source, "follow_ups": [f.model_dump() for f in body.follow_ups],
            "context_only": body.context_only, "answers": body.answers}


@router.get("/kbs/{kb}/faqs/new", dependencies=needs("viewer"))
async def new_faq_page(request: Request, kb: str) -> Response:
    session = await current(request)
    await kb_state(request, session, kb)
    return render(request, "faq_form.html", session=session, kb=kb, creating=True, values=form_values({}),
                  errors={})


@router.post("/kbs/{kb}/faqs/new", dependencies=needs("editor"))
async def create_faq(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    page = {"session": session, "kb": kb, "creating": True, "values": form_values(fields)}
    try:
        body = FaqCreate.model_validate({"faq_id": fields.get("faq_id", "").strip(), **_faq_fields(fields)})
    except ValidationError as exc:
        return render(request, "faq_form.html", 422, errors=pydantic_problems(exc), **page)
    except FormProblems as exc:
        return render(request, "faq_form.html", 422, errors=exc.problems, **page)

    def write() -> Any:
        return state.store.create_faq(body.faq_id, body.answer, body.questions, tags=body.tags, **_extra(body))

    try:
        await run_in_threadpool(write)
    except FaqExists:
        return render(request, "faq_form.html", 409, errors={"faq_id": f"an FAQ {body.faq_id!r} already exists"},
                      **page)
    except KbValidationError as exc:
        return render(request, "faq_form.html", 422, errors=store_problems(exc), **page)
    await run_in_threadpool(service.refresh, state)
    await flash(session, f"Created FAQ {body.faq_id!r}.")
    return redirect(kb_url(kb, "/faqs"))


def _faq_id(request: Request, fields: dict[str, str] | None, session: ConsoleSession) -> str:
    faq_id = (fields if fields is not None else request.query_params).get("id", "")
    problem = field_problem(faq_id, MAX_ID_CHARS) if faq_id else "must not be empty"
    if problem is not None:
        raise EarlyResponse(problem_page(request, 422, f"id: {problem}", session=session))
    return faq_id


def _version(faq: Any) -> str:
    return faq.updated_at.isoformat() if faq.updated_at is not None else ""


@router.get("/kbs/{kb}/faqs/edit", dependencies=needs("viewer"))
async def edit_faq_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    faq_id = _faq_id(request, None, session)
    faq = await run_in_threadpool(state.store.get_faq, faq_id)
    if faq is None:
        return problem_page(request, 404, f"no FAQ {faq_id!r} in KB {kb!r}", session=session)
    values = {"faq_id": faq.faq_id, "answer": faq.answer, "questions": "\n".join(faq.questions),
              "tags": ", ".join(faq.tags), "metadata": "\n".join(f"{k}={v}" for k, v in faq.metadata.items()),
              "source": faq.source or "", "follow_ups": "\n".join(f"{f['faq_id']} | {f['text']}" for f in faq.follow_ups),
              "context_only": "on" if faq.context_only else "", "version": _version(faq),
              NEW_ANSWER_LANGUAGE: "", NEW_ANSWER: "", **answers_shown(faq.answers)}
    return render(request, "faq_form.html", session=session, kb=kb, creating=False, values=values, errors={})


@router.post("/kbs/{kb}/faqs/edit", dependencies=needs("editor"))
async def save_faq(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    faq_id = _faq_id(request, fields, session)
    values = form_values(fields)
    values["faq_id"] = faq_id
    page = {"session": session, "kb": kb, "creating": False, "values": values}
    try:
        body = FaqReplace.model_validate(_faq_fields(fields))
    except ValidationError as exc:
        return render(request, "faq_form.html", 422, errors=pydantic_problems(exc), **page)
    except FormProblems as exc:
        return render(request, "faq_form.html", 422, errors=exc.problems, **page)
    seen = fields.get("version", "")

    def write() -> tuple[str, Any]:
        with _write_lock:
            stored = state.store.get_faq(faq_id)
            if stored is None:
                return "gone", None
            if _version(stored) != seen:
                return "changed", stored
            return "saved", state.store.update_faq(faq_id, answer=body.answer, questions=body.questions,
                                                   tags=body.tags, **_extra(body))

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
    await run_in_threadpool(service.refresh, state)
    await flash(session, f"Saved FAQ {faq_id!r}.")
    return redirect(kb_url(kb, "/faqs"))


@router.post("/kbs/{kb}/faqs/delete", dependencies=needs("editor"))
async def delete_faq(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    faq_id = _faq_id(request, fields, session)
    seen = fields.get("version", "")

    prompting: list[str] = []

    def remove() -> str:
        with _write_lock:
            stored = state.store.get_faq(faq_id)
            if stored is None:
                return "gone"
            if _version(stored) != seen:  # deleting what the user has not seen would lose that edit
                return "changed"
            prompting.extend(state.store.prompting_to(faq_id))
            return "deleted" if state.store.delete_faq(faq_id) else "gone"

    outcome = await run_in_threadpool(remove)
    if outcome == "gone":
        return problem_page(request, 404, f"no FAQ {faq_id!r} in KB {kb!r}", session=session)
    if outcome == "changed":
        return problem_page(request, 409, f"FAQ {faq_id!r} was saved by someone else after you opened it: nothing "
                                          "was deleted. Open it again to see the saved version.", session=session)
    await run_in_threadpool(service.refresh, state)
    also = (f" It is no longer a follow-up of {', '.join(repr(f) for f in prompting[:10])}"
            f"{' and others' if len(prompting) > 10 else ''}." if prompting else "")
    await flash(session, f"Deleted FAQ {faq_id!r}.{also}")
    return redirect(kb_url(kb, "/faqs"))
