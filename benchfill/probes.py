"""Probe rollouts through the openai SDK (async) against OpenAI-compatible endpoints.

One request per (item, probe) asks for ``n`` samples with a seed. Requests in flight are bounded
per endpoint, transient failures are retried in ``benchfill.retry``, and every completed call is
kept in the store's ``ModelCall`` cache under a hash of the request, so that a rerun grades the
cached replies again without calling. Where an endpoint refuses ``n > 1``, the samples are asked
one by one with distinct derived seeds, so they stay distinct.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import orjson

from benchfill.cache import CallCache, make_call, request_json, request_key
from benchfill.config import Config, ProbeConfig, RetryConfig, key_from_env
from benchfill.errors import EndpointError
from benchfill.matrix import ResponseMatrix
from benchfill.retry import TruncatedReply, call_with_retries, status_of
from benchfill.store import Store

log = logging.getLogger("benchfill.probes")

# What a server says when it will not give several samples per request (vLLM with some samplers,
# some hosted APIs): then ask one sample per request instead.
_REFUSES_N = re.compile(r"(\bn\b|\bn=|\bn >|samples|best_of)", re.IGNORECASE)


@dataclass
class ProbePanel:
    probes: list[ProbeConfig]
    retry: RetryConfig = field(default_factory=RetryConfig)

    @classmethod
    def from_config(cls, cfg: Config | Sequence[ProbeConfig]) -> ProbePanel:
        if isinstance(cfg, Config):
            return cls(list(cfg.probes), cfg.retry)
        return cls(list(cfg))

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.probes]

    def caps(self) -> dict[str, int]:
        """Each endpoint's bound on requests in flight: the largest ``concurrency`` of its probes."""
        caps: dict[str, int] = {}
        for p in self.probes:
            caps[p.base_url] = max(caps.get(p.base_url, 0), p.concurrency)
        return caps

    def get(self, name: str) -> ProbeConfig:
        for p in self.probes:
            if p.name == name:
                return p
        raise EndpointError(f"no probe named {name!r} in the panel ({', '.join(self.names)})")


@dataclass
class Rollout:
    """Graded samples of one probe on one item."""

    item_id: str
    probe: str
    correct: int
    trials: int
    call_key: str
    cached: bool = False
    error: str | None = None


@dataclass
class TrafficStats:
    requests: int = 0  # HTTP attempts sent, retries included
    calls: int = 0  # calls completed by the server in this session
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0  # summed over completed calls
    worker_cpu_s: float = 0.0  # CPU time spent in probe worker processes (see benchfill.probe_pool)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_seed(seed: int, index: int) -> int:
    """A per-sample seed for endpoints that refuse ``n > 1``: distinct for each sample index."""
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "big") & 0x7FFFFFFF


