"""Probe rollouts through the openai SDK (async) against OpenAI-compatible endpoints.

One request per (item, probe) asks for ``n`` samples with a seed, through the SDK's typed
``chat.completions.create`` on its aiohttp transport, all in one event loop. Requests in flight are
bounded per endpoint (``benchfill.limits``), transient failures are retried in ``benchfill.retry``,
replies are graded off the loop where that is slow (``benchfill.grading``), and every completed call
is kept in the store's ``ModelCall`` cache under a hash of the request, so that a rerun grades the
cached replies again without calling. Where an endpoint refuses ``n > 1``, the samples are asked
one by one with distinct derived seeds, so they stay distinct.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from benchfill.cache import CallCache, make_call, request_json, request_key
from benchfill.config import Config, ProbeConfig, RetryConfig, key_from_env
from benchfill.errors import EndpointError
from benchfill.grading import Grading
from benchfill.limits import endpoint_bound
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_seed(seed: int, index: int) -> int:
    """A per-sample seed for endpoints that refuse ``n > 1``: distinct for each sample index."""
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "big") & 0x7FFFFFFF


class ProbeHttp:
    """The HTTP side of probe calls: one ``openai.AsyncOpenAI`` per endpoint on the SDK's supported
    aiohttp client (``DefaultAioHttpClient``), retries in ``benchfill.retry``, reply checks."""

    def __init__(self, panel: ProbePanel):
        self.panel = panel
        self.clients: dict[tuple[str, str | None], Any] = {}
        self.bounds: dict[str, Any] = {}  # endpoint -> its benchfill.limits bound in this event loop

    def open(self) -> None:
        """Called inside the event loop that makes the calls (the bounds belong to it)."""
        import openai

        caps = self.panel.caps()
        self.bounds = {url: endpoint_bound(url, cap) for url, cap in caps.items()}
        for p in self.panel.probes:
            key = (p.base_url, p.api_key_env)
            if key in self.clients:
                continue
            # The SDK's aiohttp transport: at 256 requests in flight its pool costs 1.2 ms of CPU per
            # request against 2.8 ms for the default httpx2 pool, whose bookkeeping grows with the
            # connections it holds (bench/bench_traffic.py). Its 1,000 connections exceed any bound.
            http = openai.DefaultAioHttpClient()
            self.clients[key] = openai.AsyncOpenAI(
                base_url=p.base_url, api_key=key_from_env(p.api_key_env) or "EMPTY",
                max_retries=0, timeout=p.timeout_s, http_client=http)

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
        import openai

        client = self.clients[(p.base_url, p.api_key_env)]
        bound = self.bounds[p.base_url]
        n = body["n"]
        args = {k: v for k, v in body.items() if k != "sample_index"}

        def on_retry(state) -> None:
            counts.retries += 1

        async def attempt() -> tuple[list[str], dict, float]:
            try:
                async with bound:  # per attempt: a backoff wait holds no slot
                    counts.requests += 1
                    t0 = time.perf_counter()
                    reply = await client.chat.completions.create(model=p.model, **args)
                    latency = time.perf_counter() - t0
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
            usage = reply.usage.model_dump() if reply.usage is not None else {}
            return texts, usage, latency

        return await call_with_retries(attempt, self.panel.retry, on_retry)


_PLAN_CHUNK = 512  # calls planned (prompts, keys, cache look-up) before the first of them are sent


class RolloutClient:
    """Async client for a probe panel: ``async with RolloutClient(...) as rc: await rc.rollouts(items)``.

    Every call goes through the openai SDK in this event loop, each endpoint's requests in flight
    held to its bound (``benchfill.limits``); replies are graded off the loop where grading is slow
    (``benchfill.grading``). Caching, grading and the store stay in this process.
    """

    def __init__(self, store: Store, panel: ProbePanel, spec, evaluator=None,
                 prompt_fn: Callable[[dict, Any], str] | None = None, record: bool = True,
                 grade_workers: int | None = None):
        self.store = store
        self.panel = panel
        self.spec = spec
        self.prompt_fn = prompt_fn
        self.record = record
        # Flushed every 1,024 calls or every second, whichever comes first.
        self.cache = CallCache(store, flush_every=1024)
        self.stats = TrafficStats()
        self.http = ProbeHttp(panel)
        self.grading = Grading(evaluator, spec, workers=grade_workers)
        self._single: set[str] = {p.base_url for p in panel.probes if not p.supports_n}
        self._bodies: dict[str, str] = {}  # key -> the request's canonical JSON, made once per call

    @property
    def evaluator(self):
        return self.grading.grader()

    async def __aenter__(self) -> RolloutClient:
        self.http.open()
        return self

    async def __aexit__(self, *exc) -> None:
        self.cache.flush()
        self.grading.close()
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
        tasks: list[asyncio.Future] = []
        step = max(1, _PLAN_CHUNK // max(len(chosen), 1))
        try:
            # Planned a chunk at a time, and each chunk's calls sent at once: the first requests are
            # on their way while the rest of a large batch is still being planned.
            for start in range(0, len(items), step):
                part = self._plan(items[start : start + step], chosen, trials, seed)
                hits = self.cache.get_many(k for *_, k in part)
                for key in hits:
                    self._bodies.pop(key, None)
                tasks += [asyncio.ensure_future(self._one(item, p, req, key, hits.get(key)))
                          for item, p, req, key in part]
                await asyncio.sleep(0)  # let this chunk's requests go out
            results = await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
        self.cache.flush()
        self._bodies.clear()  # those of calls that failed or went one sample at a time
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

    async def _one(self, item: dict, p: ProbeConfig, req: dict, key: str, hit) -> Rollout:
        """One (item, probe): from the cache or a new call, then graded."""
        try:
            if hit is not None:
                self.stats.cache_hits += 1
                texts, cached = json.loads(hit)["texts"], True
            elif req["n"] > 1 and p.base_url in self._single:
                texts, cached = await self._singles(p, req), False
            else:
                try:
                    texts, cached = await self._call(p, req, key), False
                except RefusesN:
                    if p.base_url not in self._single:
                        self._single.add(p.base_url)
                        log.info("endpoint %s refuses n>1; asking one sample per request", p.base_url)
                    texts, cached = await self._singles(p, req), False
        except Exception as exc:  # noqa: BLE001  (reported per call; the batch goes on)
            if not _is_call_error(exc):
                raise
            self.stats.failures += 1
            return Rollout(item["id"], p.name, 0, 0, key, error=f"probe {p.name} at {p.base_url}: {_describe(exc)}")
        correct = await self.grading.count_correct(item, texts)
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
                return json.loads(hits[key])["texts"]
            return await self._call(p, sub, key)

        parts = await asyncio.gather(*(get(s, k) for s, k in subs))
        return [t for part in parts for t in part]

    async def _call(self, p: ProbeConfig, req: dict, key: str) -> list[str]:
        texts, usage, latency = await self.http.call(p, req, self.stats)
        self.stats.calls += 1
        self.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.stats.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.stats.latency_s += latency
        self.cache.add(make_call("probe", key, p.base_url, p.model, req, {"texts": texts, "usage": usage},
                                 int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                                 latency, body_json=self._bodies.pop(key, None)))
        return texts

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
                    ProbeResult.run_id == self.store.run_id, ProbeResult.phase == phase,
                    ProbeResult.item_id.in_(ids[i : i + 500]))
                have |= {tuple(row) for row in s.exec(q)}
            rows = [{"run_id": self.store.run_id, "item_id": r.item_id, "probe": r.probe, "correct": r.correct, "trials": r.trials,
                     "phase": phase, "call_key": r.call_key, "created_at": now()}
                    for r in done if (r.item_id, r.probe, r.call_key) not in have]
            if rows:
                s.execute(insert(ProbeResult.__table__), rows)  # the table: a plain executemany


class RefusesN(Exception):
    """The endpoint will not give several samples per request."""


def _is_call_error(exc: BaseException) -> bool:
    """Errors that belong to one call (HTTP, transport, timeouts), not bugs in our code."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"APIError", "HTTPError", "TransportError", "TimeoutError", "OSError", "TimeoutException"}) \
        or isinstance(exc, (asyncio.TimeoutError, TruncatedReply))


def _describe(exc: BaseException) -> str:
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
    keywords (``grade_workers``, ``record``) go to ``RolloutClient``.
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
