"""Probe fleets: one probe model served by several endpoints (replicas), as a vLLM fleet is.

Each request attempt goes to the replica in service with the fewest requests in flight that has a
free slot of its own bound (``benchfill.limits``; ties go round the replicas in turn), and waits for
the first slot to free on any of them when all are full. A replica whose attempts keep failing
(``eject_after`` in a row, or ``error_rate`` of the last ``window``), or that refuses a request (401,
403, 404) another replica serves, is taken out of service for a cool-down; then one health check
(``GET /v1/models``: does it answer and list its models?) either takes it back or keeps it out for twice
as long (at most ``max_cooldown_s``). Its requests go to the
others: the caller's retry picks another replica. When every replica is out, an attempt waits for the
first cool-down to end and the health check after it, then gives up with ``FleetDown``, one line naming
every replica and why it is out; the retry policy decides whether to wait again.

Health is kept per endpoint, not per probe, so that a dead server is noticed once for every model on
it. A probe with one endpoint never ejects it (there is nowhere else to go): its traffic is exactly
what it was before fleets, as is that of an endpoint no fleet uses.

What a replica served is counted in ``tally()`` (its URL -> requests, calls, failures, ejections),
which the probe client reports as ``TrafficStats.replicas``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Any

from benchfill.config import FleetPolicy
from benchfill.errors import NOTE
from benchfill.limits import EndpointBound
from benchfill.redact import scrub

log = logging.getLogger("benchfill.fleet")

__all__ = ["Fleet", "FleetDown", "Replica", "new_tally"]


class FleetDown(ConnectionError):
    """No replica of a fleet is in service (a ConnectionError: the retry policy may wait and try again)."""


def new_tally() -> dict[str, int]:
    return {"requests": 0, "calls": 0, "failures": 0, "ejections": 0}


class Replica:
    """One endpoint as the fleets that use it see it: its client, its bound, its health."""

    def __init__(self, url: str, client: Any, bound: EndpointBound, policy: FleetPolicy,
                 tally: Callable[[], dict[str, dict[str, int]]], clock: Callable[[], float] = time.monotonic,
                 key_envs: Collection[str] = ()):
        self.url = url
        self.key_envs = tuple(key_envs)  # the variables holding the keys sent: scrubbed from every reason
        self.client = client
        self.bound = bound
        self.policy = policy
        self.tally = tally  # looked up at each count: the caller may start its counts afresh
        self.clock = clock
        self.models: set[str] = set()  # what its health check looks for
        self.ejectable = False  # only a replica of a fleet of two or more is ever taken out
        self.out_until: float | None = None  # None: in service
        self.reason = ""
        self.strikes = 0  # ejections since it last served
        self.consecutive = 0
        self.recent: deque[bool] = deque(maxlen=policy.window)  # True: a failed attempt
        self.check: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None  # the health check due at the cool-down's end
        self._watchers: list[Callable[[], None]] = []  # fleets to wake when it goes out or comes back

    @property
    def counts(self) -> dict[str, int]:
        tally = self.tally()
        counts = tally.get(self.url)
        if counts is None:
            counts = tally[self.url] = new_tally()
        return counts

    @property
    def in_service(self) -> bool:
        return self.out_until is None

    def outcome(self, ok: bool | None, detail: str = "") -> None:
        """An attempt's end: True served, False failed (counts against health), None says nothing
        about health (a 4xx, a 429: the request's fault or the server's back-pressure)."""
        if ok is None:
            return
        if ok:
            self.counts["calls"] += 1
            if self.in_service:
                self.consecutive = 0
                self.strikes = 0
                self.recent.append(False)
            return
        self.counts["failures"] += 1
        if not self.ejectable or not self.in_service:
            return
        self.consecutive += 1
        self.recent.append(True)
        p = self.policy
        if self.consecutive >= p.eject_after:
            self.eject(f"{self.consecutive} failed attempts in a row, last: {detail}")
        elif len(self.recent) == self.recent.maxlen and sum(self.recent) >= p.error_rate * len(self.recent):
            self.eject(f"{sum(self.recent)} of its last {len(self.recent)} attempts failed, last: {detail}")

    def refused(self, detail: str) -> None:
        """It refused a request (401, 403, 404) that another replica then served: it refuses the key or
        does not serve the model, and will go on doing so. Out at once; its health check (``/v1/models``
        with the key, listing its models) keeps it out until that changes."""
        self.counts["failures"] += 1
        if self.ejectable and self.in_service:
            self.eject(f"refused a request another replica served: {detail}")

    def eject(self, reason: str) -> None:
        # an outage is counted once: a failed health check lengthens the one under way (a replica down
        # for the whole run said "5 ejections")
        if self.out_until is None:
            self.counts["ejections"] += 1
        self.strikes += 1
        cooldown = min(self.policy.cooldown_s * 2 ** (self.strikes - 1), self.policy.max_cooldown_s)
        self.out_until = self.clock() + cooldown
        self.consecutive = 0
        self.recent.clear()
        # What the replica said (an error body, a health check's) may echo the request's headers: the
        # reason is logged and shown again in FleetDown's line, so it is scrubbed once here.
        self.reason = reason = scrub(reason, env=self.key_envs)
        log.warning("replica %s out of service for %.1f s: %s", self.url, cooldown, reason)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(cooldown, self.due_check)
        self._changed()

    def due_check(self) -> asyncio.Task | None:
        """The running health check, started if the cool-down is over; None while cooling down."""
        if self.check is None and self.out_until is not None and self.clock() >= self.out_until - 1e-3:
            self.check = asyncio.ensure_future(self._health_check())
        return self.check

    async def _health_check(self) -> None:
        try:
            page = await asyncio.wait_for(self.client.models.list(), self.policy.health_timeout_s)
            served = {m.id for m in page.data}
            missing = sorted(self.models - served)
            problem = f"does not serve {', '.join(missing)}" if missing else ""
        except Exception as exc:  # noqa: BLE001  (refused, timeout, 5xx: all mean "not healthy")
            said = scrub(str(exc), env=self.key_envs)  # before it is cut short: a key cut in two is no match
            problem = f"{exc.__class__.__name__}: {said.splitlines()[0][:160] if said else ''}"
        finally:
            self.check = None
        if problem:
            self.eject(f"health check failed: {problem}")
        else:
            self.out_until = None
            log.warning("replica %s back in service after a health check", self.url, extra=NOTE)
            self._changed()

    def close(self) -> None:
        """Stop what is pending (a timer, a health check under way): the event loop is ending."""
        if self._timer is not None:
            self._timer.cancel()
        if self.check is not None:
            self.check.cancel()

    def watch(self, on_slot: Callable[[], None], on_change: Callable[[], None]) -> None:
        """``on_slot`` hears of each slot left free, ``on_change`` of going out and coming back."""
        self.bound.listen(on_slot)
        self._watchers.append(on_change)

    def _changed(self) -> None:
        for callback in self._watchers:
            callback()

    def describe(self) -> str:
        if self.in_service:
            return f"{self.url}: in service"
        left = max(self.out_until - self.clock(), 0.0)
        when = "health check under way" if self.check is not None else f"health check in {left:.1f} s"
        return f"{self.url}: {self.reason} ({when})"


class Fleet:
    """The replicas of one probe: ``r = await fleet.acquire(); ...; fleet.release(r, ok)``."""

    def __init__(self, probe: str, replicas: list[Replica]):
        self.probe = probe
        self.replicas = replicas
        self._turn = 0
        self._sleepers: deque[asyncio.Future] = deque()  # attempts waiting for a slot
        self._awaiting: deque[asyncio.Future] = deque()  # attempts waiting for a replica to come back
        self._down_told = False  # the all-out warning is given once until a replica comes back
        if len(replicas) > 1:
            for r in replicas:
                r.ejectable = True
                r.watch(self._wake, self._wake_all)

    async def acquire(self, avoid: Replica | Collection[Replica] | None = None) -> Replica:
        """A replica with one of its slots taken for this attempt; one in ``avoid`` (the replicas the
        call's earlier attempts failed on) only when every replica in service is one of them."""
        if isinstance(avoid, Replica):
            avoid = {avoid}
        if len(self.replicas) == 1:  # one endpoint: its bound, first come first served
            r = self.replicas[0]
            await r.bound.take()
            r.counts["requests"] += 1
            return r
        checked = 0  # health checks this attempt has seen end while every replica was out
        while True:
            r = self._pick(avoid)
            if r is not None:
                r.counts["requests"] += 1
                return r
            if any(x.in_service for x in self.replicas):
                await self._sleep(self._sleepers)  # full: the first slot freed on any replica
                continue
            checks = [c for c in (x.due_check() for x in self.replicas) if c is not None]
            if checked and (not checks or checked >= len(self.replicas)):
                raise FleetDown(self.down_message())  # a cool-down and its health check waited for, in vain
            if checks:
                await asyncio.wait(checks, return_when=asyncio.FIRST_COMPLETED)
                checked += 1
                continue
            first = min(x.out_until for x in self.replicas if x.out_until is not None)
            left = max(first - self.replicas[0].clock(), 0.0)
            if not self._down_told:
                self._down_told = True
                log.warning("%s; waiting %.1f s for the first health check", self.down_message(), left)
            await self._sleep(self._awaiting, left)  # a freed slot of a replica out of service is no news

    def release(self, r: Replica, ok: bool | None, detail: str = "", answered: bool = True) -> None:
        r.bound.release(answered)
        r.outcome(ok, detail)

    def down_message(self) -> str:
        return (f"probe {self.probe}: all {len(self.replicas)} replicas are out of service: "
                + "; ".join(r.describe() for r in self.replicas))

    def _pick(self, avoid: Collection[Replica] | None) -> Replica | None:
        avoid = avoid or ()
        # A replica the call failed on is tried again only when every replica in service is one: while
        # another is up, the call waits for its slot (a dead replica always has a free one).
        elsewhere = any(r.in_service and r not in avoid for r in self.replicas)
        n = len(self.replicas)
        start, self._turn = self._turn, (self._turn + 1) % n
        best, best_key = None, None
        for i in range(n):
            r = self.replicas[(start + i) % n]
            b = r.bound
            if not r.in_service:
                r.due_check()  # its cool-down over: one health check decides whether it comes back
                continue
            if b.in_flight >= b.cap or (elsewhere and r in avoid):
                continue
            key = (r in avoid, b.in_flight)  # least outstanding; the first in turn wins a tie
            if best_key is None or key < best_key:
                best, best_key = r, key
        if best is not None and best.bound.try_take():
            return best
        return None

    @staticmethod
    async def _sleep(queue: deque[asyncio.Future], timeout: float | None = None) -> None:
        fut = asyncio.get_running_loop().create_future()
        queue.append(fut)
        try:
            if timeout is None:
                await fut
            else:
                await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            if not fut.done():
                fut.cancel()

    def _wake(self) -> None:
        """A slot freed: the longest sleeper looks again (one slot, one sleeper)."""
        while self._sleepers:
            fut = self._sleepers.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _wake_all(self) -> None:
        """A replica went out or came back (rare): every sleeper's choice may change."""
        if any(r.in_service for r in self.replicas):
            self._down_told = False
        for queue in (self._sleepers, self._awaiting):
            while queue:
                fut = queue.popleft()
                if not fut.done():
                    fut.set_result(None)
