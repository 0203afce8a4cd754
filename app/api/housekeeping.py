"""The jobs that run beside the requests, started and stopped by the app's lifespan (app/api/factory.py).

At start-up: the sweep of builds whose process died, and the decider's traffic table (a restart keeps
the table its build's traffic had earned). Then, every FAQ_KB_POLL_SECONDS, the poller thread: a new
`current` build is loaded (`KbState.load_current_build`), else KB revision changes made elsewhere
(e.g. `faq kb import` in another process) are applied (`KbState.refresh_kb`); then the query log
is pruned when its hourly pass is due (FAQ_QUERY_LOG_RETENTION_DAYS) and the traffic table refreshed
when due. Every job logs its failure and is tried again later: none stops the service.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import datetime, timedelta, timezone

from typing import TYPE_CHECKING

from app.api.state import KbState

if TYPE_CHECKING:
    from app.api.resident_kbs import ResidentKbs

log = logging.getLogger(__name__)


class Housekeeping:
    #: the query log is pruned at most this often; several replicas doing it too only find less to delete
    PRUNE_EVERY_S = 3600.0
    #: one pass deletes for about this long (then the KB poll gets its turn); a bigger backlog goes on
    #: at the next poll
    PRUNE_PASS_S = 2.0
    #: the served build's traffic table is recomputed at most this often
    TRAFFIC_EVERY_S = 300.0

    def __init__(self, state: KbState, resident_kbs: ResidentKbs | None = None):
        self.state = state  # the default KB's: the deployment-wide jobs (sweep, retention) go through it
        self.resident_kbs = resident_kbs
        self._prune_due = 0.0  # time.monotonic() of the next pass
        self._traffic_due: dict[str, float] = {}  # per KB
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self) -> None:
        """Blocking start-up jobs (run in a thread by the lifespan, after ProcessResources.open), then the poller."""
        self.sweep_builds()
        self.refresh_traffic(force=True)
        poll_seconds = self.state.settings.kb_poll_seconds
        if poll_seconds and poll_seconds > 0:
            self._poller = threading.Thread(target=self._poll_loop, name="faq-kb-poller", daemon=True)
            self._poller.start()

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.open)

    async def stop(self) -> None:
        """Stop the poller (waiting up to 10 s for a refresh it is in); before the state closes the store."""
        self._stop.set()
        if self._poller is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._poller.join, 10.0)

    # -- the KB poller -----------------------------------------------------------------------
    def states(self) -> list[KbState]:
        """The KBs this process serves now (the default one first)."""
        return self.resident_kbs.resident() if self.resident_kbs is not None else [self.state]

    def poll_all(self) -> None:
        """One poller pass over every resident KB, after following the catalogue (KBs deleted, settings
        changed by `faq kb settings`). One KB's failure does not keep the others from their poll."""
        if self.resident_kbs is not None:
            try:
                self.resident_kbs.follow_catalog()
            except Exception:
                log.exception("could not follow the KB catalogue (will retry)")
        for state in self.states():
            try:
                self.poll_once(state)
            except Exception:
                log.exception("KB/index poll of KB %s failed (will retry)", state.kb)

    def poll_once(self, state: KbState | None = None) -> None:
        """One poller step for one KB (default: the default KB): a new `current` build wins; otherwise
        follow KB revision changes."""
        state = state or self.state
        version = state.registry.current()  # reads one symlink: cheap enough every few seconds
        if version is not None and version != getattr(state.retriever, "version", None) \
                and version != state.failed_version:
            try:
                state.load_current_build(reason="new build")
            except Exception:
                state.failed_version = version  # logged once; a reload or the next build tries again
                raise
            return
        if state.retriever is not None and state.store.revision() != state.kb_revision:
            state.refresh_kb(reason="kb poll")
        if state.reviewed or state.published is not None:  # a publication made elsewhere (`faq kb publish`)
            state.refresh_published(reason="publication poll")

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.state.settings.kb_poll_seconds):
            self.poll_all()
            self.prune_query_log()
            for state in self.states():
                self.refresh_traffic(state=state)

    # -- the decider's traffic table ---------------------------------------------------------
    def refresh_traffic(self, now: float | None = None, force: bool = False,
                        state: KbState | None = None) -> int | None:
        """Give the decider of one KB (default: the default KB) the latest logged top scores of its served
        build (app/match/decider.py `set_traffic`), when a refresh is due; returns how many were read, None when
        none ran. Never raises."""
        from index.decision import TRAFFIC_WINDOW

        state = state or self.state
        now = time.monotonic() if now is None else now
        retriever, pipeline = state.retriever, state.pipeline
        if (not force and now < self._traffic_due.get(state.kb, 0.0)) or retriever is None or pipeline is None \
                or not state.settings.query_log or state.store is None:
            return None
        self._traffic_due[state.kb] = now + self.TRAFFIC_EVERY_S
        try:
            scores = state.store.recent_scores(str(retriever.version), ("ann", "lexical"), TRAFFIC_WINDOW)
        except Exception:
            log.exception("could not read the query log's scores (next try in %.0f s)", self.TRAFFIC_EVERY_S)
            return None
        pipeline.decider.set_traffic(str(retriever.version), scores)
        published = state.published_pipeline  # production's, in a reviewed KB: the logged traffic is its own
        if published is not None and published is not pipeline:
            published.decider.set_traffic(str(retriever.version), scores)
        return len(scores)

    # -- debris of killed builds, query-log retention ------------------------------------------
    def sweep_builds(self) -> None:
        """Mark builds whose process died failed and remove their staging folders (index.build.sweep_builds:
        running builds of other processes are left alone). Never stops start-up."""
        from index.build import sweep_builds

        try:
            sweep_builds(self.state.store, self.state.registry)
        except Exception:
            log.exception("could not sweep orphaned index builds")

    def prune_query_log(self, now: float | None = None) -> int | None:
        """Delete query-log rows older than FAQ_QUERY_LOG_RETENTION_DAYS (0 = keep forever) when a pass
        is due; returns the rows deleted, None when no pass ran. Never raises."""
        days = int(getattr(self.state.settings, "query_log_retention_days", 90) or 0)
        now = time.monotonic() if now is None else now
        if days <= 0 or now < self._prune_due:
            return None
        self._prune_due = now + self.PRUNE_EVERY_S
        try:
            result = self.state.store.prune_query_log(datetime.now(timezone.utc) - timedelta(days=days),
                                                      max_seconds=self.PRUNE_PASS_S)
        except Exception:
            log.exception("could not prune the query log (next try in %.0f s)", self.PRUNE_EVERY_S)
            return None
        if not result.done:
            self._prune_due = now
        if result.deleted:
            log.info("pruned %d query-log rows older than %d days%s", result.deleted, days,
                     "" if result.done else " (more to go)")
        return result.deleted
