"""Probe calls spread over worker processes: the same calls, results, retries, bounds and failures as
in one process (benchfill.probe_pool), and the lean HTTP client under the SDK (benchfill.http)."""

from __future__ import annotations

import asyncio

import openai
import pytest
from loopback_openai import LoopbackOpenAI, reply
from test_probes import ITEMS, NO_WAIT, SPEC, YesGrader, expected_correct, panel, prompt

from benchfill.config import ProbeConfig
from benchfill.errors import EndpointError
from benchfill.http import LeanHttpClient
from benchfill.probes import ProbePanel, RolloutClient, default_workers, sample_seed
from benchfill.schema import ModelCall
from benchfill.store import Store

POOLED = {"workers": 2, "pool_min_calls": 0}


def run(store, pan, items=ITEMS, seed=0, client=POOLED, **kw):
    async def go():
        async with RolloutClient(store, pan, SPEC, YesGrader(), prompt_fn=prompt, **client) as rc:
            res = await rc.rollouts(items, seed=seed, **kw)
            return res, rc.stats, (len(rc.pool.workers) if rc.pool else 0)
    return asyncio.run(go())


def test_pool_makes_the_same_calls_with_the_same_retries_as_one_process(tmp_path):
    items = [{"id": f"q{i}", "problem": f"question {i}", "answer": "yes"} for i in range(12)]
    # the "timeout" fault holds its reply for 1 s; 0.6 s leaves a loaded machine room for the rest
    with LoopbackOpenAI(models=("m1", "m2"), faults=[429, 500, "timeout"]) as srv:
        res, stats, workers = run(Store(tmp_path / "s.db"), panel(srv.base_url, ("m1", "m2"), timeout_s=0.6),
                                  items=items, seed=4)
        assert workers == 2
        # every (item, model) failed three ways, then succeeded once, and was never asked again
        assert stats.retries == 3 * 24 and stats.requests == 4 * 24 and stats.calls == 24 and stats.failures == 0
        assert len(srv.successes) == 24 and set(srv.successes.values()) == {1}
        assert stats.worker_cpu_s > 0 and stats.completion_tokens == 24 * 12
    for r in res:
        item = next(i for i in items if i["id"] == r.item_id)
        assert (r.trials, r.correct) == (4, expected_correct(r.probe[2:], item, 4, 4))


def test_pool_results_are_cached_like_any_other(tmp_path):
    with LoopbackOpenAI(models=("m1",)) as srv:
        store = Store(tmp_path / "s.db")
        first, s1, _ = run(store, panel(srv.base_url), seed=2)
        again, s2, workers = run(store, panel(srv.base_url), seed=2)
        assert s1.calls == 5 and s2.requests == 0 and s2.cache_hits == 5 and workers == 0  # nothing to call
        assert [(r.correct, r.trials) for r in again] == [(r.correct, r.trials) for r in first]
        assert len(store.all(ModelCall)) == 5


def test_pool_falls_back_to_single_samples_where_n_is_refused(tmp_path):
    with LoopbackOpenAI(refuse_n=True) as srv:
        res, stats, workers = run(Store(tmp_path / "s.db"), panel(srv.base_url), items=ITEMS[:3], seed=3)
        assert workers == 2
        singles = [b for b in srv.bodies if b.get("n", 1) == 1]
        assert len(singles) == 12 and {b["seed"] for b in singles} == {sample_seed(3, k) for k in range(4)}
        for r in res:
            item = next(i for i in ITEMS if i["id"] == r.item_id)
            want = sum("yes" in reply("m1", prompt(item, SPEC), sample_seed(3, k), 0) for k in range(4))
            assert (r.trials, r.correct) == (4, want)


def test_pool_keeps_the_bound_on_requests_in_flight(tmp_path):
    with LoopbackOpenAI(latency_s=0.05) as srv:
        items = [{"id": f"c{i}", "problem": f"c {i}", "answer": "yes"} for i in range(16)]
        # concurrency 3 over 2 workers: shares 2 + 1
        _, stats, workers = run(Store(tmp_path / "s.db"), panel(srv.base_url), items=items)
        assert workers == 2 and stats.calls == 16
        assert 1 < srv.peak_inflight <= 3


