"""The console's builds page: a KB's index versions, the current build's expected-precision table and
curve, activate (roll back or forward), and "Build now" in a background thread.

A build here is `faq index build` without its options: the KB's settings (trees, search_k, versions
kept, FAQ_ES_URL), the service's own FAQ-side encoder, made current only when it verified and the KB's
/feedback labels do not say it matches worse than the current build (released as the CLI releases,
app/release/, with the label gate's defaults; `--dev` files are the CLI's), then served at once as
`POST /admin/index/reload` would. A build the labels refuse stays in the list, to activate by hand.
"""
from __future__ import annotations

import contextvars
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from fastapi import Request
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from app.api.roles import needs
from app.api.console.pages import (EarlyResponse, checked_post, current, flash, kb_state, kb_url, page_router,
                                   problem_page, redirect, render)
from app.api.state import KbState
from app.release.gate import feedback_labels_of
from app.release import activate_version
from app.release.expected_precision import CURVE_FILE, plot_expected_precision, served_table_for
from index.artifacts import VERSION_RE, IndexVerificationError, UnknownVersion

log = logging.getLogger(__name__)

#: a console build is made current only when its self-recall@10 reaches this (the CLI's default floor)
RECALL_FLOOR = 0.9
#: report lines a build keeps for its page (a KB build says a few dozen)
MAX_LINES = 200

router = page_router()


@dataclass
class BuildJob:
    kb: str
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    state: str = "running"  # running | done | failed
    lines: list[str] = field(default_factory=list)
    version: str | None = None
    message: str = ""
    seconds: float | None = None

    def say(self, line: str) -> None:
        if len(self.lines) < MAX_LINES:
            self.lines.append(str(line))

    def built(self, manifest: dict) -> None:
        self.version = manifest["version"]


class BuildJobs:
    """The console's builds of this process, the latest per KB: one KB builds one at a time (a second
    "Build now" while one runs is refused), different KBs may build side by side."""

    def __init__(self) -> None:
        self._latest: dict[str, BuildJob] = {}
        self._lock = threading.Lock()

    def get(self, kb: str) -> BuildJob | None:
        return self._latest.get(kb)

    def start(self, kb: str, state: KbState) -> BuildJob | None:
        """The started job, or None when one of this KB is still running."""
        with self._lock:
            running = self._latest.get(kb)
            if running is not None and running.state == "running":
                return None
            job = self._latest[kb] = BuildJob(kb)
        # in the request's context: the build's audit row names who pressed Build now
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(run_build, job, state), name=f"console-build-{kb}",
                         daemon=True).start()
        return job


def run_build(job: BuildJob, state: KbState) -> None:
    from app.match.assembly import encoder_spec
    from app.release import release_build

    t0 = time.perf_counter()
    settings = state.settings
    registry = state.registry
    try:
        if state.query_encoder is not None:
            raise BuildRefused("this KB serves queries through a query encoder (balanced mode): build it with "
                               "`faq index build`, which records it")
        current_version = registry.current()
        manifest = registry.read_manifest(current_version) if current_version else None
        encoder = state.background_encoder()
        released = release_build(
            state.store, encoder, registry, settings, labels=lambda: feedback_labels_of(state.store),
            report=job.say, on_built=job.built, n_trees=settings.ann_n_trees, search_k=settings.ann_search_k,
            recall_floor=RECALL_FLOOR, encoder_spec=encoder_spec(settings, manifest), lexical=True,
            es_url=settings.es_url, es_index_prefix=settings.es_index_prefix)
        built, verdict = released.manifest, released.verdict
        if not released.current:
            raise BuildRefused(
                f"built {built['version']}, but not made current: it matches the queries users labelled "
                f"(/feedback) worse than {verdict.current} (top-1 {verdict.after:.4f} against "
                f"{verdict.before:.4f}). Activate it below to serve it anyway.")
        state.load_current_build(reason="console build")
        try:
            plot_expected_precision(built, settings, registry.path(built["version"]) / CURVE_FILE)
        except Exception:  # noqa: BLE001 - the build is served; a missing picture is only a missing picture
            log.exception("could not draw the expected-precision curve of %s", built["version"])
        job.message = (f"built {built['version']}: {built['n_variants']} phrasings of {built['n_faqs']} FAQs; "
                       "now current and served")
        job.state = "done"
    except BuildRefused as exc:
        job.message, job.state = str(exc), "failed"
    except Exception as exc:  # noqa: BLE001 - whatever stopped it is shown on the page; `current` is unchanged
        log.exception("console build of KB %s failed", job.kb)
        job.message = f"build failed: {exc} (the current index is unchanged)"
        job.state = "failed"
    finally:
        job.seconds = time.perf_counter() - t0


class BuildRefused(RuntimeError):
    pass


def jobs_of(request: Request) -> BuildJobs:
    return request.app.state.console_builds


def _version_field(request: Request, value: str, session: Any) -> str:
    if not VERSION_RE.fullmatch(value or ""):  # fullmatch: the pattern's "$" would let a final newline in
        raise EarlyResponse(problem_page(request, 422, "version: not a version name (e.g. 20261122T010203Z-a1b2c3)",
                                         session=session))
    return value


