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
import importlib.util
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from benchfill.cache import CallCache, make_call, request_key
from benchfill.config import Config, ProbeConfig, RetryConfig, key_from_env
from benchfill.errors import EndpointError
from benchfill.matrix import ResponseMatrix
from benchfill.retry import TruncatedReply, async_retrying, status_of
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


class RolloutClient:
    """Async client for a probe panel: ``async with RolloutClient(...) as rc: await rc.rollouts(items)``."""

    def __init__(self, store: Store, panel: ProbePanel, spec, evaluator=None,
                 prompt_fn: Callable[[dict, Any], str] | None = None, record: bool = True,
                 transport: str = "aiohttp"):
        self.transport = transport  # "aiohttp" (about 25% less CPU per request) or "httpx" (the SDK default)
        self.store = store
        self.panel = panel
        self.spec = spec
        self.evaluator = evaluator
        self.prompt_fn = prompt_fn
        self.record = record
        self.cache = CallCache(store)
        self.stats = TrafficStats()
        self._clients: dict[tuple[str, str | None], Any] = {}
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._single: set[str] = {p.base_url for p in panel.probes if not p.supports_n}
        self._grades: dict[tuple[str, str], bool] = {}

    async def __aenter__(self) -> RolloutClient:
        import openai
        from openai import _base_client

        # openai >= 3 runs on httpx2, older releases on httpx: build the pool with the one it uses.
        hx = getattr(_base_client, "httpx2", None) or _base_client.httpx
        self._raw = hx.Response

        caps: dict[str, int] = {}
        for p in self.panel.probes:
            caps[p.base_url] = max(caps.get(p.base_url, 0), p.concurrency)
        for p in self.panel.probes:
            key = (p.base_url, p.api_key_env)
            if key not in self._clients:
                cap = caps[p.base_url]
                # One pooled client per endpoint, with room for every request the semaphore lets through.
                pool = hx.Limits(max_connections=cap, max_keepalive_connections=cap)
                aio = self.transport == "aiohttp" and importlib.util.find_spec("aiohttp") is not None
                factory = openai.DefaultAioHttpClient if aio else openai.DefaultAsyncHttpxClient
                http = factory(limits=pool)
                self._clients[key] = openai.AsyncOpenAI(
                    base_url=p.base_url, api_key=key_from_env(p.api_key_env) or "EMPTY",
                    max_retries=0, timeout=p.timeout_s, http_client=http,
                )
        self._limits = {url: asyncio.Semaphore(cap) for url, cap in caps.items()}
        return self

    async def __aexit__(self, *exc) -> None:
        self.cache.flush()
        for c in self._clients.values():
            await c.close()
        self._clients.clear()

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
        plan = []
        for item in items:
            messages = [{"role": "user", "content": self._prompt(item)}]
            for p in chosen:
                n = trials or p.trials
                req = self._request(p, messages, n, seed)
                plan.append((item, p, req, request_key("probe", p.base_url, p.model, req)))
        cached = self.cache.get_many(k for *_, k in plan)
        results = await asyncio.gather(*(self._one(item, p, req, key, cached.get(key)) for item, p, req, key in plan))
        self.cache.flush()
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

    async def _one(self, item: dict, p: ProbeConfig, req: dict, key: str, hit) -> Rollout:
        try:
            if hit is not None:
                self.stats.cache_hits += 1
                texts, cached = json.loads(hit)["texts"], True
            elif req["n"] > 1 and p.base_url in self._single:
                texts, cached = await self._singles(p, req), False
            else:
                try:
                    texts, cached = await self._call(p, req, key), False
                except _RefusesN:
                    self._single.add(p.base_url)
                    log.info("endpoint %s refuses n>1; asking one sample per request", p.base_url)
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
                return json.loads(hits[key])["texts"]
            return await self._call(p, sub, key)

        parts = await asyncio.gather(*(get(s, k) for s, k in subs))
        return [t for part in parts for t in part]

    async def _call(self, p: ProbeConfig, req: dict, key: str) -> list[str]:
        client = self._clients[(p.base_url, p.api_key_env)]
        body = {k: v for k, v in req.items() if k != "sample_index"}

        def on_retry(state) -> None:
            self.stats.retries += 1

        async with self._limits[p.base_url]:
            async for attempt in async_retrying(self.panel.retry, on_retry):
                with attempt:
                    self.stats.requests += 1
                    t0 = time.perf_counter()
                    try:
                        # The SDK's generic post (auth, base URL, error mapping) with a raw response: the typed
                        # create() spends ~1 ms per call transforming params and building pydantic objects.
                        raw = await client.post("/chat/completions", body={"model": p.model, **body},
                                                cast_to=self._raw)
                    except Exception as exc:
                        if status_of(exc) in (400, 422) and body["n"] > 1 and _REFUSES_N.search(str(exc)):
                            raise _RefusesN() from exc
                        raise
                    texts, data = _parse(raw.content, body["n"])
                    latency = time.perf_counter() - t0
        usage = data.get("usage") or {}
        self.stats.calls += 1
        self.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.stats.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.stats.latency_s += latency
        self.cache.add(make_call("probe", key, p.base_url, p.model, req, {"texts": texts, "usage": usage},
                                 int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                                 latency))
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
        ids = list({r.item_id for r in done})
        with self.store.session() as s:
            have = set()
            for i in range(0, len(ids), 500):  # only these items' rows: the search calls this per item
                q = select(ProbeResult).where(ProbeResult.phase == phase, ProbeResult.item_id.in_(ids[i : i + 500]))
                have |= {(row.item_id, row.probe, row.call_key) for row in s.exec(q)}
            rows = [{"item_id": r.item_id, "probe": r.probe, "correct": r.correct, "trials": r.trials,
                     "phase": phase, "call_key": r.call_key, "created_at": now()}
                    for r in done if (r.item_id, r.probe, r.call_key) not in have]
            if rows:
                s.execute(insert(ProbeResult), rows)


