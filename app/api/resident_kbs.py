"""The KBs one process serves, and who may reach which.

- The default KB's state (`ResidentKbs.default`, the app's) is always resident: the routes without
  /kbs/{kb} serve it. What the KBs share is the process's (app/api/resources.py), given to each KB's state.
- Any other KB is loaded on its first request (its index, its pipeline with its own settings) and kept
  while used; beyond FAQ_MAX_RESIDENT_KBS the least recently used one is unloaded. A KB that requests
  are using (`in_flight`) is never unloaded: the budget is exceeded for that moment instead. Requests
  pin the retriever and pipeline they started with, so even an unload cannot change a running request.
- Loading is once per KB: concurrent first requests wait for the one load.
- Tokens: `faq kb token` gives a KB its own tokens, one role each (app/api/roles.py), and read keys. A token is looked up by its
  SHA-256 and the answer kept for TOKEN_CACHE_S, so a revoked token stops working within that time.
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable

from app.api.state import KbState

if TYPE_CHECKING:
    from app.store import TokenInfo

log = logging.getLogger(__name__)

#: seconds a token lookup is remembered (revocation takes effect within it)
TOKEN_CACHE_S = 5.0


class UnknownKb(LookupError):
    """A request named a KB that does not exist: 404."""

    def __init__(self, kb: str):
        super().__init__(f"no KB named {kb!r}")
        self.kb = kb


class ResidentKbs:
    def __init__(self, default: KbState):
        self.default = default
        self._resident: OrderedDict[str, KbState] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        self._tokens: dict[str, tuple[float, TokenInfo | None]] = {}
        self.loads = 0  # KB loads since start (a KB loaded again after an unload counts again)
        self.unloads = 0

    @property
    def settings(self):
        return self.default.settings

    # -- resident KBs ---------------------------------------------------------------------------
    def resident(self) -> list[KbState]:
        """The default KB's state, then the others from least to most recently used."""
        with self._lock:
            return [self.default, *self._resident.values()]

    def peek(self, kb: str, *, touch: bool = True) -> KbState | None:
        """`kb`'s state if it is resident (marked used now unless `touch` is false), else None; never loads."""
        if kb == self.default.kb:
            return self.default
        with self._lock:
            state = self._resident.get(kb)
            if state is not None and touch:
                self._resident.move_to_end(kb)
            return state

    def exists(self, kb: str) -> bool:
        """Is there a KB named `kb` (resident or not)? A catalogue lookup: nothing is loaded."""
        return kb == self.default.kb or self.peek(kb, touch=False) is not None or self.default.store.catalog.exists(kb)

    def get(self, kb: str) -> KbState:
        """`kb`'s state, loaded now if it is not resident (blocking: run it off the event loop).
        Raises UnknownKb."""
        state = self.peek(kb)
        if state is not None:
            return state
        with self._lock:
            loading = self._loading.setdefault(kb, threading.Lock())
        with loading:  # one load per KB; the others wait for it and find it resident
            state = self.peek(kb)
            if state is not None:
                return state
            if not self.default.store.catalog.exists(kb):
                raise UnknownKb(kb)
            state = KbState(self.default.resources, self.default.settings.model_copy(update={"kb": kb}))
            started = time.perf_counter()
            state.open()
            self._sweep(state)
            with self._lock:
                self._resident[kb] = state
                self.loads += 1
                evicted = self._evict(keep=kb)
                resident = len(self._resident) + 1
            state.metrics.kb_loads.inc()
            state.metrics.kb_unloads.inc(len(evicted))
            state.metrics.kbs_resident.set(resident)
            log.info("loaded KB %s in %.0f ms (%d resident)", kb, (time.perf_counter() - started) * 1000, resident)
        for old in evicted:
            old.release()
        return state

    def _evict(self, keep: str) -> list[KbState]:
        """Unload least recently used KBs beyond the budget (under self._lock); those in use stay, and so
        does `keep`, the KB just loaded for a request."""
        budget = max(0, int(self.default.settings.max_resident_kbs) - 1)  # the default KB takes one place
        evicted: list[KbState] = []
        for name in list(self._resident):
            if len(self._resident) <= budget:
                break
            state = self._resident[name]
            if state.in_flight > 0 or name == keep:
                continue
            del self._resident[name]
            evicted.append(state)
            self.unloads += 1
        return evicted

    def unload(self, kb: str) -> bool:
        """Drop `kb`'s state (deleted, or its settings changed: the next request loads it afresh)."""
        with self._lock:
            state = self._resident.pop(kb, None)
            resident = len(self._resident) + 1
        if state is not None:
            state.release()
            self.unloads += 1
            state.metrics.kb_unloads.inc()
            state.metrics.kbs_resident.set(resident)
        return state is not None

    @staticmethod
    def _sweep(state: KbState) -> None:
        """The debris of this KB's killed builds, as the default KB's is swept at start-up."""
        from index.build import sweep_builds

        try:
            sweep_builds(state.store, state.registry)
        except Exception:
            log.exception("could not sweep orphaned index builds of KB %s", state.kb)

    # -- settings and deletions made elsewhere (the CLI) ---------------------------------------
    def follow_catalog(self) -> None:
        """Unload resident KBs that were deleted or whose stored settings changed; apply the default
        KB's changed settings to its pipeline. Called by the KB poller."""
        stored = self.default.store.catalog.all_settings()
        for state in self.resident():
            own = stored.get(state.kb)
            if state is self.default:
                if own is not None and own != state.applied_settings:
                    state.apply_settings(own)
                continue
            if own is None or own != state.applied_settings:
                log.info("KB %s %s: unloading it", state.kb, "was deleted" if own is None else "has new settings")
                self.unload(state.kb)

    # -- tokens ----------------------------------------------------------------------------------
    def token_info(self, token: str) -> TokenInfo | None:
        """The live KB token `token` is, or None (remembered for TOKEN_CACHE_S)."""
        return self._remembered(token, lambda: self.default.store.catalog.verify_token(token))

    def token_live(self, token_id: int) -> TokenInfo | None:
        """Token `token_id` while it is live (remembered for TOKEN_CACHE_S, like `token_info`)."""
        # no token has this form: it cannot collide with token_info's entries
        return self._remembered(f"#id:{int(token_id)}", lambda: self.default.store.catalog.live_token(token_id))

    def _remembered(self, key: str, look_up: Callable[[], TokenInfo | None]) -> TokenInfo | None:
        now = time.monotonic()
        cached = self._tokens.get(key)
        if cached is not None and now - cached[0] < TOKEN_CACHE_S:
            return cached[1]
        info = look_up()
        if len(self._tokens) > 10_000:  # a flood of made-up tokens must not grow memory
            self._tokens.clear()
        self._tokens[key] = (now, info)
        return info

    def allows(self, token: str, kb: str, kinds: tuple[str, ...]) -> bool:
        """May `token` reach KB `kb` for an action needing one of `kinds`? FAQ_ADMIN_TOKEN reaches every
        KB; a KB token only its own KB."""
        if not token:
            return False
        if self.is_admin_token(token):
            return True
        info = self.token_info(token)
        return info is not None and info.kb == kb and info.kind in kinds

    def is_admin_token(self, token: str) -> bool:
        """Is `token` FAQ_ADMIN_TOKEN (the deployment's admin, every KB)?"""
        admin = self.default.settings.admin_token
        # compare_digest on bytes: no early exit on the first differing character (timing side channel)
        return bool(token and admin) and secrets.compare_digest(token.encode("utf-8", "surrogatepass"),
                                                                admin.encode("utf-8"))
