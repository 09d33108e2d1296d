"""One bound on requests in flight per endpoint, for probes, rewriter and judge alike, counted at a
loopback OpenAI-compatible server (its ``peak_inflight``: requests being served at once)."""

from __future__ import annotations

import asyncio

import pytest
from loopback_openai import LoopbackOpenAI

from benchfill.benchmarks import BenchmarkSpec
from benchfill.config import LLMConfig, ProbeConfig, RetryConfig, load_config
from benchfill.limits import endpoint_bound
from benchfill.llm import judge, rewrite
from benchfill.probes import ProbePanel, RolloutClient
from benchfill.store import Store

SPEC = BenchmarkSpec(name="toy", evaluator="toy", text_field="problem", answer_field="answer")
NO_WAIT = RetryConfig(max_attempts=3, initial_wait_s=0, max_wait_s=0, jitter_s=0)
LATENCY = 0.1


class YesGrader:
    def grade(self, response, item, spec=None):
        return "yes" in response


def llm(srv, concurrency: int | None = None) -> LLMConfig:
    extra = {} if concurrency is None else {"concurrency": concurrency}
    return LLMConfig(model="openai/m1", api_base=srv.base_url, timeout_s=5, max_repairs=0, **extra)


def verdict(reply: str):
    return True, reply


def child(reply: str):
    return {"problem": reply, "answer": "yes"}


async def judges(cfg: LLMConfig, count: int, tag: str = "j"):
    return await asyncio.gather(*(
        judge(cfg, {"problem": f"{tag}{i}"}, spec=SPEC, retry=NO_WAIT, format_prompt=lambda c, s: c["problem"],
              parse=verdict) for i in range(count)))


async def rewrites(cfg: LLMConfig, count: int):
    return await asyncio.gather(*(
        rewrite(cfg, {"problem": f"p{i}"}, 0.5, [], spec=SPEC, retry=NO_WAIT,
                format_prompt=lambda parent, z, refs, spec: parent["problem"], parse=child) for i in range(count)))


def test_judge_calls_fired_at_once_stay_within_the_configured_concurrency():
    with LoopbackOpenAI(latency_s=LATENCY) as srv:
        verdicts = asyncio.run(judges(llm(srv, concurrency=3), 12))
        assert all(v.valid for v in verdicts) and len(srv.successes) == 12
        assert srv.peak_inflight == 3  # bounded, and the bound is used


def test_rewriter_has_a_default_bound_and_it_holds():
    assert LLMConfig(model="openai/m").concurrency == 8
    with LoopbackOpenAI(latency_s=LATENCY) as srv:
        children = asyncio.run(rewrites(llm(srv), 20))
        assert all(c.child["answer"] == "yes" for c in children)
        assert srv.peak_inflight == 8


def test_probes_rewriter_and_judge_on_one_endpoint_share_its_bound(tmp_path):
    with LoopbackOpenAI(latency_s=LATENCY) as srv:
        panel = ProbePanel([ProbeConfig(name="p", base_url=srv.base_url + "/", model="m1", trials=2, concurrency=4)],
                           NO_WAIT)
        items = [{"id": f"q{i}", "problem": f"q{i}"} for i in range(10)]

        async def everything():
            async with RolloutClient(Store(tmp_path / "s.db"), panel, SPEC, YesGrader(),
                                     prompt_fn=lambda item, spec: item["problem"]) as rc:
                return await asyncio.gather(rc.rollouts(items), rewrites(llm(srv, 2), 10),
                                            judges(llm(srv, 3), 10))

        rolled, children, verdicts = asyncio.run(everything())
        assert len(rolled) == 10 and all(children) and all(verdicts)
        assert len(srv.successes) == 30
        assert srv.peak_inflight == 4  # the largest concurrency configured for the endpoint, for all


def test_a_bound_is_per_event_loop_and_widens_to_the_largest_cap():
    async def cap_of(cap: int) -> int:
        return endpoint_bound("http://h:1/v1/", cap).cap

    async def widened():
        a = endpoint_bound("http://h:1/v1/", 2)
        async with a, a:  # both slots held: a third waits, until the bound widens
            third = asyncio.ensure_future(a.__aenter__())
            await asyncio.sleep(0.01)
            waited = not third.done()
            b = endpoint_bound("http://h:1/v1", 3)
            await asyncio.wait_for(third, 1)
        return a is b, a.cap, waited

    assert asyncio.run(widened()) == (True, 3, True)
    assert asyncio.run(cap_of(2)) == 2  # a new event loop starts afresh
    with pytest.raises(ValueError, match="at least 1"):
        asyncio.run(cap_of(0))


