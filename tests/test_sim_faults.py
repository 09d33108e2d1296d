"""Injected faults: they appear at the configured rate, and a retried request gets the fault-free reply."""

from __future__ import annotations

import asyncio
import json
import math
import time

import openai
import pytest

from benchfill.sim import SimServer, World


@pytest.fixture(scope="module")
def items(shared_data):
    return [json.loads(line) for line in open(shared_data / "amc23" / "items.jsonl")]


def world(items, **knobs) -> World:
    return World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", seed=5, **knobs)


def messages(it: dict) -> list[dict]:
    return [{"role": "user", "content": f"<problem>{it['problem']}</problem>"}]


async def until_success(c: openai.AsyncOpenAI, it: dict, seed: int, seen: dict[str, int]) -> list[str]:
    """Retry every failure immediately, counting what the client saw."""
    while True:
        try:
            r = await c.chat.completions.create(model="sim-probe-06", messages=messages(it), n=4, seed=seed)
            return [ch.message.content for ch in r.choices]
        except openai.RateLimitError:
            seen["429"] += 1
        except openai.InternalServerError:
            seen["500"] += 1
        except openai.APITimeoutError:
            seen["timeout"] += 1
        except (openai.APIResponseValidationError, json.JSONDecodeError, ValueError):
            seen["malformed"] += 1


async def collect(srv: SimServer, items: list[dict], seen: dict[str, int]) -> list[list[str]]:
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0, timeout=2.0) as c:
        return await asyncio.gather(*(until_success(c, it, seed, seen) for it in items for seed in range(3)))


def test_faults_at_configured_rate_and_retries_get_identical_replies(items):
    seen = {"429": 0, "500": 0, "timeout": 0, "malformed": 0}
    with SimServer(world(items)) as clean:
        reference = asyncio.run(collect(clean, items, dict(seen)))
    with SimServer(world(items, fault_rate=0.3, timeout_hold_s=5.0)) as faulty:
        got = asyncio.run(collect(faulty, items, seen))
        counts = faulty.stats["models"]["sim-probe-06"]
    assert got == reference  # same content however many attempts each request took
    attempts = counts["requests"]
    assert counts["successes"] == len(items) * 3 and attempts == counts["successes"] + counts["faults"]
    for kind in ("429", "500", "malformed"):  # every kind was injected, and the client saw each as what it is
        assert seen[kind] == counts.get("fault_" + kind, 0) > 0
    # A loaded machine may time out a healthy request too, never fewer than were injected.
    assert seen["timeout"] >= counts.get("fault_timeout", 0) > 0
    sd = math.sqrt(0.3 * 0.7 / attempts)
    assert abs(counts["faults"] / attempts - 0.3) <= 4 * sd


def test_openai_sdk_own_retries_recover_from_429_500_and_timeouts(items):
    w = world(items[:5], fault_rate=0.5, fault_mix={"429": 1.0, "500": 1.0, "timeout": 1.0},
              retry_after_s=0.01, timeout_hold_s=5.0)
    c_clean = None
    with SimServer(world(items[:5])) as clean:
        c_clean = openai.OpenAI(base_url=clean.base_url, api_key="k", max_retries=0)
        want = [c_clean.chat.completions.create(model="sim-probe-02", messages=messages(it), n=2, seed=9)
                .choices[1].message.content for it in items[:5]]
    with SimServer(w) as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=12, timeout=1.0)
        got = [c.chat.completions.create(model="sim-probe-02", messages=messages(it), n=2, seed=9)
               .choices[1].message.content for it in items[:5]]
        assert srv.stats["models"]["sim-probe-02"]["faults"] > 0
    assert got == want


def test_latency_is_applied_per_request(items):
    with SimServer(world(items[:3], latency_ms=80)) as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        t0 = time.perf_counter()
        for it in items[:3]:
            c.chat.completions.create(model="sim-probe-01", messages=messages(it))
        elapsed = time.perf_counter() - t0
    assert 3 * 0.08 <= elapsed < 3 * 0.08 + 1.5