class ProbeHttp:
    """The HTTP side of probe calls: one openai client per endpoint, retries, reply checks.

    Used in-process by ``RolloutClient`` and, for large batches, inside each probe worker process
    (``benchfill.probe_pool``), so both run exactly the same request and retry code.
    """

    def __init__(self, panel: ProbePanel, transport: str = "lean"):
        self.panel = panel
        # "lean": benchfill.http.LeanHttpClient (least CPU per request); "aiohttp": the SDK's
        # DefaultAioHttpClient; "httpx": the SDK's default transport.
        self.transport = transport
        self.clients: dict[tuple[str, str | None], Any] = {}
        self.urls: dict[str, str] = {}  # endpoint -> its chat completions URL
        self._options: dict[str, Any] = {}
        import httpx2  # the HTTP library of the openai SDK (>= 3): its Response is the raw reply

        self._raw = httpx2.Response

    def open(self) -> None:
        import openai

        from benchfill.http import LeanHttpClient

        caps = self.panel.caps()
        # the two X-Stainless-* headers the SDK adds per request, unless a request's options omit them
        self._options = {"headers": {"X-Stainless-Retry-Count": openai.Omit(), "X-Stainless-Read-Timeout": openai.Omit()}}
        for p in self.panel.probes:
            key = (p.base_url, p.api_key_env)
            if key in self.clients:
                continue
            cap = caps[p.base_url]  # the pool has room for every request the semaphore lets through
            if self.transport == "lean":
                http = LeanHttpClient(max_connections=cap)
            else:
                import httpx2

                pool = httpx2.Limits(max_connections=cap, max_keepalive_connections=cap)
                factory = openai.DefaultAioHttpClient if self.transport == "aiohttp" else openai.DefaultAsyncHttpxClient
                http = factory(limits=pool)
            client = openai.AsyncOpenAI(
                base_url=p.base_url, api_key=key_from_env(p.api_key_env) or "EMPTY",
                max_retries=0, timeout=p.timeout_s, http_client=http,
            )
            # The SDK's X-Stainless-* headers (OS, architecture, runtime, retry count, read timeout)
            # say nothing a model server uses; httpx2 normalises each header on every request, and
            # dropping them cuts the SDK's own CPU per call by about a fifth.
            self.clients[key] = client.with_options(default_headers={
                h: openai.Omit() for h in client.default_headers if h.lower().startswith("x-stainless-")})
            # The absolute URL, joined as the SDK joins a path: given a path, it parses and joins
            # it again on every request (~25 us, a tenth of its own work per call).
            self.urls[p.base_url] = f"{client.base_url}chat/completions"

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()
        self.clients.clear()

    async def call(self, p: ProbeConfig, body: dict[str, Any], counts: Any) -> tuple[list[str], dict, float]:
        """One chat completion with retries: (texts, usage, latency of the successful attempt).

        ``counts`` gets ``requests`` (attempts) and ``retries`` added as they happen. A 400/422 that
        says ``n`` is refused raises ``RefusesN``; a call that still fails after its retries raises
        the last error.
        """
        client = self.clients[(p.base_url, p.api_key_env)]
        url = self.urls[p.base_url]
        payload = {"model": p.model, **{k: v for k, v in body.items() if k != "sample_index"}}
        # Encoded here, once for every attempt, and handed to the SDK as bytes (which it sends as is):
        # the same compact UTF-8 JSON its own encoder makes, at a tenth of the CPU.
        encoded = orjson.dumps(payload)

        def on_retry(state) -> None:
            counts.retries += 1

        async def attempt() -> tuple[list[str], dict, float]:
            counts.requests += 1
            t0 = time.perf_counter()
            try:
                # The SDK's generic post (auth, base URL, error mapping) with a raw response: the typed
                # create() spends ~1 ms per call transforming params and building pydantic objects.
                raw = await client.post(url, content=encoded, cast_to=self._raw, options=self._options)
            except Exception as exc:
                if status_of(exc) in (400, 422) and payload["n"] > 1 and _REFUSES_N.search(str(exc)):
                    raise RefusesN() from exc
                raise
            texts, data = _parse(raw.content, payload["n"])
            return texts, data.get("usage") or {}, time.perf_counter() - t0

        return await call_with_retries(attempt, self.panel.retry, on_retry)


