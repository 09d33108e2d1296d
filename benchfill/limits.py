"""One bound on requests in flight per endpoint, shared by probes, rewriter and judge.

Every model call takes a slot of its endpoint's bound before it goes out: probe calls keyed by the
probe's ``base_url`` (each replica's own URL for a fleet, ``benchfill.fleet``), rewriter and judge
calls by their ``api_base`` or, for a hosted provider reached through litellm, the provider's name
(``openai``, ``anthropic``). A search fires gaps x
parents x children rewrites at once; the bound is what keeps that to ``concurrency`` requests at a
time, and a rewriter served by the same vLLM server as the probes shares that server's bound.

A bound lives as long as its event loop (each ``asyncio.run`` starts afresh) and is sized by the
largest ``concurrency`` asked for its endpoint so far: a probe panel with 32 and a judge with 8 on
one server give that server 32 slots, used by both.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable

from benchfill.errors import NOTE

__all__ = ["EndpointBound", "endpoint_bound", "endpoint_key", "watch_stalls"]

log = logging.getLogger("benchfill.limits")

# A stalled endpoint (accepts the connection, never answers) holds each request for its whole timeout_s,
# 600 s by default, and retries start the wait again: without a word the run looks hung. The first notice
# comes after this long without an answer, the next ones after twice as long each time.
STALL_NOTICE_S = 60.0


class EndpointBound:
    """``async with bound:`` holds one of its endpoint's ``cap`` slots for the duration of a call.

    A semaphore that also says how many slots are taken (``in_flight``, what a probe fleet balances
    on) and can take one without waiting (``try_take``). A freed slot goes to the longest waiter;
    ``listen`` callbacks hear of a slot that is left free, so that a fleet waiting on several
    endpoints at once can take whichever frees first.
    """

    def __init__(self, cap: int, name: str = ""):
        self.cap, self.name = cap, name
        self.in_flight = 0
        self.stall_said = 0.0  # the silence ``watch_stalls`` last reported, until the next answer
        # When the endpoint last ended a call, or became busy after an idle spell: the silence watched.
        self.quiet_since = time.monotonic()
        self._waiters: deque[asyncio.Future] = deque()
        self._listeners: list[Callable[[], None]] = []

    def widen(self, cap: int) -> None:
        if cap > self.cap:
            self.cap = cap
            while self.in_flight < self.cap and self._hand_over():  # the new slots are free at once
                self.in_flight += 1
            self._freed()

    def listen(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def try_take(self) -> bool:
        """Take a slot if one is free and nobody is queued for it; never waits."""
        if self.in_flight < self.cap and not self._waiters:
            if self.in_flight == 0:
                self.quiet_since = time.monotonic()
            self.in_flight += 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut  # resolved by release(), which hands its slot over
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot, then cancelled before using it: pass it on
            elif fut in self._waiters:  # a stale waiter would keep try_take from a free slot
                self._waiters.remove(fut)
            raise

    def release(self, answered: bool = True) -> None:
        """Free the slot; ``answered`` False where the call got no reply (a timeout, a dropped connection, a
        cancellation), which leaves the endpoint's silence running."""
        if answered:
            self.quiet_since = time.monotonic()
            if self.stall_said:
                self.stall_said = 0.0
                log.warning("%s answers again", _shown(self.name), extra=NOTE)
        if not self._hand_over():
            self.in_flight -= 1
            self._freed()

    def _hand_over(self) -> bool:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return True
        return False

    def _freed(self) -> None:
        for callback in self._listeners:
            callback()

    async def __aenter__(self) -> EndpointBound:
        await self.take()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        from benchfill.retry import replied

        self.release(answered=exc_type is None or replied(exc))


_BOUNDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, EndpointBound]] = weakref.WeakKeyDictionary()


def endpoint_key(url_or_provider: str) -> str:
    """The name two callers of one endpoint agree on (a trailing ``/`` makes no other endpoint)."""
    return url_or_provider.rstrip("/")


def endpoint_bound(endpoint: str, cap: int) -> EndpointBound:
    """The bound of ``endpoint`` in the running event loop, widened to ``cap`` slots if it had fewer."""
    if cap < 1:
        raise ValueError(f"concurrency must be at least 1, got {cap}")
    table = _BOUNDS.setdefault(asyncio.get_running_loop(), {})
    key = endpoint_key(endpoint)
    bound = table.get(key)
    if bound is None:
        bound = table[key] = EndpointBound(cap, key)
    else:
        bound.widen(cap)
    return bound


async def watch_stalls(notice_s: float | None = None) -> None:
    """Log a warning (``benchfill.limits``) for each endpoint of the running loop that has calls in flight
    and has ended none for ``notice_s`` seconds (``STALL_NOTICE_S``), again at twice that silence, four
    times, ..., and once more when it answers again. Runs until cancelled; ``benchfill.netguard.run`` keeps
    one beside every run."""
    first = STALL_NOTICE_S if notice_s is None else notice_s
    loop = asyncio.get_running_loop()
    pause = min(first, 5.0) / 2
    while True:
        before = time.monotonic()
        await asyncio.sleep(pause)
        now = time.monotonic()
        # This process itself stood still (SIGSTOP, a suspended laptop, the loop blocked by its own work):
        # no endpoint could be heard meanwhile, so that time is not its silence. Blamed on the endpoint, a
        # 75 s stop of the whole process read "no answer for 75 s" from the in-process simulated world.
        overrun = now - before - pause
        if overrun > 5.0:
            for bound in list(_BOUNDS.get(loop, {}).values()):
                # never past now: a call that began, or ended, as the loop came back has set it afresh
                bound.quiet_since = min(bound.quiet_since + overrun, now)
        for bound in list(_BOUNDS.get(loop, {}).values()):
            quiet = now - bound.quiet_since
            if bound.in_flight and quiet >= max(first, 2 * bound.stall_said):
                bound.stall_said = quiet
                log.warning("waiting on %s: %d request%s in flight and no answer for %.0f s (a request gives up "
                            "after its timeout_s and is retried)", _shown(bound.name), bound.in_flight,
                            "" if bound.in_flight == 1 else "s", quiet)


def _shown(endpoint: str) -> str:
    from benchfill.redact import redact_url

    return redact_url(endpoint) or "an endpoint"
