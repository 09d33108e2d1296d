"""Probe rollouts through the openai SDK (async) against OpenAI-compatible endpoints.

One request per (item, probe) asks for ``n`` samples with a seed, through the SDK's typed
``chat.completions.create`` on its aiohttp transport, all in one event loop. Requests in flight are
bounded per endpoint (``benchfill.limits``), spread over a probe's replicas where it has several
(``benchfill.fleet``), transient failures are retried in ``benchfill.retry`` (the HTTP side:
``benchfill.probe_http``),
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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from benchfill.cache import CallCache, make_call, request_json, request_key, token_count
from benchfill.config import Config, FleetPolicy, ProbeConfig, RetryConfig
from benchfill.errors import ConfigError, EndpointError, PromptRefused
from benchfill.fleet import FleetDown, new_tally
from benchfill.grading import Grading
from benchfill.matrix import ResponseMatrix
from benchfill.probe_http import ProbeHttp, RefusesN, describe_error
from benchfill.retry import TruncatedReply, status_of
from benchfill.store import Store

if TYPE_CHECKING:
    from benchfill.benchmarks import BenchmarkSpec
    from benchfill.evaluators.base import Evaluator

log = logging.getLogger("benchfill.probes")


@dataclass
class ProbePanel:
    probes: list[ProbeConfig]
    retry: RetryConfig = field(default_factory=RetryConfig)
    fleets: FleetPolicy = field(default_factory=FleetPolicy)

    @classmethod
    def from_config(cls, cfg: Config | Sequence[ProbeConfig]) -> ProbePanel:
        if isinstance(cfg, Config):
            return cls(list(cfg.probes), cfg.retry, cfg.fleets)
        return cls(list(cfg))

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.probes]

    def caps(self) -> dict[str, int]:
        """Each endpoint's bound on requests in flight: the largest ``concurrency`` asked of it
        (a replica's own, else its probe's)."""
        caps: dict[str, int] = {}
        for p in self.probes:
            for url, cap in p.endpoints:
                caps[url] = max(caps.get(url, 0), cap)
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
    refused: bool = False  # the error is the probe refusing the prompt as too long (``PromptRefused``)


@dataclass
class TrafficStats:
    requests: int = 0  # HTTP attempts sent, retries included
    calls: int = 0  # calls completed by the server in this session
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    cut: int = 0  # answers that stopped at max_tokens (finish_reason "length"), graded wrong
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0  # summed over completed calls
    # Per endpoint URL: requests (attempts), calls (served), failures, ejections (benchfill.fleet).
    replicas: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def add(self, other: TrafficStats) -> None:
        """Add another collection's counts to these."""
        for k, v in other.as_dict().items():
            if k == "replicas":
                for url, counts in v.items():
                    mine = self.replicas.setdefault(url, new_tally())
                    for c, n in counts.items():
                        mine[c] = mine.get(c, 0) + n
            else:
                setattr(self, k, getattr(self, k) + v)


def _without_cut(texts: list[str], cut: list[int]) -> list[str]:
    """The answers as graded: one that stopped at max_tokens has none (a reasoning model's draft "the
    answer is 204? Wait" would be read as its answer), so it is graded wrong."""
    return [("" if i in cut else t) for i, t in enumerate(texts)] if cut else texts


def graded_texts(hit: str) -> list[str]:
    """The answers of a cached probe call (its JSON), as graded."""
    found = json.loads(hit)
    return _without_cut(found["texts"], found.get("cut") or [])


def sample_seed(seed: int, index: int) -> int:
    """A per-sample seed for endpoints that refuse ``n > 1``: distinct for each sample index."""
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "big") & 0x7FFFFFFF


_PLAN_CHUNK = 512  # calls planned (prompts, keys, cache look-up) before the first of them are sent