def _table(state: KbState, manifest: dict | None) -> tuple[list[dict] | None, float | None]:
    """A build's table as it is (or would be) served, and the threshold it serves (the row the page marks)."""
    if manifest is None:
        return None, None
    from app.match.decider import Decider

    settings = state.settings
    table = served_table_for(manifest, settings)
    if not table:
        return None, None
    chosen = Decider(None, target_precision=settings.target_precision,
                     default_threshold=settings.default_threshold).threshold(None, table)
    return table, chosen


def _building_elsewhere(state: KbState, job: BuildJob | None) -> list[dict]:
    """Builds of the KB running outside this page's job: `faq index build`, or Build now on another replica
    (the index_builds rows still "building")."""
    mine = job.version if job is not None and job.state == "running" else None
    return [b for b in state.store.list_builds("building") if b["version"] != mine]


def _listing(state: KbState) -> tuple[list[dict], dict | None]:
    manifests = state.registry.list()
    return list(reversed(manifests)), next((m for m in manifests if m["current"]), None)


@router.get("/kbs/{kb}/builds", dependencies=needs("viewer"))
async def builds_page(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    return await _page(request, session, kb, state)


async def _page(request: Request, session: Any, kb: str, state: KbState, status: int = 200,
                error: str | None = None) -> Response:
    manifests, current_manifest = await run_in_threadpool(_listing, state)
    # the build whose expected precision is shown: ?version=, else the current one
    asked = request.query_params.get("version") if request.method == "GET" else None
    shown = current_manifest
    if asked:
        version = _version_field(request, asked, session)
        shown = next((m for m in manifests if m["version"] == version), None)
        if shown is None:
            return problem_page(request, 404, f"version: no build {version!r} in KB {kb!r}", session=session)
    table, chosen = _table(state, shown)
    curve = bool(shown) and (state.registry.path(shown["version"]) / CURVE_FILE).is_file()
    served = getattr(state.retriever, "version", None)
    job = jobs_of(request).get(kb)
    elsewhere = await run_in_threadpool(_building_elsewhere, state, job)
    return render(request, "builds.html", status=status, session=session, kb=kb, manifests=manifests,
                  current=current_manifest, shown=shown, table=table, chosen=chosen, curve=curve, served=served,
                  job=job, elsewhere=elsewhere, error=error)


@router.get("/kbs/{kb}/builds/curve", dependencies=needs("viewer"))
async def curve(request: Request, kb: str) -> Response:
    session = await current(request)
    state = await kb_state(request, session, kb)
    version = _version_field(request, request.query_params.get("version", ""), session)
    # only a finished build of this KB's registry: VERSION_RE leaves no room for a path
    if version not in await run_in_threadpool(state.registry.versions):
        return problem_page(request, 404, f"version: no build {version!r} in KB {kb!r}", session=session)
    path = state.registry.path(version) / CURVE_FILE
    if not path.is_file():
        return problem_page(request, 404, f"build {version!r} has no expected-precision curve", session=session)
    return FileResponse(path, media_type="image/png")


@router.post("/kbs/{kb}/builds/activate", dependencies=needs("publisher"))
async def activate(request: Request, kb: str) -> Response:
    session, fields = await checked_post(request)
    state = await kb_state(request, session, kb)
    version = _version_field(request, fields.get("version", ""), session)
    job = jobs_of(request).get(kb)
    if job is not None and job.state == "running":
        return await _page(request, session, kb, state, 409, "a build is running: activate after it ends")

    def switch() -> str | None:
        """None when served, else why not (then `current` is back where it was)."""
        registry = state.registry
        before = registry.current()
        if version not in registry.versions():
            return f"version: no finished build {version!r} in this KB"
        try:
            activate_version(registry, version, store=state.store)
        except (UnknownVersion, IndexVerificationError) as exc:
            return str(exc)
        try:
            state.load_current_build(reason="console activate")
        except Exception as exc:  # noqa: BLE001 - EncoderMismatch or a broken build: serve the old one again
            log.exception("could not serve %s", version)
            if before is not None:  # recorded too: other replicas may have served `version` meanwhile
                activate_version(registry, before, verify=False, store=state.store)
            return f"{version} could not be served ({exc}): {before or 'nothing'} stays current"
        return None

    problem = await run_in_threadpool(switch)
    if problem is not None:
        return await _page(request, session, kb, state, 409, problem)
    await flash(session, f"{version} is now current and served.")
    return redirect(kb_url(kb, "/builds"))


@router.post("/kbs/{kb}/builds/new", dependencies=needs("publisher"))
async def build_now(request: Request, kb: str) -> Response:
    session, _ = await checked_post(request)
    state = await kb_state(request, session, kb)
    if jobs_of(request).start(kb, state) is None:
        return await _page(request, session, kb, state, 409,
                           "a build of this KB is already running: wait for it to end")
    await flash(session, "Build started.")
    return redirect(kb_url(kb, "/builds"))