class _RefusesN(Exception):
    pass


def _parse(content: bytes, n: int) -> tuple[list[str], dict]:
    try:
        data = json.loads(content)
        texts = [(c.get("message") or {}).get("content") or "" for c in data["choices"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TruncatedReply(f"unreadable reply body ({len(content)} bytes)") from exc
    if len(texts) != n:
        raise TruncatedReply(f"asked for {n} samples, got {len(texts)}")
    return texts, data


def _is_call_error(exc: BaseException) -> bool:
    """Errors that belong to one call (HTTP, transport, timeouts), not bugs in our code."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"APIError", "HTTPError", "TransportError", "TimeoutError", "OSError", "TimeoutException"}) \
        or isinstance(exc, (asyncio.TimeoutError, TruncatedReply))


def _describe(exc: BaseException) -> str:
    code = status_of(exc)
    msg = str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__
    return f"HTTP {code}: {msg}" if code else f"{exc.__class__.__name__}: {msg}"


def collect_responses(store: Store, panel: ProbePanel, items: Sequence[dict], spec, *, trials: int | None = None,
                      seed: int = 0, evaluator=None, phase: str = "benchmark",
                      prompt_fn: Callable[[dict, Any], str] | None = None,
                      stats: TrafficStats | None = None) -> ResponseMatrix:
    """All items x all probes, graded, as a response matrix (sync wrapper around ``RolloutClient``).

    Pass a ``TrafficStats`` as ``stats`` to get the traffic counts of this collection back.
    """

    async def go() -> tuple[list[Rollout], TrafficStats]:
        async with RolloutClient(store, panel, spec, evaluator, prompt_fn=prompt_fn) as rc:
            res = await rc.rollouts(items, trials=trials, seed=seed, phase=phase)
            return res, rc.stats

    results, used = asyncio.run(go())
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
