"""What one service process holds for all the KBs it serves: `ProcessResources`.

One per process (app/api/main.py `create_app`): the deployment's settings, the store (the default KB's;
every other KB's is a scoped copy of it), the metrics, the encoders (shared by what loads them: one model in
memory, not one per KB), an encoder the app was made with, the re-ranking stages (FAQ_RERANKER), the
batcher, the query-log writer and the throttle of failed token checks (app/api/auth_throttle.py). Each KB's own state (app/api/state.py `KbState`) is given it explicitly.

Start-up order: `start(default)` opens the store, then the default KB (its encoder, pipeline and build,
the stages on its settings), then the query log, then the batcher; `close(default)` undoes it.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from app.api.auth_throttle import AuthThrottle
from app.api.metrics import ServiceMetrics
from app.api.workers import MatchBatcher, QueryLogWriter
from app.settings import Settings
from app.stages import load_stages
from models.encoders.base import Encoder, shared

if TYPE_CHECKING:
    from app.stages import Stage
    from app.store import FaqStore

log = logging.getLogger(__name__)


class ProcessResources:
    def __init__(self, settings: Settings, *, store: FaqStore | None = None, encoder: Encoder | None = None,
                 metrics: ServiceMetrics | None = None):
        self.settings = settings  # the deployment's: each KB applies its own stored settings over them
        self.kb = settings.kb  # the KB whose store is the process's (the routes without /kbs/{kb})
        self.store = store
        self._owns_store = store is None  # created in `open_store`: closed in `close`
        self.metrics = metrics or ServiceMetrics()
        self.auth_throttle = AuthThrottle(on_throttled=self.metrics.auth_throttled.inc)
        # an app made with an encoder serves every KB with it
        self.given_encoder: Encoder | None = shared(encoder) if encoder is not None else None
        self._encoders: dict[tuple, Encoder] = {}
        self._encoders_lock = threading.Lock()
        self._stages: list[Stage] | None = None
        self.stage_problem: str | None = None  # why FAQ_RERANKER did not load (`+rerank` requests get a 409)
        self._stages_lock = threading.Lock()
        self.batcher: MatchBatcher | None = None
        self.query_log: QueryLogWriter | None = None

    # -- shared by the KBs -------------------------------------------------------------------
    def shared_encoder(self, key: tuple, load: Callable[[], Encoder]) -> Encoder:
        """The encoder loaded under `key` (what loads it), loaded by `load` the first time."""
        with self._encoders_lock:
            encoder = self._encoders.get(key)
            if encoder is None:
                encoder = self._encoders[key] = shared(load())
            return encoder

    def stages(self, settings: Settings) -> list[Stage]:
        """The stages of FAQ_RERANKER, loaded once (on the settings of the first KB to open: the default KB's);
        [] when none is configured or it could not be loaded (`stage_problem` says why)."""
        with self._stages_lock:
            if self._stages is None:
                self._stages = []
                try:
                    self._stages = load_stages(settings)
                except Exception as exc:  # a bad FAQ_RERANKER must not stop /match: rerank requests get a 409 saying why
                    log.exception("could not load the re-ranker %s", settings.reranker)
                    self.stage_problem = f"FAQ_RERANKER={settings.reranker} could not be loaded: {exc}"
            return self._stages

    # -- lifecycle ---------------------------------------------------------------------------
    def open_store(self) -> FaqStore:
        import torch

        torch.set_num_threads(max(1, int(self.settings.torch_threads)))
        if self.store is None:
            from app.store import FaqStore

            self.store = FaqStore.from_settings(self.settings)
        return self.store

    def open(self, default: Any) -> None:
        """Blocking start-up work (run in a thread by `start`): store, the default KB (`default`, its
        app/api/state.py `KbState`, which imports this module), the query-log writer.
        The housekeeping (housekeeping.py) starts after it: sweep, traffic table, KB poller."""
        self.open_store()
        default.open()
        if self.settings.query_log:
            self.query_log = QueryLogWriter(self.store, self.metrics)
            self.query_log.start()

    async def start(self, default: Any) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.open, default)
        assert default.pipeline is not None
        self.batcher = MatchBatcher(default.pipeline, self.settings.encode_workers, self.metrics,
                                    max_queued=self.settings.max_queued_queries,
                                    timeout_s=self.settings.request_timeout_ms / 1000.0)
        await self.batcher.start()
        batcher = self.batcher
        self.metrics.queued.set_function(lambda: batcher.queued)

    async def close(self, default: Any) -> None:
        if self.batcher is not None:
            await self.batcher.stop()
        loop = asyncio.get_running_loop()
        if self.query_log is not None:
            await loop.run_in_executor(None, self.query_log.stop)
        default.release()
        if self._owns_store and self.store is not None:
            self.store.close()

