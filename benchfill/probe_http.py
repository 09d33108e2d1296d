"""The HTTP side of probe calls: one chat completion with ``n`` samples, retried, on a probe's replicas.

One ``openai.AsyncOpenAI`` per endpoint on the SDK's supported aiohttp client
(``DefaultAioHttpClient``); each attempt goes to a replica of the probe's fleet (``benchfill.fleet``:
one endpoint is a fleet of one), holds one slot of that endpoint's bound (``benchfill.limits``) and
tells the fleet how it went; retries follow ``benchfill.retry``. ``benchfill.probes`` builds on this
the rollouts, their cache and their grading.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from benchfill.config import ProbeConfig, key_from_env
from benchfill.fleet import Fleet, Replica, new_tally
from benchfill.limits import endpoint_bound
from benchfill.redact import scrub
from benchfill.retry import (
    AttemptTimeout,
    TruncatedReply,
    call_with_retries,
    is_retryable,
    replied,
    status_of,
)

# What a server says when it will not give several samples per request (vLLM with some samplers,
# some hosted APIs): then ask one sample per request instead.
_REFUSES_N = re.compile(r"(\bn\b|\bn=|\bn >|samples|best_of)", re.IGNORECASE)


# What one replica of a fleet says when it refuses the key (401, 403) or serves another model (404). The
# same request may be served by another replica; if none does, the request itself is at fault.
_REPLICA_REFUSALS = (401, 403, 404)

# The SDK's pool (1,000 connections, 100 kept idle), forgetting an idle connection after 4 s instead of 5.
# uvicorn, and so vLLM and the simulated world, closes a connection idle for 5 s. With the pool keeping it
# as long, a request sent on a connection idle just under 5 s (the loop busy with the run's own work: the
# benchmark's fit, the search's arithmetic) reaches a server that is closing it: it fails and is retried
# after a backoff. After pauses of 3.96 to 5.04 s the SDK's 5 s pool lost 30 of 330 such requests (all
# after pauses of 4.97 to 4.99 s), this one none (bench/bench_keepalive.py).
POOL_KEEPALIVE_S = 4.0


def pool_limits():
    """The probe clients' connection pool (httpx2 is imported here: off the start-up path)."""
    import httpx2

    return httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=POOL_KEEPALIVE_S)


class RefusesN(Exception):
    """The endpoint will not give several samples per request."""


class ReplicaRefused(ConnectionError):
    """A replica of a fleet refused a request another replica may serve: the call is retried there (a
    ConnectionError, which ``benchfill.retry`` retries)."""


class ProbeHttp:
    """The HTTP side of probe calls: one ``openai.AsyncOpenAI`` per endpoint on the SDK's supported
    aiohttp client (``DefaultAioHttpClient``), the probe's replicas chosen by ``benchfill.fleet``,
    retries in ``benchfill.retry``, reply checks."""

    def __init__(self, panel: Any, tally: Callable[[], dict[str, dict[str, int]]] | None = None):
        # panel: a benchfill.probes.ProbePanel (not imported: that module builds on this one)
        self.panel = panel
        counts: dict[str, dict[str, int]] = {}
        # endpoint URL -> its counts (TrafficStats.replicas), looked up at each count
        self.tally = tally if tally is not None else (lambda: counts)
        self.clients: dict[tuple[str, str | None], Any] = {}
        self.bounds: dict[str, Any] = {}  # endpoint -> its benchfill.limits bound in this event loop
        self.fleets: dict[str, Fleet] = {}  # probe name -> its replicas
        # the variables holding the panel's keys: scrubbed from every error an endpoint sends back
        self.key_envs = tuple(sorted({p.api_key_env for p in panel.probes if p.api_key_env}))

    def open(self) -> None:
        """Called inside the event loop that makes the calls (the bounds belong to it)."""
        import openai

        from benchfill import proxies

        proxies.prepare()  # before the first client: loopback direct, a broken SSL_CERT_FILE named

        caps = self.panel.caps()
        self.bounds = {url: endpoint_bound(url, cap) for url, cap in caps.items()}
        replicas: dict[tuple[str, str | None], Replica] = {}
        for p in self.panel.probes:
            mine = []
            for url, _ in p.endpoints:
                key = (url, p.api_key_env)
                if key not in self.clients:
                    # The SDK's aiohttp transport: at 256 requests in flight its pool costs 1.2 ms of CPU
                    # per request against 2.8 ms for the default httpx2 pool, whose bookkeeping grows
                    # with the connections it holds (bench/bench_traffic.py). Its 1,000 connections
                    # exceed any bound.
                    http = openai.DefaultAioHttpClient(limits=pool_limits())
                    self.clients[key] = openai.AsyncOpenAI(
                        base_url=url, api_key=key_from_env(p.api_key_env, sent_to=url) or "EMPTY",
                        max_retries=0, timeout=p.timeout_s, http_client=http)
                    replicas[key] = Replica(url, self.clients[key], self.bounds[url], self.panel.fleets,
                                            self.tally, key_envs=self.key_envs)
                    self.tally().setdefault(url, new_tally())  # listed from the start, served or not
                replicas[key].models.add(p.model)
                mine.append(replicas[key])
            self.fleets[p.name] = Fleet(p.name, mine)

    async def close(self) -> None:
        for fleet in self.fleets.values():
            for r in fleet.replicas:
                r.close()
        for c in self.clients.values():
            await c.close()
        self.clients.clear()

    async def call(self, p: ProbeConfig, body: dict[str, Any],
                   counts: Any) -> tuple[list[str], dict, float, str, list[int]]:
        """One chat completion with retries: (texts, usage, latency of the successful attempt, the
        URL of the replica that served it, the indices of the texts cut at max_tokens).

        ``counts`` gets ``requests`` (attempts) and ``retries`` added as they happen. Each attempt
        goes to a replica of the probe's fleet (a failed one's retry to another where it can). A
        400/422 that says ``n`` is refused raises ``RefusesN``; a call that still fails after its
        retries raises the last error. A 401/403/404 on a replica of a fleet is tried on another
        replica: when one serves it, the replicas that refused it are taken out of service; when all
        refuse, it is the request's own error and raised as such.
        """
        fleet = self.fleets[p.name]
        n = body["n"]
        args = {k: v for k, v in body.items() if k != "sample_index"}
        # Every replica this call failed on: a 429 on the next must not make it forget them (the least-loaded
        # choice then sent the retry back to a dead replica, which always has a free slot, until the
        # call's attempts ran out while a healthy one was up).
        failed_on: set[Replica] = set()
        refused: dict[Replica, str] = {}  # replica -> what it said

        def on_retry(state) -> None:
            counts.retries += 1

        async def attempt() -> tuple[list[str], dict, float, str, list[int]]:
            replica = await fleet.acquire(avoid=failed_on)  # per attempt: a backoff wait holds no slot
            ok: bool | None = None
            detail, answered = "", False
            try:
                counts.requests += 1
                t0 = time.perf_counter()
                # timeout_s bounds the whole attempt: the SDK's is per read, and a server dripping a byte
                # at a time held a call (and the run waiting on it) for as long as it dripped
                # (asyncio.timeout, not wait_for: 3.11's wait_for runs the call as a task of its own and can
                # swallow a cancellation that lands as it finishes, and a stopped run then went on calling)
                try:
                    async with asyncio.timeout(p.timeout_s):
                        texts, usage, cut = await _complete(replica.client, p.model, args, n)
                except TimeoutError:
                    raise AttemptTimeout(f"no whole reply within timeout_s {p.timeout_s:g} s") from None
                latency = time.perf_counter() - t0
                ok = answered = True
                for other, said in refused.items():
                    if other is not replica:
                        other.refused(said)
                return texts, usage, latency, replica.url, cut
            except Exception as exc:
                ok = _health(exc)
                answered = replied(exc)  # an error status is a reply; a timeout is none
                detail = describe_error(exc, self.key_envs)
                if status_of(exc) in _REPLICA_REFUSALS and len(fleet.replicas) > 1:
                    refused[replica] = detail
                    if any(r.in_service and r not in refused for r in fleet.replicas):
                        raise ReplicaRefused(f"{replica.url} refused it: {detail}") from exc
                raise
            finally:
                fleet.release(replica, ok, detail, answered)
                if ok is False or replica in refused:
                    failed_on.add(replica)

        return await call_with_retries(attempt, self.panel.retry, on_retry)


