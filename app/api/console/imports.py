"""The console's import and export: upload a KB file (JSONL, CSV, or another product's export: QnA Maker,
Azure question answering, QnABot, a Rasa YAML file, Dialogflow CSV, an FAQ page), see what it would change (a
dry run, with every bad line as `file:line: reason`), then apply it; download the KB as JSONL, or as QnA
Maker TSV or an Azure project JSON.

An upload is read by `kb.formats.read_any`, the reader of `faq kb import`, so the console accepts exactly
what the CLI accepts: a file with any bad line imports nothing; what the file keeps beside its FAQs
(synonyms, default answer, suggested phrasings) is stored as the CLI stores it (app/curation/imports.py). The checked records wait in the user's
console session (its database row, so any replica can apply it; FAQ_MAX_UPLOAD_BYTES bounds them) between the dry run and the
apply, which refuses to run when the KB changed since the dry run: the counts shown would be stale.
`import_records` writes in one transaction, so a failed apply changes nothing. The readers bound what an upload may
unpack to (a ZIP's or workbook's entries, bytes and ratio, a file's rows: kb/formats/replica.py, qna.py) and refuse
past it before it costs memory, so a bomb of a few KB is a 422 naming the limit like any bad line.
"""
from __future__ import annotations

import hashlib
import io
import re
import secrets
import tempfile
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.api import service
from app.api.roles import needs
from app.api.console.pages import (EarlyResponse, checked_post, current, flash, kb_state, kb_url, page_router,
                                   problem_page, redirect, render)
from app.api.console.sessions import ConsoleSession
from app.curation.imports import export_contents, keep_beside, settings_problem
from app.store.audit import importing
from kb.formats import Imported, read_any, write_any
from kb.records import KbRecord, KbValidationError, field_problem
from kb.files import write_records

MAX_PARTS = 10
MAX_FILENAME_CHARS = 200
#: errors shown on the page; the rest are counted
MAX_ERRORS_SHOWN = 200
#: the single files an upload may be (a Rasa project folder goes through `faq kb import`)
UPLOAD_SUFFIXES = (".jsonl", ".csv", ".tsv", ".xlsx", ".zip", ".json", ".html", ".htm", ".yml", ".yaml")
#: the downloads: format -> (file suffix, media type)
EXPORTS = {"jsonl": (".jsonl", "application/x-ndjson"), "qnamaker": (".tsv", "text/tab-separated-values"),
           "azure": (".json", "application/json")}

router = page_router()