class RolloutClient:
    """Async client for a probe panel: ``async with RolloutClient(...) as rc: await rc.rollouts(items)``.

    Every call goes through the openai SDK in this event loop, each endpoint's requests in flight
    held to its bound (``benchfill.limits``); replies are graded off the loop where grading is slow
    (``benchfill.grading``). Caching, grading and the store stay in this process.
    """

    def __init__(self, store: Store, panel: ProbePanel, spec: BenchmarkSpec, evaluator: Evaluator | None = None,
                 prompt_fn: Callable[[dict, Any], str] | None = None, record: bool = True,
                 grade_workers: int | None = None):
        self.store = store
        self.panel = panel
        self.spec = spec
        self.prompt_fn = prompt_fn
        self.record = record
        # Each completed call is written before its reply is used (``_call``): a run killed at any
        # point asks again only for what was in flight. The replies read in one turn of the event loop
        # share one write, so that a busy client writes in batches.
        self.cache = CallCache(store, flush_every=1024)
        self.stats = TrafficStats()
        self.http = ProbeHttp(panel, lambda: self.stats.replicas)  # self.stats may be replaced
        self.grading = Grading(evaluator, spec, workers=grade_workers)
        # Keyed by the probe's key_endpoint (its one URL, or its fleet): all replicas run one server.
        self._single: set[str] = {p.key_endpoint for p in panel.probes if not p.supports_n}
        self._bodies: dict[str, str] = {}  # key -> the request's canonical JSON, made once per call
        # key -> the call now in flight for it: a request asked twice at once (two items in the same
        # words, concurrent searches) is sent once; once it is done the cache answers.
        self._inflight: dict[str, asyncio.Future] = {}
        # Answers a server sent empty (content null or blank), per probe: graded wrong, as an answer cut off
        # at max_tokens is; a server that sends them all (a reasoning parser that leaves the answer in
        # reasoning_content, say) would move every difficulty without a word, so half or more is warned of
        self._answers: Counter[str] = Counter()
        self._empty: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._cut: Counter[str] = Counter()  # answers stopped at max_tokens, per probe
        self._warned_cut: set[str] = set()

    @property
    def evaluator(self) -> Evaluator:
        return self.grading.grader()

    async def __aenter__(self) -> RolloutClient:
        self.http.open()
        return self

    async def __aexit__(self, *exc) -> None:
        # each step whatever the one before did: a store gone mid-run fails the flush, and the HTTP sessions
        # left open then said "Unclosed client session" after the command's one-line error
        try:
            self.cache.flush()
        finally:
            try:
                self.grading.close()
            finally:
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
            if all(r.refused for r in failed):  # the items' own length: a rerun would meet it again
                raise PromptRefused(f"item {failed[0].item_id}'s prompt is longer than the probe takes: "
                                    f"{failed[0].error}")
            # (not "after retries": a 4xx is not retried, and the client's count is not this batch's)
            raise EndpointError(f"{len(failed)} of {len(results)} probe calls failed "
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
                # Never the replica: what served a request does not change its key (or its seed).
                key = request_key("probe", p.key_endpoint, p.model, req, body)
                plan.append((item, p, req, key))
                self._bodies[key] = body
        return plan

    async def _one(self, item: dict, p: ProbeConfig, req: dict, key: str, hit) -> Rollout:
        """One (item, probe): from the cache or a new call, then graded."""
        try:
            if hit is not None:
                self.stats.cache_hits += 1
                texts, cached = graded_texts(hit), True
            elif key in self._inflight:
                try:
                    texts, cached = await asyncio.shield(self._inflight[key]), True
                    self.stats.cache_hits += 1  # served by the same request's call, made once
                except asyncio.CancelledError:
                    if asyncio.current_task().cancelling():
                        raise
                    # Its batch was cancelled, not ours, perhaps once the reply had come: then it is stored.
                    if (hit := self.cache.get(key)) is None:
                        texts, cached = await self._fetch(p, req, key), False
                    else:
                        texts, cached = graded_texts(hit), True
                        self.stats.cache_hits += 1
            else:
                texts, cached = await self._fetch(p, req, key), False
        except Exception as exc:  # noqa: BLE001  (reported per call; the batch goes on)
            if not _is_call_error(exc):
                raise
            self.stats.failures += 1
            said = str(exc) if isinstance(exc, FleetDown) else f"probe {p.name} at {_where(p)}: {describe_error(exc, self.http.key_envs)}"
            return Rollout(item["id"], p.name, 0, 0, key, error=said, refused=_prompt_too_long(exc))
        correct = await self.grading.count_correct(item, texts)
        return Rollout(item["id"], p.name, correct, len(texts), key, cached=cached)

    async def _fetch(self, p: ProbeConfig, req: dict, key: str) -> list[str]:
        """A new call for ``key``; callers asking the same key meanwhile wait for this one."""
        done = asyncio.get_running_loop().create_future()
        done.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, so never "never retrieved"
        self._inflight[key] = done
        try:
            if req["n"] > 1 and p.key_endpoint in self._single:
                texts = await self._singles(p, req)
            else:
                try:
                    texts = await self._call(p, req, key)
                except RefusesN:
                    if p.key_endpoint not in self._single:
                        self._single.add(p.key_endpoint)
                        # a warning, not news: a run's requests to it grow by the trials per item (495 against
                        # about 73 for each other probe), and an operator sees no INFO line
                        log.warning("endpoint %s refuses n>1; asking one sample per request (set supports_n = "
                                    "false for it in the config to skip the refused first try)", _where(p))
                    texts = await self._singles(p, req)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                done.cancel()
            else:
                done.set_exception(exc)
            raise
        else:
            done.set_result(texts)
            return texts
        finally:
            del self._inflight[key]  # the cache (pending rows included) answers from here on

    async def _singles(self, p: ProbeConfig, req: dict) -> list[str]:
        subs = []
        for k in range(req["n"]):
            sub = {**req, "n": 1, "seed": sample_seed(req["seed"], k), "sample_index": k}
            subs.append((sub, request_key("probe", p.key_endpoint, p.model, sub)))
        hits = self.cache.get_many(k for _, k in subs)
        self.stats.cache_hits += len(hits)

        async def get(sub: dict, key: str) -> list[str]:
            if key in hits:
                return graded_texts(hits[key])
            return await self._call(p, sub, key)

        parts = await asyncio.gather(*(get(s, k) for s, k in subs))
        return [t for part in parts for t in part]

    async def _call(self, p: ProbeConfig, req: dict, key: str) -> list[str]:
        texts, usage, latency, served_by, cut = await self.http.call(p, req, self.stats)
        self._count_empty(p, texts, cut)
        self.stats.calls += 1
        pt, ct = token_count(usage.get("prompt_tokens")), token_count(usage.get("completion_tokens"))
        self.stats.prompt_tokens += pt
        self.stats.completion_tokens += ct
        self.stats.latency_s += latency
        # The row records the replica that served it (its endpoint column); its key does not.
        self.cache.add(make_call("probe", key, served_by, p.model, req,
                                 {"texts": texts, "usage": usage, **({"cut": cut} if cut else {})},
                                 pt, ct, latency, body_json=self._bodies.pop(key, None)))
        # The other replies of this turn of the loop join the write. This turn also keeps the call in flight
        # (``_fetch`` lets it go on return) while its reply is already in the cache: a batch that looked the
        # key up before the reply came starts its task one turn later, and finds one or the other.
        await asyncio.sleep(0)
        self.cache.flush()  # a no-op where one of them has written it already
        return _without_cut(texts, cut)

    EMPTY_WARN_AFTER = 16  # answers of a probe before its share of empty ones is judged

    CUT_WARN_SHARE = 0.05  # of a probe's answers stopped at max_tokens, before it is warned of
    # and at least this many: one cut answer among a probe's first sixteen is 6%, and at a true rate of 1%
    # that had warned of one probe in six (three: one in fifty; a true 5% is still warned of nine times in ten)
    CUT_WARN_LEAST = 3

    def _count_empty(self, p: ProbeConfig, texts: list[str], cut: list[int] = ()) -> None:
        self._answers[p.name] += len(texts)
        self._empty[p.name] += sum(1 for t in texts if not t.strip())
        self._cut[p.name] += len(cut)
        self.stats.cut += len(cut)
        n, empty, stopped = self._answers[p.name], self._empty[p.name], self._cut[p.name]
        if (p.name not in self._warned_cut and n >= self.EMPTY_WARN_AFTER
                and stopped >= max(self.CUT_WARN_SHARE * n, self.CUT_WARN_LEAST)):
            self._warned_cut.add(p.name)
            # a cut answer is graded wrong: a probe whose long answers are cut makes long items look hard
            log.warning("probe %s at %s: %d of its %d answers so far stopped at max_tokens (%d) before they "
                        "ended and are graded wrong; raise max_tokens for it in the config (a reasoning model "
                        "may need 16384 or more)", p.name, _where(p), stopped, n, p.max_tokens)
        if p.name not in self._warned and n >= self.EMPTY_WARN_AFTER and 2 * empty >= n:
            self._warned.add(p.name)
            log.warning("probe %s at %s: %d of its %d answers so far came back empty (content null or blank) and "
                        "are graded wrong; is the server putting the answer elsewhere (a reasoning parser's "
                        "reasoning_content), or cutting it at max_tokens?", p.name, _where(p), empty, n)

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


# What servers say when a prompt does not fit: vLLM ("This model's maximum context length is 4096 tokens.
# However, you requested ..."), OpenAI ("context_length_exceeded"), others ("prompt is too long").
_TOO_LONG = re.compile(r"context[ _]length|maximum context|max_model_len|prompt is too long|too many (?:input )?tokens"
                       r"|input is too long|exceeds? the (?:model's )?(?:maximum|max|context)", re.IGNORECASE)


# vLLM names the parts: "maximum context length is 2048 tokens. However, you requested 4196 tokens (100 in the
# messages, 4096 in the completion)" (before 0.6), "'max_tokens' ... is too large: 4096. This model's maximum
# context length is 2048 tokens and your request has 100 input tokens (4096 > 2048 - 100)" (since).
_VLLM_OLD = re.compile(r"maximum context length is (\d+).*?(\d+) in the messages, (\d+) in the completion",
                       re.IGNORECASE | re.DOTALL)
_VLLM_NEW = re.compile(r"\((\d+) > (\d+) - (\d+)\)")


def _prompt_too_long(exc: BaseException) -> bool:
    """A refusal of the prompt's length: the item's fault. Not where the server says max_tokens alone fills
    its context: that is the config's, and every item would meet it."""
    said = str(exc)
    if status_of(exc) not in (400, 413, 422) or _TOO_LONG.search(said) is None:
        return False
    if (old := _VLLM_OLD.search(said)) is not None:
        return int(old.group(3)) < int(old.group(1))
    if (new := _VLLM_NEW.search(said)) is not None:
        return int(new.group(1)) < int(new.group(2))
    return True


def _is_call_error(exc: BaseException) -> bool:
    """Errors that belong to one call (HTTP, transport, timeouts), not bugs in our code."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"APIError", "HTTPError", "TransportError", "TimeoutError", "OSError", "TimeoutException"}) \
        or isinstance(exc, (asyncio.TimeoutError, TruncatedReply))


def _where(p: ProbeConfig) -> str:
    """Where a probe is served, for an error: its URL, or every replica of its fleet (the error's own text
    names the one that failed; a fleet id alone can read like one of the replicas)."""
    if p.replicas is None:
        return str(p.base_url)
    return f"{p.key_endpoint} ({len(p.replicas)} replicas: {', '.join(url for url, _ in p.endpoints)})"


def collect_responses(store: Store, panel: ProbePanel, items: Sequence[dict], spec: BenchmarkSpec, *,
                      trials: int | None = None, seed: int = 0, evaluator: Evaluator | None = None,
                      phase: str = "benchmark",
                      prompt_fn: Callable[[dict, Any], str] | None = None,
                      stats: TrafficStats | None = None, **client: Any) -> ResponseMatrix:
    """All items x all probes, graded, as a response matrix (sync wrapper around ``RolloutClient``).

    Pass a ``TrafficStats`` as ``stats`` to get the traffic counts of this collection back; other
    keywords (``grade_workers``, ``record``) go to ``RolloutClient``.
    """
    if not isinstance(store, Store):  # a library caller's slip: said, not an AttributeError deep in the client
        raise ConfigError(f"store: expected a benchfill.store.Store, got {type(store).__name__}")

    async def go() -> tuple[list[Rollout], TrafficStats]:
        async with RolloutClient(store, panel, spec, evaluator, prompt_fn=prompt_fn, **client) as rc:
            res = await rc.rollouts(items, trials=trials, seed=seed, phase=phase)
            return res, rc.stats

    from benchfill import netguard

    results, used = netguard.run(go())
    if stats is not None:
        stats.add(used)
    models, ids = panel.names, [it["id"] for it in items]
    mi, ii = {m: j for j, m in enumerate(models)}, {x: i for i, x in enumerate(ids)}
    correct = np.zeros((len(models), len(ids)), dtype=np.int64)
    tried = np.zeros_like(correct)
    for r in results:
        correct[mi[r.probe], ii[r.item_id]] += r.correct
        tried[mi[r.probe], ii[r.item_id]] += r.trials
    chance = np.array([spec.chance_of(it) for it in items], dtype=float)
    return ResponseMatrix(tuple(models), tuple(ids), correct, tried, chance, source="probe rollouts")
