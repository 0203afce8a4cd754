"""`AuthThrottle`: failed token checks per client address, so that tokens cannot be guessed at speed.

Every failed check (a bearer token of /admin/*, a read key with FAQ_MATCH_REQUIRES_KEY, a console sign-in)
is counted under the key (client address, scope) in a sliding window: at most `LIMIT` failures per
`WINDOW_S` seconds. The scope is the KB of the route, or `CONSOLE` for the console's sign-in form, whose
token names no KB until it is checked. Once a key has `LIMIT` failures in the window, every further attempt
under it is refused (429 with Retry-After: the seconds until its oldest failure leaves the window) before its
token is looked at, the right token included: the point is to stop guessing, and a guesser would otherwise
learn when it had guessed right. Refused attempts are not counted, so a client that waits Retry-After gets
one more try, and the rate stays at `LIMIT` per window.

Trade-offs, chosen on purpose:
- Per address and scope: a client that gets its token wrong cannot lock out another address, nor its own
  use of another KB (several tenants behind one NAT address keep working). A guesser can rotate KB names in
  the path, though (FAQ_ADMIN_TOKEN reaches every KB, even unknown ones), so every failure also counts under
  the address alone, with `ADDRESS_LIMIT`: a backstop well above one KB's limit.
- Only tokens that match no token at all are counted. A missing one guesses nothing (a client that forgot
  its header keeps getting a plain 401); a token of another KB (403), or a read key on /admin, is a real
  token, not a guess.
- Successes do not reset the count: a guesser holding one valid token cannot use it to clear its record.
- The address is what the server saw (`request.client.host`: uvicorn takes it from X-Forwarded-For only for
  the trusted proxies). Behind an untrusted proxy every client shares the proxy's address; an attacker with
  many addresses (an IPv6 prefix) gets `LIMIT` guesses per address. FAQ_ADMIN_TOKEN and KB tokens are long
  random secrets: this throttle is defense in depth, not what keeps them secret.
- Per process: N replicas (or `--workers`) allow N times the rate.
- Bounded memory: at most `MAX_KEYS` keys; beyond it the key whose last failure is oldest is forgotten
  (so a flood of addresses can make the throttle forget an address, never grow the process).
- Concurrent checks of one key may each see it under the limit, so a burst of parallel guesses can get a
  few more than `LIMIT` answers; sequential guessing gets exactly `LIMIT`.
- The success path takes no lock: `retry_after` reads the dict (atomic under the GIL) and returns at once
  when the address has no failures, which is every request of a well-behaved client.
"""
from __future__ import annotations

import math
import threading
import time
from array import array
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from starlette.requests import Request

#: failures allowed per key in the window
LIMIT = 10
#: failures allowed per address across all its scopes in the window (KB names rotated in the path)
ADDRESS_LIMIT = 100
#: the sliding window, in seconds
WINDOW_S = 60.0
#: keys tracked at most (about 40 MB when all hold a full window)
MAX_KEYS = 100_000
#: the scope of the console's sign-in form (no KB name has this form)
CONSOLE = "*"

# the address-wide key's scope: a KB name is never empty
_ANY = ""


def client_address(request: Request) -> str:
    """The address failures are counted under: the peer uvicorn reports (it applies X-Forwarded-For only
    from its trusted proxies; the header read here could be forged by anyone)."""
    return request.client.host if request.client is not None else ""


class AuthThrottle:
    def __init__(self, *, limit: int = LIMIT, address_limit: int = ADDRESS_LIMIT, window_s: float = WINDOW_S,
                 max_keys: int = MAX_KEYS, clock: Callable[[], float] = time.monotonic,
                 on_throttled: Callable[[], object] | None = None):
        self.limit = limit
        self.address_limit = address_limit
        self.window_s = window_s
        self.max_keys = max_keys
        self.clock = clock
        self.on_throttled = on_throttled
        # key -> the times of its failures in the window, oldest first (array: no float object per failure)
        self._failures: OrderedDict[tuple[str, str], array] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._failures)

    def retry_after(self, address: str, scope: str) -> int | None:
        """Seconds until `address` may try again on `scope` (at least 1), or None when it may now.
        Counts a refusal (the metric) when it is not None."""
        if (address, scope) not in self._failures and (address, _ANY) not in self._failures:
            return None  # the common case: no failures from this address, no lock taken
        now = self.clock()
        with self._lock:
            wait = max(self._wait(address, scope, self.limit, now), self._wait(address, _ANY, self.address_limit, now))
        if wait <= 0:
            return None
        if self.on_throttled is not None:
            self.on_throttled()
        return max(1, math.ceil(wait))

    def failed(self, address: str, scope: str) -> None:
        """A failed check from `address` on `scope`."""
        now = self.clock()
        with self._lock:
            self._add((address, scope), now, self.limit)
            self._add((address, _ANY), now, self.address_limit)
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)

    # -- under self._lock ------------------------------------------------------------------------
    def _wait(self, address: str, scope: str, limit: int, now: float) -> float:
        key = (address, scope)
        times = self._failures.get(key)
        if times is None:
            return 0.0
        self._expire(times, now)
        if not times:  # nothing left in the window: later checks skip the lock again
            del self._failures[key]
            return 0.0
        if len(times) < limit:
            return 0.0
        # the oldest failure that must leave for the count to drop under the limit
        return times[len(times) - limit] + self.window_s - now

    def _add(self, key: tuple[str, str], now: float, limit: int) -> None:
        times = self._failures.get(key)
        if times is None:
            times = self._failures[key] = array("d")
        else:
            # moved, not popped and re-inserted: a check without the lock must never miss the key
            self._failures.move_to_end(key)  # last: the keys whose last failure is oldest are evicted first
        self._expire(times, now)
        times.append(now)
        if len(times) > limit:  # failures before the last `limit` no longer decide anything
            del times[:len(times) - limit]

    def _expire(self, times: array, now: float) -> None:
        start = now - self.window_s
        gone = 0
        while gone < len(times) and times[gone] <= start:
            gone += 1
        if gone:
            del times[:gone]