def default_workers() -> int:
    """Probe worker processes for large batches: ``BENCHFILL_PROBE_WORKERS`` or, by default, one per
    CPU (at most 4) where there are at least two; 0 keeps every call in this process."""
    env = os.environ.get("BENCHFILL_PROBE_WORKERS", "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            raise EndpointError(f"BENCHFILL_PROBE_WORKERS must be an integer, got {env!r}") from None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cpus, 4) if cpus >= 2 else 0


_PLAN_CHUNK = 512  # calls planned (prompts, keys, cache look-up) before the first of them are sent

# A pool of worker processes costs about a second to start (each imports the openai SDK); below
# this many calls to make in one batch, one process is as fast.
POOL_MIN_CALLS = 1500


class RolloutClient:
    """Async client for a probe panel: ``async with RolloutClient(...) as rc: await rc.rollouts(items)``.

    Calls are made in this process, or, for a batch of at least ``pool_min_calls`` calls not in the
    cache, spread over ``workers`` worker processes (``benchfill.probe_pool``): one event loop
    saturates one CPU at about 1,500 requests per second (SDK and HTTP take ~0.6 ms of CPU per
    request). Caching, grading and the store stay here, whatever runs the calls.
    """

    def __init__(self, store: Store, panel: ProbePanel, spec, evaluator=None,
                 prompt_fn: Callable[[dict, Any], str] | None = None, record: bool = True,
                 transport: str = "lean", workers: int | None = None, pool_min_calls: int = POOL_MIN_CALLS):
        self.store = store
        self.panel = panel
        self.spec = spec
        self.evaluator = evaluator
        self.prompt_fn = prompt_fn
        self.record = record
        # Flushed every 1,024 calls or every second, whichever comes first: a commit per 256 rows
        # was a tenth of this process's work at a thousand calls a second.
        self.cache = CallCache(store, flush_every=1024)
        self.stats = TrafficStats()
        self.http = ProbeHttp(panel, transport)
        self.workers = default_workers() if workers is None else workers
        self.pool = None  # benchfill.probe_pool.ProbePool, started for the first large batch
        self.pool_min_calls = pool_min_calls
        self._pool_cpu_seen = 0.0
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._single: set[str] = {p.base_url for p in panel.probes if not p.supports_n}
        self._grades: dict[tuple[str, str], bool] = {}
        self._bodies: dict[str, str] = {}  # key -> the request's canonical JSON, made once per call

    async def __aenter__(self) -> RolloutClient:
        self.http.open()
        self._limits = {url: asyncio.Semaphore(cap) for url, cap in self.panel.caps().items()}
        return self

    async def __aexit__(self, *exc) -> None:
        self.cache.flush()
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        await self.http.close()

    # -- public ---------------------------------------------------------------------------------
    async def rollouts(self, items: Sequence[dict], trials: int | None = None, seed: int = 0,
                       probes: Sequence[str] | None = None, phase: str = "annotate",
                       strict: bool = True) -> list[Rollout]:
        """Sample and grade every (item, probe); ``trials`` overrides each probe's own count.

        With ``strict``, a call that still fails after its retries raises ``EndpointError`` once the
        others have finished (their results are cached, so a rerun resumes); otherwise it comes back
        as a ``Rollout`` with ``error`` set and ``trials == 0``.
        """
        chosen = [self.panel.get(n) for n in probes] if probes else list(self.panel.probes)
        plan: list[tuple] = []
        cached: dict[str, str] = {}
        sent: list[asyncio.Future | None] = []
        tasks: list[asyncio.Future] = []
        pooled: bool | None = None
        step = max(1, _PLAN_CHUNK // max(len(chosen), 1))
        try:
            # Planned a chunk at a time, and each chunk's calls sent at once: the first requests are
            # on their way after ~30 ms instead of after the whole batch is planned (0.6 s for 10k).
            for start in range(0, len(items), step):
                part = self._plan(items[start : start + step], chosen, trials, seed)
                hits = self.cache.get_many(k for *_, k in part)
                for key in hits:
                    self._bodies.pop(key, None)
                if pooled is None:  # decided on the first chunk, for the whole batch
                    todo = (len(part) - len(hits)) / len(part) * len(items) * len(chosen)
                    if self.workers > 0 and self.pool is None and todo >= max(self.pool_min_calls, 1):
                        from benchfill.probe_pool import ProbePool

                        self.pool = await ProbePool.start(self.panel, self.workers, self.http.transport)
                    pooled = self.pool is not None
                if pooled:
                    sent += [None if key in hits or (req["n"] > 1 and p.base_url in self._single)
                             else self.pool.submit(p, req) for _, p, req, key in part]
                else:
                    tasks += [asyncio.ensure_future(self._one(item, p, req, key, hits.get(key)))
                              for item, p, req, key in part]
                plan += part
                cached.update(hits)
                await asyncio.sleep(0)  # let this chunk's requests go out
            results = await (self._pooled(plan, cached, sent) if pooled else asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
        self.cache.flush()
        self._bodies.clear()  # those of calls that failed or went one sample at a time
        if self.pool is not None:
            self.stats.worker_cpu_s += self.pool.cpu_s - self._pool_cpu_seen
            self._pool_cpu_seen = self.pool.cpu_s
        if self.record:
            self._record(results, phase)
        failed = [r for r in results if r.error]
        if failed and strict:
            raise EndpointError(f"{len(failed)} of {len(results)} probe calls failed after retries "
                                f"(completed calls are cached; rerun to resume); first: {failed[0].error}")
        return results

    # -- internals ------------------------------------------------------------------------------
    def _prompt(self, item: dict) -> str:
        if self.prompt_fn is None:
            from benchfill.prompts import format_solver_prompt

            self.prompt_fn = format_solver_prompt
        return self.prompt_fn(item, self.spec)

    @staticmethod
    def _request(p: ProbeConfig, messages: list[dict], n: int, seed: int) -> dict[str, Any]:
        return {"messages": messages, "temperature": p.temperature, "top_p": p.top_p,
                "max_tokens": p.max_tokens, "n": n, "seed": seed}

    def _plan(self, items: Sequence[dict], chosen: list[ProbeConfig], trials: int | None, seed: int) -> list[tuple]:
        plan = []
        for item in items:
            messages = [{"role": "user", "content": self._prompt(item)}]
            shared = {"messages": request_json(messages)}  # the prompt, encoded once for all probes
            for p in chosen:
                req = self._request(p, messages, trials or p.trials, seed)
                body = request_json(req, shared)
                key = request_key("probe", p.base_url, p.model, req, body)
                plan.append((item, p, req, key))
                self._bodies[key] = body
        return plan

    async def _pooled(self, plan: list, cached: dict[str, str], sent: list) -> list[Rollout]:
        # Every call went to the workers as soon as it was planned (they keep the bounds on requests
        # in flight); replies are taken in order as they come: no task per call here, which at a
        # thousand calls a second is a fifth of this process's work.
        results: list[Rollout | None] = [None] * len(plan)
        for i, ((item, p, req, key), fut) in enumerate(zip(plan, sent, strict=True)):
            if fut is not None or key in cached:
                results[i] = await self._one(item, p, req, key, cached.get(key), fut)
        # what is left: endpoints that refuse n > 1, asked one sample per request, concurrently
        rest = [i for i, r in enumerate(results) if r is None]
        for i, r in zip(rest, await asyncio.gather(*(self._one(*plan[i], None) for i in rest)), strict=True):
            results[i] = r
        return results

    async def _one(self, item: dict, p: ProbeConfig, req: dict, key: str, hit,
                   sent: asyncio.Future | None = None) -> Rollout | None:
        """One (item, probe): from the cache, the reply of an already ``sent`` pool call, or a new call.

        ``None`` only for a ``sent`` call the endpoint refused for its ``n``: ask again without ``sent``.
        """
        try:
            if hit is not None:
                self.stats.cache_hits += 1
                texts, cached = orjson.loads(hit)["texts"], True
            elif req["n"] > 1 and p.base_url in self._single:
                texts, cached = await self._singles(p, req), False
            else:
                try:
                    texts, cached = await self._call(p, req, key, sent), False
                except RefusesN:
                    if p.base_url not in self._single:
                        self._single.add(p.base_url)
                        log.info("endpoint %s refuses n>1; asking one sample per request", p.base_url)
                    if sent is not None:
                        return None
                    texts, cached = await self._singles(p, req), False
        except Exception as exc:  # noqa: BLE001  (reported per call; the batch goes on)
            if not _is_call_error(exc):
                raise
            self.stats.failures += 1
            return Rollout(item["id"], p.name, 0, 0, key, error=f"probe {p.name} at {p.base_url}: {_describe(exc)}")
        correct = sum(self._grade(item, t) for t in texts)
        return Rollout(item["id"], p.name, correct, len(texts), key, cached=cached)

    async def _singles(self, p: ProbeConfig, req: dict) -> list[str]:
        subs = []
        for k in range(req["n"]):
            sub = {**req, "n": 1, "seed": sample_seed(req["seed"], k), "sample_index": k}
            subs.append((sub, request_key("probe", p.base_url, p.model, sub)))
        hits = self.cache.get_many(k for _, k in subs)
        self.stats.cache_hits += len(hits)

        async def get(sub: dict, key: str) -> list[str]:
            if key in hits:
                return orjson.loads(hits[key])["texts"]
            return await self._call(p, sub, key)

        parts = await asyncio.gather(*(get(s, k) for s, k in subs))
        return [t for part in parts for t in part]

    async def _call(self, p: ProbeConfig, req: dict, key: str, sent: asyncio.Future | None = None) -> list[str]:
        if sent is not None:
            texts, usage, latency = self.pool.unpack(await sent, self.stats)
        elif self.pool is not None:  # the workers keep each endpoint's bound on requests in flight
            texts, usage, latency = await self.pool.call(p, req, self.stats)
        else:
            async with self._limits[p.base_url]:
                texts, usage, latency = await self.http.call(p, req, self.stats)
        self.stats.calls += 1
        self.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.stats.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.stats.latency_s += latency
        self.cache.add(make_call("probe", key, p.base_url, p.model, req, {"texts": texts, "usage": usage},
                                 int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                                 latency, body_json=self._bodies.pop(key, None)))
        return texts

    def _grade(self, item: dict, text: str) -> bool:
        # The same reply to the same item grades the same; many samples repeat, so grade each once.
        key = (item["id"], text)
        if key not in self._grades:
            if self.evaluator is None:
                from evaluators import get_evaluator

                self.evaluator = get_evaluator(self.spec.evaluator)
            g = self.evaluator.grade(text, item, self.spec)
            self._grades[key] = bool(getattr(g, "correct", g))
        return self._grades[key]

    def _record(self, results: list[Rollout], phase: str) -> None:
        from sqlalchemy import insert
        from sqlmodel import select

        from benchfill.schema import ProbeResult, now

        done = [r for r in results if not r.error]
        # Only a rollout served from the cache can have been recorded before (a call is cached
        # before its rollout is recorded), so only those items need looking up.
        ids = list({r.item_id for r in done if r.cached})
        with self.store.session() as s:
            have = set()
            for i in range(0, len(ids), 500):  # only these items' rows: the search calls this per item
                q = select(ProbeResult.item_id, ProbeResult.probe, ProbeResult.call_key).where(  # columns, not objects
                    ProbeResult.phase == phase, ProbeResult.item_id.in_(ids[i : i + 500]))
                have |= {tuple(row) for row in s.exec(q)}
            rows = [{"item_id": r.item_id, "probe": r.probe, "correct": r.correct, "trials": r.trials,
                     "phase": phase, "call_key": r.call_key, "created_at": now()}
                    for r in done if (r.item_id, r.probe, r.call_key) not in have]
            if rows:
                s.execute(insert(ProbeResult.__table__), rows)  # the table: a plain executemany


class RefusesN(Exception):
    """The endpoint will not give several samples per request."""


class RemoteCallError(Exception):
    """A probe call that failed in a worker process (the message describes the original error)."""


def _parse(content: bytes, n: int) -> tuple[list[str], dict]:
    try:
        data = orjson.loads(content)
        texts = [(c.get("message") or {}).get("content") or "" for c in data["choices"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise TruncatedReply(f"unreadable reply body ({len(content)} bytes)") from exc
    if len(texts) != n:
        raise TruncatedReply(f"asked for {n} samples, got {len(texts)}")
    return texts, data


def _is_call_error(exc: BaseException) -> bool:
    """Errors that belong to one call (HTTP, transport, timeouts), not bugs in our code."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"APIError", "HTTPError", "TransportError", "TimeoutError", "OSError", "TimeoutException"}) \
        or isinstance(exc, (asyncio.TimeoutError, TruncatedReply, RemoteCallError))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, RemoteCallError):
        return str(exc)
    code = status_of(exc)
    msg = str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__
    if code:
        return f"HTTP {code}: {msg}"
    cause = exc.__cause__  # the SDK's "Connection error." says nothing of why: say what it wraps
    if cause is not None and str(cause) and str(cause) not in msg:
        msg += f" ({cause.__class__.__name__}: {str(cause).splitlines()[0][:200]})"
    return f"{exc.__class__.__name__}: {msg}"


def collect_responses(store: Store, panel: ProbePanel, items: Sequence[dict], spec, *, trials: int | None = None,
                      seed: int = 0, evaluator=None, phase: str = "benchmark",
                      prompt_fn: Callable[[dict, Any], str] | None = None,
                      stats: TrafficStats | None = None, **client: Any) -> ResponseMatrix:
    """All items x all probes, graded, as a response matrix (sync wrapper around ``RolloutClient``).

    Pass a ``TrafficStats`` as ``stats`` to get the traffic counts of this collection back; other
    keywords (``workers``, ``pool_min_calls``, ``transport``) go to ``RolloutClient``.
    """

    async def go() -> tuple[list[Rollout], TrafficStats]:
        async with RolloutClient(store, panel, spec, evaluator, prompt_fn=prompt_fn, **client) as rc:
            res = await rc.rollouts(items, trials=trials, seed=seed, phase=phase)
            return res, rc.stats

    from benchfill import netguard

    results, used = netguard.run(go())
    if stats is not None:
        for k, v in used.as_dict().items():
            setattr(stats, k, getattr(stats, k) + v)
    models, ids = panel.names, [it["id"] for it in items]
    mi, ii = {m: j for j, m in enumerate(models)}, {x: i for i, x in enumerate(ids)}
    correct = np.zeros((len(models), len(ids)), dtype=np.int64)
    tried = np.zeros_like(correct)
    for r in results:
        correct[mi[r.probe], ii[r.item_id]] += r.correct
        tried[mi[r.probe], ii[r.item_id]] += r.trials
    chance = np.array([spec.chance_of(it) for it in items], dtype=float)
    return ResponseMatrix(tuple(models), tuple(ids), correct, tried, chance, source="probe rollouts")
