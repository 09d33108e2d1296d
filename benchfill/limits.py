"""One bound on requests in flight per endpoint, shared by probes, rewriter and judge.

Every model call takes a slot of its endpoint's bound before it goes out: probe calls keyed by the
probe's ``base_url``, rewriter and judge calls by their ``api_base`` or, for a hosted provider
reached through litellm, the provider's name (``openai``, ``anthropic``). A search fires gaps x
parents x children rewrites at once; the bound is what keeps that to ``concurrency`` requests at a
time, and a rewriter served by the same vLLM server as the probes shares that server's bound.

A bound lives as long as its event loop (each ``asyncio.run`` starts afresh) and is sized by the
largest ``concurrency`` asked for its endpoint so far: a probe panel with 32 and a judge with 8 on
one server give that server 32 slots, used by both.
"""

from __future__ import annotations

import asyncio
import weakref

__all__ = ["EndpointBound", "endpoint_bound", "endpoint_key"]


class EndpointBound:
    """``async with bound:`` holds one of its endpoint's ``cap`` slots for the duration of a call."""

    def __init__(self, cap: int):
        self.cap = cap
        self._slots = asyncio.Semaphore(cap)

    def widen(self, cap: int) -> None:
        if cap > self.cap:
            for _ in range(cap - self.cap):  # the new slots are free at once, whatever is in flight
                self._slots.release()
            self.cap = cap

    async def __aenter__(self) -> EndpointBound:
        await self._slots.acquire()
        return self

    async def __aexit__(self, *exc) -> None:
        self._slots.release()


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