def test_concurrency_is_read_from_the_config(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[rewriter]\nmodel = "openai/m"\nconcurrency = 5\n[judge]\nmodel = "openai/m"\n')
    cfg = load_config(path)
    assert cfg.rewriter.concurrency == 5 and cfg.judge.concurrency == 8
    with pytest.raises(Exception, match="rewriter.concurrency"):
        load_config(path, ["rewriter.concurrency=0"])


def test_an_endpoint_that_stops_answering_is_named_until_it_answers_again(monkeypatch, caplog):
    """A stalled endpoint holds each request for its whole timeout_s (600 s by default) with nothing said:
    the run looked hung. The watch beside every run names the endpoint, how many requests wait on it and for
    how long, and says when it answers again; a prompt endpoint gets no word."""
    import logging

    from benchfill import netguard

    monkeypatch.setattr("benchfill.limits.STALL_NOTICE_S", 0.3)

    with caplog.at_level(logging.WARNING, logger="benchfill.limits"), LoopbackOpenAI(latency_s=1.5) as slow:
        netguard.run(judges(llm(slow), 2))
    said = [r.getMessage() for r in caplog.records if r.name == "benchfill.limits"]
    assert said[0].startswith(f"waiting on {slow.base_url}: 2 requests in flight and no answer for "), said
    assert said[-1] == f"{slow.base_url} answers again"
    # later notices come at twice the silence of the one before (0.3, 0.6, 1.2 s), not at every one of the
    # ten polls; one more where a loaded machine stretches the 1.5 s past 2.4 s
    assert 2 <= len(said) <= 5, said

    # A prompt endpoint: 45 answers one after another over about 4.5 s, watched at every 1.5 s against a
    # 3 s notice. Any answer ends the silence, so no word comes; an endpoint whose answers did not count
    # would be named at 3 s. (The first answer of a run comes 0.02 s after its start here; at a 0.3 s
    # notice a loaded CI machine that held it back for 1 s named the prompt endpoint too.)
    monkeypatch.setattr("benchfill.limits.STALL_NOTICE_S", 3.0)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="benchfill.limits"), LoopbackOpenAI(latency_s=0.1) as fast:
        netguard.run(judges(llm(fast, concurrency=1), 45))
        assert len(fast.successes) == 45
    assert not [r for r in caplog.records if r.name == "benchfill.limits"]


def test_a_call_that_times_out_or_is_cancelled_is_no_answer(monkeypatch, caplog):
    """Only a reply ends the silence: calls that time out against a hung endpoint, or that a Ctrl-C
    cancels, leave it unanswered, and no "answers again" follows them."""
    import logging

    from benchfill import netguard

    monkeypatch.setattr("benchfill.limits.STALL_NOTICE_S", 0.3)
    once = RetryConfig(max_attempts=1, initial_wait_s=0, max_wait_s=0, jitter_s=0)

    async def timed_out(cfg):
        return await asyncio.gather(*(
            judge(cfg, {"problem": f"t{i}"}, spec=SPEC, retry=once, format_prompt=lambda c, s: c["problem"],
                  parse=verdict) for i in range(2)), return_exceptions=True)

    async def cancelled(cfg):
        task = asyncio.ensure_future(judges(cfg, 2, tag="c"))
        await asyncio.sleep(1.0)  # past the first notice
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="benchfill.limits"), LoopbackOpenAI(latency_s=3.0) as hung:
        cfg = LLMConfig(model="openai/m1", api_base=hung.base_url, timeout_s=1.0, max_repairs=0)
        netguard.run(timed_out(cfg))
        netguard.run(cancelled(llm(hung)))
    said = [r.getMessage() for r in caplog.records if r.name == "benchfill.limits"]
    assert sum(m.startswith(f"waiting on {hung.base_url}:") for m in said) >= 2, said
    assert not [m for m in said if m.endswith("answers again")], said


def test_a_pause_of_the_whole_process_is_not_blamed_on_the_endpoint(monkeypatch, caplog):
    """SIGSTOP (or a suspended laptop) for 75 s read "no answer for 75 s" from the in-process simulated
    world, stopped with the rest: the watch now takes a spell in which it could not run itself out of every
    endpoint's silence. A real silence that follows is still named."""
    import logging
    import types

    from benchfill import limits

    clock = {"t": 1000.0}
    # the module's own clock only: the event loop keeps the real one for its sleeps
    monkeypatch.setattr(limits, "time", types.SimpleNamespace(monotonic=lambda: clock["t"]))

    async def watched():
        bound = limits.endpoint_bound("http://127.0.0.1:9/v1", 2)
        assert bound.try_take()  # one request in flight from t = 1000
        watch = asyncio.create_task(limits.watch_stalls(notice_s=1.0))
        await asyncio.sleep(0)  # the watch reads the clock, then sleeps
        clock["t"] += 75.0  # the whole process stood still
        bound.quiet_since = clock["t"]  # and a call began as it came back, before the watch woke
        await asyncio.sleep(0.6)
        said = [r.getMessage() for r in caplog.records if r.name == "benchfill.limits"]
        clock["t"] += 2.0  # then two seconds of the endpoint's own silence (not pushed past them)
        await asyncio.sleep(0.6)
        watch.cancel()
        return said, [r.getMessage() for r in caplog.records if r.name == "benchfill.limits"]

    with caplog.at_level(logging.WARNING, logger="benchfill.limits"):
        during, after = asyncio.run(watched())
    assert during == []
    assert len(after) == 1 and after[0].startswith("waiting on http://127.0.0.1:9/v1: 1 request in flight and no "
                                                   "answer for 2 s"), after


def test_a_run_leaves_no_connection_of_litellms_open_when_its_loop_ends(tmp_path):
    """litellm caches its clients per event loop and closes them only at exit, on a loop of its own: a run
    against an endpoint that keeps connections alive (vLLM, any real server) left 16 open when its loop
    closed, and under `-W error::ResourceWarning` (a CI's setting) the command failed at exit, its work done."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = str(Path(__file__).parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r})\n"
        "from loopback_openai import LoopbackOpenAI\n"
        "from test_limits import judges, llm\n"
        "from benchfill import netguard\n"
        "with LoopbackOpenAI() as srv:\n"
        "    netguard.run(judges(llm(srv), 4))\n"
        "    netguard.run(judges(llm(srv), 4, tag='again'))  # a second run in the process: fresh clients\n"
        "    import gc; gc.collect()\n"
        "print('done')\n"
    )
    env = {**os.environ, "PYTHONWARNINGS": "error::ResourceWarning"}
    out = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-3000:]
    assert "ResourceWarning" not in out.stderr and "unclosed" not in out.stderr, out.stderr[-3000:]
