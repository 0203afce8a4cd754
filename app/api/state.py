"""One KB's served state: its store, settings, encoders, the served Retriever and pipeline, and the swap.

- `KbState.retriever` is THE served retriever. It is never mutated: a reload, a new build or a KB change
  builds a new Retriever off the request path and then replaces this one attribute (an atomic reference
  assignment). A request reads it once when it starts and keeps that object, so in-flight requests
  finish on the index they started with. What the pipeline computes from it (cached results, the
  decider's tables, the build's lexical index and stage vectors) lives on its `ServedBuild`
  (app/match/served.py), so the swap is the one invalidation.
- A KB whose publishing is `reviewed` has two deployments (app/release/publishing.py): `retriever` is the draft's
  (the `test` deployment), `published` the latest publication's content on the same build (production), each
  swapped the same way; `retriever_for` / `pipeline_for` pick a request's. Other KBs serve `retriever` to both.
- All replacements go through `_swap_lock`, so a slow KB refresh can never overwrite a newer build
  (each replacement reads "what is served now" and the store under the lock).
- What the KBs of a process share (encoders, stages, batcher, query-log writer, metrics) is the
  `ProcessResources` (resources.py) each state is given. The jobs that run beside the requests (the KB
  poller that calls `load_current_build` / `refresh_kb`, the traffic table, the build sweep, query-log
  retention) are in housekeeping.py. Refreshes encode new phrasings through the encoder's background view
  (`background_encoder`: small chunks at low priority), off the request path.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from app.match.rewrite import QueryRewrites
from app.match.assembly import (
    build_encoder_for, build_pipeline, encoder_runtime, encoder_spec, lexical_engine, load_configured_encoder,
)
from app.match import NO_INDEX, NoIndexError, Pipeline
from app.match.served import OpenBuilds
from app.settings import Settings
from index.artifacts import EncoderMismatch, check_encoder, check_query_encoder
from models.encoders.base import Encoder

if TYPE_CHECKING:
    from app.api.metrics import ServiceMetrics
    from app.api.resources import ProcessResources
    from app.api.workers import MatchBatcher, QueryLogWriter
    from app.stages import Stage
    from app.store import FaqStore
    from index.artifacts import BuildRegistry
    from index.lexical import LexicalIndex
    from index.retriever import Retriever

log = logging.getLogger(__name__)

#: publications whose delta vectors a KB keeps (app/release/publishing.py): the served one and those before it
KEPT_DELTAS = 4


class QueryLogDisabled(RuntimeError):
    """Feedback needs the query log, which `FAQ_QUERY_LOG=false` turned off."""


# -- one KB's state ------------------------------------------------------------------------------
class KbState:
    """Everything a request to one KB needs: its store, settings (the KB's stored ones over the
    deployment's), encoders, served retriever and pipeline. The process's shared parts come from
    `resources`; the default KB's state is made by the app (app/api/main.py), the others by
    app/api/resident_kbs.py when a request first names them."""

    def __init__(self, resources: ProcessResources, settings: Settings | None = None, *,
                 store: FaqStore | None = None):
        settings = settings if settings is not None else resources.settings
        self.resources = resources
        self.settings = settings
        self._deployment_settings = settings  # before the KB's own settings are applied over them
        self.applied_settings: dict = {}  # the KB's stored settings in force
        self.kb = settings.kb
        self.store = store
        self.encoder: Encoder | None = resources.given_encoder
        self.in_flight = 0  # requests using this state now (app/api/resident_kbs.py never unloads it meanwhile)
        self.registry: BuildRegistry | None = None
        # the served retriever: replaced (one reference assignment), never mutated
        self.retriever: Retriever | None = None
        self.kb_revision: int | None = None  # KB revision the served retriever reflects
        self.loaded_at: datetime | None = None
        self.not_ready_reason: str | None = "starting up"
        self.pipeline: Pipeline | None = None
        self._swap_lock = threading.RLock()
        self._delta_cache: dict = {}  # encoded delta variants reused across KB refreshes (see Retriever.with_kb)
        # a build the KB poller could not load: not retried every poll; any successful load clears it
        self.failed_version: str | None = None
        # the build versions open for serving (lexical index, stage vectors), kept across new pipelines
        self.builds = OpenBuilds()
        self._lexical_health: tuple[float, str | None] | None = None  # (checked_at, problem), cached briefly
        self.query_encoder: Encoder | None = None  # balanced mode: queries through it (FAQ_QUERY_ENCODER)
        self.query_encoder_setting = "FAQ_QUERY_ENCODER"
        self.query_encoder_problem: str | None = None  # why the query encoder did not load
        self.rewrites = QueryRewrites()  # the KB's synonyms, applied to each query before matching
        # production of a `reviewed` KB: the latest publication's content on the served build, its id, the
        # pipeline answering it (the published small-talk answers) and its delta's vectors
        self.published: Retriever | None = None
        self.published_id: int | None = None
        self.published_pipeline: Pipeline | None = None
        # the delta vectors of the publications served last (number -> text -> vector): a rollback to one of them,
        # or back again, encodes nothing
        self._published_deltas: dict[int, dict] = {}

    # -- the process's parts -----------------------------------------------------------------
    @property
    def is_default(self) -> bool:
        """The process's own KB (its store, the unlabelled index gauges)."""
        return self.kb == self.resources.kb

    @property
    def metrics(self) -> ServiceMetrics:
        return self.resources.metrics

    @property
    def batcher(self) -> MatchBatcher | None:
        return self.resources.batcher

    @property
    def query_log(self) -> QueryLogWriter | None:
        return self.resources.query_log

    @property
    def stage_problem(self) -> str | None:
        """Why FAQ_RERANKER did not load (the `+rerank` arms then answer 409 saying so); None: it did."""
        return self.resources.stage_problem

    # -- lifecycle ------------------------------------------------------------------------
    def _current_manifest(self) -> dict | None:
        """The current build's manifest, or None when there is none or it cannot be read (then
        /readyz reports the broken build; the encoder falls back to the configured default)."""
        try:
            current = self.registry.current()
            return self.registry.read_manifest(current) if current else None
        except Exception:  # noqa: BLE001 - a broken build must not stop start-up
            log.exception("could not read the current build's manifest")
            return None

    def open(self) -> None:
        """Blocking work (run in a thread): the KB's store, settings, encoders, pipeline and current build.
        The process's store is open first (`ProcessResources.open`)."""
        from index.elasticsearch.vectors import open_registry

        resources = self.resources
        if self.store is None:
            self.store = resources.store if self.is_default else resources.store.for_kb(self.kb)
        # the KB's own settings (`faq kb settings`) over the deployment's
        self.applied_settings = self.stored_settings()
        # KbSettingsRefused when they hold a value this version refuses: every request is told how to fix them
        self.settings = self._deployment_settings.for_kb(self.kb, self.applied_settings)
        self.registry = open_registry(self.settings)
        manifest = self._current_manifest()
        self.query_encoder = self._load_query_encoder(manifest)
        if self.encoder is None:
            # what loads: the spec and runtime as resolved (a KB without a build loads the configured
            # default, which is what the KBs with builds usually have too)
            key = ("faq side", encoder_spec(self.settings, manifest),
                   self._resolved_runtime(encoder_runtime(self.settings, manifest)), self.query_encoder is not None)
            self.encoder = resources.shared_encoder(
                key, lambda: build_encoder_for(self.settings, manifest, self.query_encoder is not None))
        stages = resources.stages(self.settings)
        # queries go through the query encoder when there is one (balanced mode); KB refreshes through the
        # encoder that built the index (its FAQ side)
        self.pipeline = self._pipeline(self.settings, stages)
        try:
            self.load_current_build(reason="startup")
        except Exception as exc:  # a broken build must not stop the process: /readyz says why
            log.exception("could not load the current index build")
            self.not_ready_reason = f"could not load the current index build: {exc}"

    def apply_settings(self, stored: dict) -> None:
        """Serve with the KB's new stored settings from the next request on: a new pipeline (threshold,
        target precision, answer weight) replaces the old one, which in-flight requests finish on. An
        encoder setting applies to the next build."""
        settings = self._deployment_settings.for_kb(self.kb, stored)
        with self._swap_lock:
            pipeline = self._pipeline(settings, self.stages)
            self.settings, self.applied_settings, self.pipeline = settings, dict(stored), pipeline
            if self.is_default and self.batcher is not None:
                self.batcher.pipeline = pipeline
            self.refresh_published(reason="settings", force=True)
        log.info("KB %s: serving with its new settings %s", self.kb, stored)

    def _pipeline(self, settings: Settings, stages: list, deployment: str = "test") -> Pipeline:
        """This KB's pipeline, with the KB's open builds. It reaches back to the state through a weak reference:
        a state and its pipeline must not form a cycle, or an unloaded KB (app/api/resident_kbs.py) would hold
        its index in memory until a full garbage collection instead of freeing it when its last request ends."""
        state = weakref.ref(self)

        def retriever() -> Retriever | None:
            alive = state()
            if alive is None:
                return None
            return (alive.published or alive.retriever) if deployment == "production" else alive.retriever

        def lexical(retriever: Retriever) -> LexicalIndex:
            from index.lexical import LexicalUnavailable, open_lexical

            if state() is None:
                raise LexicalUnavailable(f"KB {settings.kb} was unloaded; retry")
            try:
                engine = lexical_engine(settings)
            except ValueError as exc:
                raise LexicalUnavailable(str(exc)) from exc
            return open_lexical(retriever.build_dir, retriever.manifest, engine, es_url=settings.es_url,
                                es_prefix=settings.es_index_prefix, es_timeout_s=settings.es_timeout_s)

        return build_pipeline(settings, self.query_encoder or self.encoder, retriever, lexical=lexical, stages=stages,
                              builds=self.builds)

    def stored_settings(self) -> dict:
        """The KB's stored settings ({} for a database without its row: nothing to apply)."""
        from app.store import KbNotFound

        try:
            return self.store.catalog.settings(self.kb)
        except KbNotFound:
            return {}

    def _resolved_runtime(self, runtime: str) -> str:
        """"auto" as what it means on this machine, so that a KB without a build shares its encoder."""
        from models.encoders.base import pick_device
        from models.encoders.runtime import RuntimeUnavailable, resolve_runtime

        try:
            return resolve_runtime(runtime, pick_device(self.settings.device))
        except RuntimeUnavailable:
            return runtime  # loading it says why

    def release(self) -> None:
        """Close what this KB holds open (its builds' lexical indexes). Requests still holding its retriever or
        pipeline finish on them: those are dropped with their last reference."""
        self.builds.close()

    # -- readiness ---------------------------------------------------------------------------
    @property
    def stages(self) -> list[Stage]:
        """The re-ranking stages the `+rerank` arms run (FAQ_RERANKER: cross-encoder, MMAICM, analogy or
        Siamese folders, in order), as the pipeline holds them; [] = none installed (or none loaded yet)."""
        pipeline = self.pipeline
        return list(pipeline.stages) if pipeline is not None else []

    @property
    def ready(self) -> bool:
        return self.retriever is not None

    def require_retriever(self, deployment: str = "test") -> Retriever:
        """The retriever a request is answered on (read once: the request keeps this object): the draft's, or
        for `production` in a reviewed KB the latest publication's."""
        retriever = self.retriever
        if retriever is None:
            raise NoIndexError(self.not_ready_reason or NO_INDEX)
        if deployment == "production" and self.reviewed:
            return self.published or retriever
        return retriever

    def pipeline_for(self, deployment: str) -> Pipeline | None:
        if deployment == "production" and self.reviewed and self.published_pipeline is not None:
            return self.published_pipeline
        return self.pipeline

    # -- deployments -------------------------------------------------------------------------
    @property
    def reviewed(self) -> bool:
        return self.settings.publishing == "reviewed"

    def refresh_published(self, reason: str = "publication", force: bool = False) -> bool:
        """Serve the KB's latest publication on production (a reviewed KB), on the served build: what it holds
        of the content is reused, the rest encoded (the phrasings and answers it does not hold). True when
        production changed. A KB that publishes immediately serves the draft to both."""
        from app.store.publications import content_snapshot

        with self._swap_lock:
            base = self.retriever
            if not self.reviewed or base is None or self.store is None:
                changed = self.published is not None
                self.published = self.published_pipeline = self.published_id = None
                return changed
            latest = self.store.publications.latest_id()
            current = self.published
            if latest is None:  # turned reviewed by FAQ_PUBLISHING: what users got until now stays theirs
                from app.release.publishing import start_reviewing
                from app.store.audit import Actor, acting_as

                with acting_as(Actor(name="faq serve", role="admin", source="api")):
                    start_reviewing(self.store)
                latest = self.store.publications.latest_id()
                log.info("KB %s: publishing is reviewed and nothing was published: its content is now publication "
                         "%s", self.kb, latest)
            if current is not None and latest == self.published_id and current.version == base.version \
                    and not force:
                return False
            row = self.store.publications.get(latest)
            cache = {text: vec for delta in self._published_deltas.values() for text, vec in delta.items()}
            published = base.with_kb(content_snapshot(row.content, row.revision), self.background_encoder(),
                                     cache=cache)  # trimmed by with_kb to this publication's delta
            self._published_deltas = {n: d for n, d in self._published_deltas.items()
                                      if n in sorted(self._published_deltas)[-(KEPT_DELTAS - 1):]}
            self._published_deltas[latest] = cache
            # its own pipeline, even when it answers small talk as the draft's does: each keeps the build state
            # and query cache of the retriever it serves, so alternating deployments costs neither anything
            own = row.content.get("small_talk_answers")
            pipeline = self._pipeline(self.settings.model_copy(update={"small_talk_answers": own}), self.stages,
                                      deployment="production")
            self.published, self.published_id, self.published_pipeline = published, latest, pipeline
            self.metrics.swaps.labels(reason=reason).inc()
            log.info("KB %s: production serves publication %s on index %s (%s)", self.kb, latest, base.version, reason)
            return True

    # -- swapping ----------------------------------------------------------------------------
    def load_current_build(self, reason: str = "reload") -> tuple[str | None, str | None]:
        """Load the registry's `current` build (if it is not the one served) with the KB delta applied,
        then swap. Returns (previous_version, served_version)."""
        from index.elasticsearch.vectors import load_retriever

        with self._swap_lock:
            previous = self.retriever
            prev_version = getattr(previous, "version", None)
            version = self.registry.current() if self.registry is not None else None
            if version is None:
                if previous is None:
                    self.not_ready_reason = NO_INDEX
                return prev_version, prev_version
            if previous is not None and version == prev_version:
                return prev_version, prev_version  # already served: nothing to load
            fresh = load_retriever(self.registry, version)
            try:
                check_encoder(fresh.manifest or {}, self.encoder)
                if self.query_encoder is not None:
                    check_query_encoder(fresh.manifest or {}, self.query_encoder, self.query_encoder_setting)
                elif self.query_encoder_problem:
                    raise EncoderMismatch(self.query_encoder_problem)
            except EncoderMismatch as exc:
                if previous is None:
                    self.not_ready_reason = str(exc)
                raise
            snapshot = self.store.snapshot()
            served = fresh.with_kb(snapshot, self.background_encoder(), cache=self._delta_cache)
            self.failed_version = None
            self._install(served, snapshot.revision, reason)
            log.info("serving index %s (was %s, %s)", served.version, prev_version, reason)
            self.refresh_published(reason=reason)
            return prev_version, served.version

    def refresh_kb(self, reason: str = "kb") -> bool:
        """Apply the store's current KB to the served build (delta + tombstones); True if swapped."""
        with self._swap_lock:
            current = self.retriever
            if current is None:
                return False
            snapshot = self.store.snapshot()
            if snapshot.revision == self.kb_revision:
                return False
            served = current.with_kb(snapshot, self.background_encoder(), cache=self._delta_cache)
            self._install(served, snapshot.revision, reason)
            return True

    def _load_query_encoder(self, manifest: dict | None) -> Encoder | None:
        """FAQ_QUERY_ENCODER, else the query encoder the current build recorded, else None (queries use the
        build's encoder). One that cannot be loaded leaves the service unready, saying which setting to fix."""
        recorded = ((manifest or {}).get("query_encoder") or {}).get("spec")
        spec = self.settings.query_encoder or recorded
        self.query_encoder_setting = ("FAQ_QUERY_ENCODER" if self.settings.query_encoder
                                      else "FAQ_QUERY_ENCODER (the build recorded this one)")
        self.query_encoder_problem = None
        if not spec:
            return None
        try:
            return self.resources.shared_encoder(("query side", spec, self.settings.encoder_runtime,
                                         (manifest or {}).get("encoder_runtime")),
                                        lambda: load_configured_encoder(self.settings, manifest, spec=spec))
        except Exception as exc:  # noqa: BLE001 - /readyz says why instead of a dead process
            log.exception("could not load the query encoder %s", spec)
            self.query_encoder_problem = f"{self.query_encoder_setting}={spec} could not be loaded: {exc}"
            return None

    def background_encoder(self) -> Encoder:
        """The encoder for KB refreshes: in small low-priority chunks, so encoding a bulk import
        never holds the encoder for long while /match requests wait for it."""
        background = getattr(self.encoder, "background", None)
        return background() if background is not None else self.encoder

    def review_queues(self, since: Any = None) -> dict:
        """The KB's review queues as the console and the admin API show them (app/curation/review.py): unanswered
        queries grouped by words, then merged by this encoder's cosine (app/curation/review.py CLUSTER_COSINE), with
        the vectors of queries seen before remembered."""
        from app.curation.review import CLUSTER_COSINE, EmbedMemo, queues

        memo = getattr(self, "_review_embed", None)
        if memo is None and self.encoder is not None:
            memo = self._review_embed = EmbedMemo(self.background_encoder().encode)
        return queues(self.store, since, embed=memo, cosine=CLUSTER_COSINE if memo is not None else None)

    def _install(self, retriever: Retriever, kb_revision: int, reason: str) -> None:
        self.retriever = retriever  # the atomic swap
        self.kb_revision = kb_revision
        self.loaded_at = datetime.now(timezone.utc)
        self.not_ready_reason = None
        if self.is_default:  # the unlabelled index gauges are the default KB's
            self.metrics.observe_retriever(retriever, kb_revision)
        self.metrics.swaps.labels(reason=reason).inc()

    # -- lexical arms ------------------------------------------------------------------------------
    def lexical_for(self, retriever: Retriever) -> LexicalIndex:
        """The LexicalIndex of `retriever`'s build version on the configured engine (opened once per
        version; indexes of versions no longer served are closed). Raises LexicalUnavailable."""
        assert self.pipeline is not None
        return self.pipeline.lexical_index(retriever)

    def lexical_problem(self, max_age_s: float = 5.0) -> str | None:
        """Why the lexical arms cannot answer now (None: they can). Checked at most every `max_age_s`
        so /readyz probes do not hammer Elasticsearch."""
        from index.lexical import LexicalUnavailable

        retriever = self.retriever
        if retriever is None:
            return None  # not ready at all: /readyz says so already
        cached = self._lexical_health
        now = time.monotonic()
        if cached is not None and now - cached[0] < max_age_s:
            return cached[1]
        try:
            problem = self.lexical_for(retriever).health()
        except LexicalUnavailable as exc:
            problem = str(exc)
        self._lexical_health = (now, problem)
        return problem

    # -- query log and feedback ------------------------------------------------------------------
    def log_matches(self, rows: list[dict]) -> None:
        if self.query_log is not None:
            for row in rows:
                row["kb"] = self.kb
            self.query_log.submit(rows)

    def record_feedback(self, request_id: str, correct: bool | None, faq_id: str | None,
                        session_id: str | None = None) -> bool:
        """Record feedback once per request; False when no such request was logged. Raises
        QueryLogDisabled, app.store.FaqNotFound (`faq_id` is not in the KB), and the store's
        FeedbackAlreadyRecorded / FeedbackSessionMismatch (FAQ_FEEDBACK_REQUIRES_SESSION: a request
        logged with a session_id needs it)."""
        from app.store import FaqNotFound

        if self.query_log is None:
            raise QueryLogDisabled("the query log is disabled (FAQ_QUERY_LOG=false), so feedback cannot be recorded")
        if faq_id is not None and not self.store.faq_exists(faq_id):
            raise FaqNotFound(f"no FAQ {faq_id!r} in the knowledge base")
        self.query_log.flush()  # the request's row may still be buffered
        return bool(self.store.record_feedback(
            request_id, correct, faq_id, session_id=session_id,
            require_session=bool(getattr(self.settings, "feedback_requires_session", False))))

    # -- introspection -------------------------------------------------------------------------
    def index_info(self) -> dict:
        retriever = self.retriever
        return {
            "version": getattr(retriever, "version", None),
            "manifest": getattr(retriever, "manifest", None),
            "delta_size": getattr(retriever, "n_delta", None) if retriever is not None else None,
            "tombstones": getattr(retriever, "n_tombstones", None) if retriever is not None else None,
            "kb_revision": self.kb_revision,
            "loaded_at": self.loaded_at,
            "reason": None if retriever is not None else (self.not_ready_reason or NO_INDEX),
            "decision": self.decision_summary(),
        }

    def decision_summary(self) -> dict | None:
        """The served build's scoring, default threshold and expected-precision table (None: no build)."""
        retriever, pipeline = self.retriever, self.pipeline
        if retriever is None or pipeline is None:
            return None
        return pipeline.decision_summary(retriever)