def test_a_worker_that_dies_fails_its_calls_and_a_rerun_resumes(tmp_path):
    items = [{"id": f"k{i}", "problem": f"k {i}", "answer": "yes"} for i in range(24)]
    store = Store(tmp_path / "s.db")
    with LoopbackOpenAI(latency_s=0.1) as srv:
        pan = panel(srv.base_url)

        async def go():
            async with RolloutClient(store, pan, SPEC, YesGrader(), prompt_fn=prompt, **POOLED) as rc:
                async def kill_one_worker():  # once the pool runs and a few calls are in
                    while rc.pool is None or rc.stats.calls < 3:
                        await asyncio.sleep(0.01)
                    rc.pool.workers[0].proc.kill()

                res, _ = await asyncio.gather(rc.rollouts(items, strict=False), kill_one_worker())
                return res, rc.stats

        res, stats = asyncio.run(go())
        failed = [r for r in res if r.error]
        assert failed and all("probe worker" in r.error and "exited" in r.error for r in failed)
        assert stats.failures == len(failed) and stats.calls == len(items) - len(failed)
        res2, stats2, _ = run(store, pan, items=items)  # the rerun makes only the calls that failed
        assert stats2.cache_hits == len(items) - len(failed) and stats2.calls == len(failed)
        assert all(r.trials == 4 for r in res2)


def test_failed_calls_in_workers_are_reported_per_call(tmp_path):
    with LoopbackOpenAI(models=("m1",)) as srv:
        res, stats, _ = run(Store(tmp_path / "s.db"), panel(srv.base_url, ("nope",)), strict=False)
        assert stats.failures == 5 and all("HTTP 404" in r.error and r.trials == 0 for r in res)
        with pytest.raises(EndpointError, match=r"5 of 5 probe calls failed.*HTTP 404"):
            run(Store(tmp_path / "t.db"), panel(srv.base_url, ("nope",)))


def test_worker_count_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("BENCHFILL_PROBE_WORKERS", "3")
    assert default_workers() == 3
    monkeypatch.setenv("BENCHFILL_PROBE_WORKERS", "0")
    assert default_workers() == 0
    monkeypatch.setenv("BENCHFILL_PROBE_WORKERS", "many")
    with pytest.raises(EndpointError, match="BENCHFILL_PROBE_WORKERS must be an integer, got 'many'"):
        default_workers()
    monkeypatch.delenv("BENCHFILL_PROBE_WORKERS")
    assert 0 <= default_workers() <= 4


def test_small_batches_stay_in_process(tmp_path):
    with LoopbackOpenAI() as srv:
        _, stats, workers = run(Store(tmp_path / "s.db"), panel(srv.base_url), client={"workers": 2})
        assert workers == 0 and stats.calls == 5 and stats.worker_cpu_s == 0


@pytest.mark.parametrize("transport", ["lean", "aiohttp", "httpx"])
def test_every_transport_gives_the_same_results(tmp_path, transport):
    with LoopbackOpenAI(models=("m1", "m2"), faults=[503]) as srv:
        res, stats, _ = run(Store(tmp_path / "s.db"), panel(srv.base_url, ("m1", "m2")), seed=9,
                            client={"workers": 0, "transport": transport})
        assert stats.retries == 10 and stats.calls == 10
        for r in res:
            item = next(i for i in ITEMS if i["id"] == r.item_id)
            assert r.correct == expected_correct(r.probe[2:], item, 4, 9)