async def _complete(client: Any, model: str, args: dict[str, Any], n: int) -> tuple[list[str], dict, list[int]]:
    """One attempt at a chat completion with ``n`` samples: (texts, usage, the indices of those that stopped
    at max_tokens), or the reason it failed."""
    import openai

    try:
        reply = await client.chat.completions.create(model=model, **args)
    except openai.APIResponseValidationError as exc:  # a 200 whose body is not a completion
        raise TruncatedReply(f"unreadable reply body: {str(exc).splitlines()[0][:120]}") from exc
    except ValueError as exc:  # the body is not JSON at all (cut off on the way)
        raise TruncatedReply(f"unreadable reply body: {exc}") from exc
    except Exception as exc:
        if status_of(exc) in (400, 422) and n > 1 and _REFUSES_N.search(str(exc)):
            raise RefusesN() from exc
        raise
    choices = getattr(reply, "choices", None)
    if not isinstance(choices, list):  # the SDK hands back a non-JSON body as a plain string
        raise TruncatedReply(f"unreadable reply body ({len(str(reply))} characters)")
    if len(choices) != n:
        raise TruncatedReply(f"asked for {n} samples, got {len(choices)}")
    texts = [(c.message.content if c.message is not None else None) or "" for c in choices]
    cut = [i for i, c in enumerate(choices) if getattr(c, "finish_reason", None) == "length"]
    # (warnings off: a server whose usage is not numbers is the server's trouble, counted 0, not three
    # multi-line pydantic notices on stderr)
    usage = reply.usage.model_dump(warnings=False) if reply.usage is not None else {}
    return texts, usage, cut


def _health(exc: BaseException) -> bool | None:
    """What a failed attempt says of its replica's health: False for what a sick server does (5xx,
    timeouts, refused or dropped connections, cut-off replies), None for the request's own fault
    (4xx) and for back-pressure (429), which another replica would not cure."""
    code = status_of(exc)
    if isinstance(exc, RefusesN) or code == 429 or (code is not None and code < 500 and code != 408):
        return None
    return False if is_retryable(exc) else None


def describe_error(exc: BaseException, key_envs: Iterable[str | None] = ()) -> str:
    """A failed call in one line: its HTTP status, or what the SDK's own message leaves out. Scrubbed
    (``benchfill.redact.scrub``): a server's error body may echo the request's headers, so the values of
    ``key_envs`` (the configured keys) and anything shaped like a credential become ``***``."""
    key_envs = tuple(key_envs)
    code = status_of(exc)
    text = scrub(str(exc), env=key_envs)
    msg = text.splitlines()[0][:200] if text else exc.__class__.__name__
    if code:
        return f"HTTP {code}: {msg}"
    cause = exc.__cause__  # the SDK's "Connection error." says nothing of why: say what it wraps
    said = scrub(str(cause), env=key_envs) if cause is not None else ""
    if said and said not in msg:
        msg += f" ({cause.__class__.__name__}: {said.splitlines()[0][:200]})"
    return f"{exc.__class__.__name__}: {msg}"