@dataclass
class PendingImport:
    id: str
    kb: str
    name: str
    records: list[KbRecord]
    sync: bool
    revision: int
    format: str = "jsonl"
    synonyms: list[list[str]] | None = None
    suggestions: list[tuple[str, str]] | None = None
    default_answer: str | None = None
    #: the upload's SHA-256, for the import's audit row
    sha256: str | None = None

    def as_json(self) -> dict[str, Any]:
        """What the session row keeps (records as [faq_id, question, answer, tags, metadata, source,
        follow_ups, context_only, answers], KbRecord's own field order, and what the file keeps beside them)."""
        return {"id": self.id, "kb": self.kb, "name": self.name, "sync": self.sync, "revision": self.revision,
                "records": [[r.faq_id, r.question, r.answer, r.tags, r.metadata, r.source, r.follow_ups,
                             r.context_only, r.answers] for r in self.records],
                "format": self.format, "synonyms": self.synonyms or [],
                "suggestions": [list(s) for s in self.suggestions or []], "default_answer": self.default_answer,
                "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> PendingImport | None:
        if not data:
            return None
        return cls(data["id"], data["kb"], data["name"], [KbRecord(*r) for r in data["records"]], data["sync"],
                   data["revision"], data.get("format", "jsonl"), data.get("synonyms") or [],
                   [tuple(s) for s in data.get("suggestions") or []], data.get("default_answer"), data.get("sha256"))

    def imported(self) -> Imported:
        return Imported(self.format, self.records, list(self.synonyms or []), list(self.suggestions or []),
                        self.default_answer)


def multipart(request: Request, body: bytes, session: ConsoleSession) -> dict[str, tuple[str | None, bytes]]:
    """The multipart/form-data body as {field: (filename, bytes)}, first value of each name; 400 when
    it cannot be read."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "multipart/form-data":
        raise EarlyResponse(problem_page(request, 415, "the import form posts multipart/form-data",
                                         session=session))
    try:
        message = BytesParser(policy=policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
        parts = list(message.iter_parts()) if message.is_multipart() else None
    except Exception as exc:  # noqa: BLE001 - the parser's errors are many kinds of "not readable"
        raise EarlyResponse(problem_page(request, 400, f"the form body could not be read: {exc}",
                                         session=session)) from exc
    if parts is None or len(parts) > MAX_PARTS:
        raise EarlyResponse(problem_page(request, 400, "the form body could not be read: not a multipart form of "
                                                       f"at most {MAX_PARTS} fields", session=session))
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in parts:
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields.setdefault(name, (part.get_filename(), payload))
    return fields


def _text(fields: dict[str, tuple[str | None, bytes]], name: str) -> str:
    try:
        return fields.get(name, (None, b""))[1].decode("utf-8")
    except UnicodeDecodeError:
        return ""


def _display_name(request: Request, filename: str | None, session: ConsoleSession) -> tuple[str, str]:
    """The upload's name as shown in `file:line: reason` (its last path part) and its kind."""
    name = re.split(r"[\\/]", filename or "")[-1].strip()
    problem = field_problem(name, MAX_FILENAME_CHARS) if name else "choose a KB file"
    if problem is None and any(ch in name for ch in "\r\n"):
        problem = "must be one line"
    suffix = Path(name).suffix.lower()
    if problem is None and suffix not in UPLOAD_SUFFIXES:
        problem = f"must be one of {', '.join(UPLOAD_SUFFIXES)}, got {suffix or '(no extension)'!r}"
    if problem is not None:
        raise EarlyResponse(_import_page(request, session, None, 422, errors={"file": f"file: {problem}"}))
    return name, suffix


def check_upload(name: str, suffix: str, data: bytes) -> tuple[Imported | None, list[str]]:
    """The file as read (format detected), or None and every problem as `name:line: reason` (the readers'
    own messages)."""
    with tempfile.TemporaryDirectory(prefix="faq-console-import-") as folder:
        path = Path(folder) / f"upload{suffix}"
        path.write_bytes(data)
        try:
            imported = read_any(path, name=name)
        except KbValidationError as exc:
            return None, [e.replace(str(path), name, 1) for e in exc.errors]
    problem = settings_problem(imported)
    return (None, [f"{name}: {problem}"]) if problem else (imported, [])


def _import_page(request: Request, session: ConsoleSession, kb: str | None, status: int = 200, **context: Any):
    context.setdefault("errors", {})
    return render(request, "import.html", status=status, session=session, kb=kb or request.path_params.get("kb"),
                  **context)


@router.get("/kbs/{kb}/import", dependencies=needs("viewer"))
async def import_page(request: Request, kb: str) -> Response:
    session = await current(request)
    await kb_state(request, session, kb)
    return _import_page(request, session, kb, limit=request.app.state.service.settings.max_upload_bytes)


@router.post("/kbs/{kb}/import", dependencies=needs("editor"))
async def dry_run(request: Request, kb: str) -> Response:
    session = await current(request)
    body = await request.body()
    fields = multipart(request, body, session)
    if not session.csrf_ok(_text(fields, "csrf")):
        return problem_page(request, 403, "missing or wrong CSRF token: reload the page and try again",
                            session=session)
    state = await kb_state(request, session, kb)
    sync = _text(fields, "sync")
    if sync not in ("", "on"):
        return _import_page(request, session, kb, 422, errors={"sync": "sync: must be on or absent"})
    filename, data = fields.get("file", (None, b""))
    name, suffix = _display_name(request, filename, session)
    imported, problems = await run_in_threadpool(check_upload, name, suffix, data)
    limit = request.app.state.service.settings.max_upload_bytes
    if imported is None:
        return _import_page(request, session, kb, 422, filename=name, problems=problems[:MAX_ERRORS_SHOWN],
                            n_problems=len(problems), limit=limit)
    try:
        records = imported.records
        report = await run_in_threadpool(state.store.import_records, records, sync == "on", True)
    except KbValidationError as exc:  # read_kb checks the same rules; kept so nothing slips through
        return _import_page(request, session, kb, 422, filename=name, problems=exc.errors[:MAX_ERRORS_SHOWN],
                            n_problems=len(exc.errors), limit=limit)
    pending = PendingImport(secrets.token_urlsafe(16), kb, name, records, sync == "on", report.revision_before,
                            imported.format, imported.synonyms, imported.suggestions, imported.default_answer,
                            hashlib.sha256(data).hexdigest())
    await run_in_threadpool(setattr, session, "pending_import", pending.as_json())
    return _import_page(request, session, kb, filename=name, report=report, rows=len(records), pending=pending,
                        limit=limit, notes=imported.notes)


@router.post("/kbs/{kb}/import/apply", dependencies=needs("editor"))
async def apply(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    pending = PendingImport.from_json(await run_in_threadpool(lambda: session.pending_import))
    sent = fields.get("import_id", "")
    if pending is None or pending.kb != kb or not sent or not secrets.compare_digest(
            sent.encode("utf-8", "surrogatepass"), pending.id.encode()):
        return problem_page(request, 409, "import_id: no dry run to apply (it was applied, replaced by another, or "
                                          "the server restarted): upload the file again", session=session)

    def write() -> Any:
        if state.store.revision() != pending.revision:
            return None
        with importing(pending.name, pending.sha256, format=pending.format):
            report = state.store.import_records(pending.records, sync=pending.sync)
        beside = keep_beside(state.store, kb, pending.imported(), pending.sync, dry_run=False)
        if beside["settings_changed"]:
            state.apply_settings(state.stored_settings())
        return report

    try:
        report = await run_in_threadpool(write)
    except KbValidationError as exc:
        return problem_page(request, 422, f"nothing was imported: {exc}", session=session)
    if report is None:
        await run_in_threadpool(setattr, session, "pending_import", None)
        return problem_page(request, 409, "the KB changed since the dry run, so its counts are stale: nothing was "
                                          "imported; upload the file again", session=session)
    await run_in_threadpool(setattr, session, "pending_import", None)
    await run_in_threadpool(service.refresh, state)
    await flash(session, (f"Imported {pending.name}: {report.faqs_created} FAQs created, {report.faqs_updated} updated"
                     + (f", {report.faqs_deleted} deleted" if pending.sync else "")
                     + f"; {report.variants_added} phrasings added, {report.variants_removed} removed."
                     if report.changes else f"Imported {pending.name}: nothing changed."))
    return redirect(kb_url(kb, "/faqs"))


@router.get("/kbs/{kb}/export", dependencies=needs("viewer"))
async def export(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)

    fmt = request.query_params.get("format", "jsonl")
    if fmt not in EXPORTS:
        return problem_page(request, 422, f"format: one of {', '.join(EXPORTS)}, got {fmt[:40]!r}", session=session)
    suffix, media_type = EXPORTS[fmt]

    def dump() -> bytes:
        if fmt == "jsonl":
            out = io.StringIO()
            write_records(out, "jsonl", state.store.export_records())
            return out.getvalue().encode("utf-8")
        with tempfile.TemporaryDirectory(prefix="faq-console-export-") as folder:
            path = Path(folder) / f"{kb}{suffix}"
            write_any(path, fmt, export_contents(state.store, kb))
            return path.read_bytes()

    data = await run_in_threadpool(dump)
    return Response(data, media_type=media_type,
                    headers={"content-disposition": f'attachment; filename="{kb}{suffix}"'})