def test_lean_client_maps_failures_to_the_sdk_errors():
    async def go():
        with LoopbackOpenAI(faults=["timeout"]) as srv:
            client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0, timeout=0.2,
                                        http_client=LeanHttpClient(max_connections=2))
            body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
            with pytest.raises(openai.APITimeoutError):
                await client.chat.completions.create(**body)
            refused = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="EMPTY", max_retries=0,
                                         http_client=LeanHttpClient())
            with pytest.raises(openai.APIConnectionError):
                await refused.models.list()
            with pytest.raises(openai.NotFoundError):  # status errors keep their type and body
                await client.chat.completions.create(**{**body, "model": "nope"}, timeout=5)
            typed = await client.chat.completions.create(**body, timeout=5)  # the typed path works too
            assert typed.choices[0].message.content.startswith("answer") and typed.usage.completion_tokens == 3
            await client.close()
            await refused.close()

    asyncio.run(go())


def test_panel_with_two_endpoints_splits_each_bound(tmp_path):
    with LoopbackOpenAI(models=("m1",)) as a, LoopbackOpenAI(models=("m2",)) as b:
        pan = ProbePanel([ProbeConfig(name="p-m1", base_url=a.base_url, model="m1", trials=4, concurrency=1),
                          ProbeConfig(name="p-m2", base_url=b.base_url, model="m2", trials=4, concurrency=4)],
                         NO_WAIT)
        res, stats, workers = run(Store(tmp_path / "s.db"), pan, seed=1)
        # concurrency 1 cannot be split: only one worker calls that endpoint
        assert workers == 2 and stats.calls == 10 and len(a.successes) == 5 and len(b.successes) == 5
        assert all(r.trials == 4 for r in res)


def test_outside_loopback_mode_the_client_and_its_workers_run_on_uvloop(tmp_path, monkeypatch):
    """The default for users (the tests hold themselves to asyncio): same results on uvloop."""
    import numpy as np

    from benchfill.probes import collect_responses

    monkeypatch.delenv("BENCHFILL_LOOPBACK_ONLY")  # every endpoint here is loopback anyway
    loops = set()

    def recording_prompt(item, spec):
        loops.add(type(asyncio.get_running_loop()).__module__.split(".")[0])
        return prompt(item, spec)

    items = [{"id": f"u{i}", "problem": f"u {i}", "answer": "yes"} for i in range(6)]
    with LoopbackOpenAI(models=("m1", "m2"), faults=[429]) as srv:
        m = collect_responses(Store(tmp_path / "s.db"), panel(srv.base_url, ("m1", "m2")), items, SPEC,
                              evaluator=YesGrader(), prompt_fn=recording_prompt, seed=5, workers=2, pool_min_calls=0)
        assert len(srv.successes) == 12 and set(srv.successes.values()) == {1}
    assert loops == {"uvloop"}
    want = [[expected_correct(model, item, 4, 5) for item in items] for model in ("m1", "m2")]
    np.testing.assert_array_equal(m.correct, want)


def test_a_stray_line_from_a_worker_is_skipped_not_fatal():
    import sys

    from benchfill.probe_pool import ProbePool, _Worker

    async def go():
        code = ("print('a library chatting on stdout')\n"
                "print('{\"cpu\": 0.5}')\n"
                "print('{\"id\": 0, \"texts\": [\"yes\"], \"usage\": {}, \"latency\": 0.1, \"requests\": 1, \"retries\": 0}')")
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE)
        w = _Worker(proc)
        fut = asyncio.get_running_loop().create_future()
        w.pending[0] = fut
        pool = ProbePool([w])
        await pool._read(w)
        return fut.result(), pool.cpu_s

    reply, cpu = asyncio.run(go())
    assert reply["texts"] == ["yes"] and cpu == 0.5


def test_lean_client_leaves_an_auth_flow_to_httpx2():
    import httpx2

    async def go(url):
        client = LeanHttpClient()
        body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
        req = client.build_request("POST", f"{url}/chat/completions", json=body)
        resp = await client.send(req, auth=httpx2.BasicAuth("user", "pw"))
        await client.aclose()
        return resp.status_code

    with LoopbackOpenAI() as srv:
        assert asyncio.run(go(srv.base_url)) == 200
        assert srv.auth_seen == ["Basic dXNlcjpwdw=="]
