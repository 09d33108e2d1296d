"""Rewriter and judge calls through litellm (any provider), with typed results.

Same discipline as the probes: retries in ``benchfill.retry`` (litellm's own are off), requests in
flight bounded per endpoint (``benchfill.limits``, the config's ``concurrency``), every completed
call cached in the store under a hash of the request. A malformed reply is sent back to the model with
the parse error (a repair turn) up to ``max_repairs`` times; after that the call is a ``Failure``,
which is falsy and never raises, so one bad reply never stops a run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchfill import llm_loop
from benchfill.cache import CallCache, make_call, request_key, token_count
from benchfill.config import LLMConfig, RetryConfig, key_from_env
from benchfill.errors import ConfigError, EndpointError
from benchfill.limits import endpoint_bound
from benchfill.redact import scrub
from benchfill.retry import AttemptTimeout, TruncatedReply, async_retrying, is_retryable, status_of

if TYPE_CHECKING:
    from benchfill.benchmarks import BenchmarkSpec
    from benchfill.store import Store

log = logging.getLogger("benchfill.llm")


@dataclass
class RewriteResult:
    child: dict[str, Any]  # the child in the benchmark's own fields, with its reference answer
    reply: str
    repairs: int = 0
    cached: bool = False


@dataclass
class Verdict:
    valid: bool
    reason: str
    repairs: int = 0
    cached: bool = False


@dataclass
class Failure:
    """A rewriter or judge call whose replies stayed unreadable after the repairs allowed."""

    role: str
    reason: str
    replies: list[str] = field(default_factory=list)
    cached: bool = False  # every reply from the cache: a rerun replays the failure, sending nothing

    def __bool__(self) -> bool:  # callers test ``if not result``
        return False


@dataclass
class LLMStats:
    requests: int = 0
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    repairs: int = 0
    failures: int = 0
    cut: int = 0  # replies that stopped at max_tokens (finish_reason "length"): a repair turn each
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


async def rewrite(cfg: LLMConfig, parent: dict[str, Any], target_z: float,
                  references: Sequence[tuple[dict[str, Any], float]], *, spec: BenchmarkSpec,
                  store: Store | None = None, seed: int = 0, retry: RetryConfig | None = None, stats: LLMStats | None = None,
                  format_prompt: Callable | None = None, parse: Callable | None = None) -> RewriteResult | Failure:
    """Ask the rewriter for a child of ``parent`` aimed at ``target_z``; references are (item, z) pairs."""
    if format_prompt is None or parse is None:
        from benchfill import prompts

        format_prompt = format_prompt or prompts.format_rewriter_prompt
        parse = parse or prompts.parse_child

    # A child the grader cannot grade (a code item without its tests or entry point) is asked for again in a
    # repair turn, as an unreadable one is: taken as it came, its probes' grading stopped the run, and a
    # rerun replayed the same cached reply into the same stop.
    graded = _grader_fields(spec)

    def read(reply: str) -> dict[str, Any]:
        child = parse(reply)
        if not isinstance(child, dict):
            raise ValueError("the <child> block is not a JSON object")
        missing = [f for f in (spec.text_field, spec.answer_field) if child.get(f) is None or not str(child[f]).strip()]
        missing += [f for f in graded if child.get(f) is None]
        if missing:  # a null answer would be graded as the string "None", every probe wrong
            raise ValueError(f"the child lacks field {missing[0]!r}")
        if not isinstance(child[spec.text_field], str):
            raise ValueError(f"the child's {spec.text_field!r} is not text (a JSON {type(child[spec.text_field]).__name__})")
        return child

    prompt = format_prompt(parent, target_z, references, spec)
    out = await _ask("rewriter", cfg, prompt, read, store, seed, retry, stats)
    if isinstance(out, Failure):
        return out
    child, reply, repairs, cached = out
    return RewriteResult(child, reply, repairs, cached)


async def judge(cfg: LLMConfig, child: dict[str, Any], *, spec: BenchmarkSpec, store: Store | None = None,
                seed: int = 0,
                retry: RetryConfig | None = None, stats: LLMStats | None = None,
                format_prompt: Callable | None = None, parse: Callable | None = None) -> Verdict | Failure:
    """Ask the judge whether ``child`` is a valid item (well posed, reference answer right)."""
    if format_prompt is None or parse is None:
        from benchfill import prompts

        format_prompt = format_prompt or prompts.format_judge_prompt
        parse = parse or prompts.parse_verdict

    def read(reply: str) -> tuple[bool, str]:
        v = parse(reply)
        valid, reason = (v.valid, v.reason) if hasattr(v, "valid") else v
        return bool(valid), str(reason)

    out = await _ask("judge", cfg, format_prompt(child, spec), read, store, seed, retry, stats)
    if isinstance(out, Failure):
        return out
    (valid, reason), _reply, repairs, cached = out
    return Verdict(valid, reason, repairs, cached)


def _grader_fields(spec) -> list[str]:
    """The item fields the spec's grader reads beyond the answer; none for a spec without a known grader
    (a library caller's own parse decides then)."""
    from benchfill.evaluators import spec_item_fields

    try:
        return spec_item_fields(spec) if getattr(spec, "evaluator", None) else []
    except ConfigError:
        return []


# -- the call path ---------------------------------------------------------------------------------
REPAIR_ECHO_CHARS = 20_000  # of a malformed reply, shown back in a repair turn (about 5,000 tokens)


class _NoChoices(TruncatedReply):
    """A 200 whose "choices" is empty (litellm passes it on): asked again, as a cut-off body is."""


async def _ask(role: str, cfg: LLMConfig, prompt: str, read: Callable[[str], Any], store, seed: int,
               retry: RetryConfig | None, stats: LLMStats | None):
    stats = stats if stats is not None else LLMStats()
    messages: list[dict[str, str]] = [{"role": "user", "content": prompt}]
    replies: list[str] = []
    all_cached = True
    for repair in range(cfg.max_repairs + 1):
        reply, cached, cut = await _complete(role, cfg, messages, seed, store, retry or RetryConfig(), stats)
        all_cached &= cached
        replies.append(reply)
        try:
            if cut:
                # what a cut reply holds is a draft (a reasoning model's <child> before it thought again);
                # it is not taken, and a repair turn asks again
                stats.cut += 1
                _warn_cut(role, cfg)
                raise ValueError(f"it stopped at max_tokens ({cfg.max_tokens}) before it ended; "
                                 "answer more briefly")
            return read(reply), reply, repair, all_cached
        except Exception as exc:  # noqa: BLE001  (any parse failure: MalformedReply, ValueError, ...)
            why = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
            if repair < cfg.max_repairs:
                log.info("%s reply malformed (%s); repair %d of %d", role, why, repair + 1, cfg.max_repairs)
                stats.repairs += 1
            else:
                log.info("%s reply malformed (%s); no repair turn left (max_repairs %d)", role, why, cfg.max_repairs)
            # The repair turn shows the model its own reply and what was wrong with it; a runaway reply only
            # in part (a 10 MB one was sent back whole, on every repair turn: paid for, or refused as too long)
            shown = reply if len(reply) <= REPAIR_ECHO_CHARS else (
                f"{reply[:REPAIR_ECHO_CHARS]}\n[... {len(reply) - REPAIR_ECHO_CHARS} more characters cut]")
            messages = messages + [
                {"role": "assistant", "content": shown},
                {"role": "user", "content": f"Your reply could not be read: {why}. "
                                            "Answer again in exactly the format asked for."},
            ]
    stats.failures += 1
    return Failure(role, f"{role} reply malformed after {cfg.max_repairs} repairs ({why})", replies, all_cached)


_CUT_WARNED: set[tuple[str, str]] = set()


def _warn_cut(role: str, cfg: LLMConfig) -> None:
    if (role, cfg.model) not in _CUT_WARNED:  # once per role and model in a process: each is a repair turn
        _CUT_WARNED.add((role, cfg.model))
        log.warning("%s %s: a reply stopped at max_tokens (%d) before it ended and was asked again; if this "
                    "recurs, raise %s.max_tokens in the config (a reasoning model may need several thousand)",
                    role, cfg.model, cfg.max_tokens, role)


async def _complete(role: str, cfg: LLMConfig, messages: list[dict], seed: int, store, retry: RetryConfig,
                    stats: LLMStats) -> tuple[str, bool, bool]:
    """(reply text, from the cache, cut at max_tokens)."""
    request = {"messages": messages, "temperature": cfg.temperature, "max_tokens": cfg.max_tokens, "seed": seed}
    endpoint = cfg.api_base or cfg.model.split("/", 1)[0]
    key = request_key(role, endpoint, cfg.model, request)
    cache = CallCache(store) if store is not None else None
    if cache is not None and (hit := cache.get(key)) is not None:
        stats.cache_hits += 1
        found = json.loads(hit)
        return found["text"], True, bool(found.get("cut"))
    litellm = _litellm()
    kwargs: dict[str, Any] = dict(model=cfg.model, messages=messages, temperature=cfg.temperature,
                                  max_tokens=cfg.max_tokens, seed=seed, timeout=cfg.timeout_s,
                                  num_retries=0, max_retries=0,
                                  drop_params=True)  # providers without `seed` still answer (per call, not global)
    if cfg.api_base:
        kwargs["api_base"] = cfg.api_base
    if cfg.api_key_env:
        api_key = key_from_env(cfg.api_key_env, sent_to=cfg.api_base)
        if not api_key:
            raise ConfigError(f"{role}.api_key_env: environment variable {cfg.api_key_env} is not set")
        kwargs["api_key"] = api_key
    elif cfg.api_base:
        kwargs["api_key"] = "EMPTY"  # a local OpenAI-compatible server without auth

    def on_retry(state) -> None:
        stats.retries += 1

    # A hosted model is bounded with the rest of its provider's traffic ("gpt-4o" and "gpt-4o-mini"
    # both by "openai"), as litellm routes it; the cache key keeps ``endpoint`` as it always was.
    where = cfg.api_base or _provider(litellm, cfg.model)
    bound = endpoint_bound(where, cfg.concurrency)
    try:
        async for attempt in async_retrying(retry, on_retry):
            with attempt:
                async with bound:  # per attempt: a backoff wait holds no slot
                    stats.requests += 1
                    t0 = time.perf_counter()
                    # timeout_s bounds the whole attempt, not each read (a reply dripped a byte at a time);
                    # asyncio.timeout, not wait_for, which can swallow a stop's cancellation on 3.11
                    try:
                        async with asyncio.timeout(cfg.timeout_s):  # (on the process's one litellm loop)
                            resp = await llm_loop.call(litellm.acompletion(**kwargs))
                    except TimeoutError:
                        raise AttemptTimeout(f"no whole reply within timeout_s {cfg.timeout_s:g} s") from None
                    latency = time.perf_counter() - t0
                if not resp.choices:  # a 200 with "choices": [] (litellm passes it on): ask again
                    raise _NoChoices("reply has no choices")
    except _NoChoices:
        # No choices on every attempt: the endpoint answers, but not this prompt (a content filter, say).
        # An empty reply, which the caller cannot read: a repair turn, then a Failure of this one call; the
        # run goes on, and a rerun finds the same empty reply in the cache rather than stopping again.
        log.info("%s %s at %s: reply has no choices on every attempt", role, cfg.model, where)
        resp, latency = None, 0.0
    except Exception as exc:
        if not (status_of(exc) is not None or is_retryable(exc)):
            raise
        raise EndpointError(f"{role} {cfg.model} at {where}: {_describe(exc, cfg.api_key_env)}") from None
    text = "" if resp is None else resp.choices[0].message.content or ""
    cut = resp is not None and getattr(resp.choices[0], "finish_reason", None) == "length"
    usage = getattr(resp, "usage", None)
    pt, ct = token_count(getattr(usage, "prompt_tokens", 0)), token_count(getattr(usage, "completion_tokens", 0))
    stats.calls += 1
    stats.prompt_tokens += pt
    stats.completion_tokens += ct
    stats.latency_s += latency
    if cache is not None:
        cache.add(make_call(role, key, endpoint, cfg.model, request, {"text": text, **({"cut": True} if cut else {})},
                            pt, ct, latency))
        cache.flush()
    return text, False, cut


def _provider(litellm, model: str) -> str:
    """The provider litellm sends ``model`` to (``openai`` for "gpt-4o"), else the model's prefix."""
    try:
        return litellm.get_llm_provider(model)[1]
    except Exception:  # noqa: BLE001  (a name litellm does not know: the call itself will say so)
        return model.split("/", 1)[0]


def _describe(exc: BaseException, key_env: str | None) -> str:
    """A failed call in one line, scrubbed (an error body may echo the request's headers). litellm
    reports a connection it could not make as HTTP 500 "Connection error."; no reply came, so the
    status is left out and the cause it wraps (refused, unknown host) is said instead."""
    text = scrub(str(exc), env=[key_env])
    msg = text.splitlines()[0][:200] if text else exc.__class__.__name__
    chain, link = [], exc
    while link is not None and link not in chain and len(chain) < 16:
        chain.append(link)
        link = link.__cause__ or link.__context__
    if any(type(e).__name__ == "APIConnectionError" for e in chain):
        root = chain[-1]
        said = scrub(str(root), env=[key_env]).splitlines()
        return f"{msg} ({root.__class__.__name__}: {said[0][:200]})" if said and said[0] not in msg else msg
    code = status_of(exc)
    return f"HTTP {code}: {msg}" if code else msg


def _litellm():
    """litellm, imported on first use, with its network look-ups, telemetry and chatter off."""
    from benchfill import proxies

    proxies.prepare()
    names = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm")
    # a level the host application gave one of these loggers before stands (litellm's import resets them)
    chosen = {n: logging.getLogger(n).level for n in names}
    # Both are read by the import only (the cost map is fetched from the network there unless the local
    # one is forced): set for it, then as they were (they had stayed in the host's environment, and every
    # process the host started inherited them)
    before = {name: os.environ.get(name) for name in ("LITELLM_LOG", "LITELLM_LOCAL_MODEL_COST_MAP")}
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    for name in names:
        logging.getLogger(name).setLevel(chosen[name] or logging.ERROR)
    if getattr(litellm, "use_litellm_proxy", False) is True:  # a host's own switch, as the variable
        raise ConfigError("litellm.use_litellm_proxy is True in this process: litellm would send the rewriter's "
                          "and the judge's calls to a LiteLLM proxy instead of the endpoints this run names")
    return litellm
