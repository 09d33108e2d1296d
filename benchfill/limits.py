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
import weakref
from collections import deque
from collections.abc import Callable

__all__ = ["EndpointBound", "endpoint_bound", "endpoint_key"]


class EndpointBound:
    """``async with bound:`` holds one of its endpoint's ``cap`` slots for the duration of a call.

    A semaphore that also says how many slots are taken (``in_flight``, what a probe fleet balances
    on) and can take one without waiting (``try_take``). A freed slot goes to the longest waiter;
    ``listen`` callbacks hear of a slot that is left free, so that a fleet waiting on several
    endpoints at once can take whichever frees first.
    """

    def __init__(self, cap: int):
        self.cap = cap
        self.in_flight = 0
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

    def release(self) -> None:
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

    async def __aexit__(self, *exc) -> None:
        self.release()


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
        bound = table[key] = EndpointBound(cap)
    else:
        bound.widen(cap)
    return bound
