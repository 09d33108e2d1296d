"""A run killed during its probe rollouts asks again, on the rerun, only for what was in flight.

DESIGN.md: a run stopped at any point resumes without losing or repeating paid work. So every completed
probe call is in the store before its reply is used, not held in a buffer a SIGKILL throws away.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback_openai import LoopbackOpenAI

from benchfill.benchmarks import BenchmarkSpec
from benchfill.config import ProbeConfig, RetryConfig
from benchfill.probes import ProbePanel, RolloutClient
from benchfill.store import Store

SPEC = BenchmarkSpec(name="toy", evaluator="toy")
ROOT = Path(__file__).resolve().parent.parent


def test_each_completed_call_is_in_the_store_before_its_reply_is_graded(tmp_path):
    """Read from a second connection, as a rerun after a kill would: the call a reply came from is there."""
    db = tmp_path / "s.db"
    items = [{"id": f"q{i}", "problem": f"question {i} of the batch"} for i in range(40)]

    class StoredFirst:
        """Grades "yes" as correct, and notes every reply whose call the store did not hold yet."""

        def __init__(self):
            self.graded, self.unstored = 0, []

        def grade(self, response, item, spec=None):
            with sqlite3.connect(db) as c:
                (n,) = c.execute("select count(*) from modelcall where request_json like ?",
                                 (f"%<problem>{item['problem']}</problem>%",)).fetchone()
            self.graded += 1
            if n != 1:
                self.unstored.append(item["id"])
            return "yes" in response

    grader = StoredFirst()
    with LoopbackOpenAI(models=("m1",), latency_s=0.01) as srv:
        pan = ProbePanel([ProbeConfig(name="p", base_url=srv.base_url, model="m1", trials=2, concurrency=4)],
                         RetryConfig(max_attempts=2, initial_wait_s=0, max_wait_s=0, jitter_s=0))

        async def go():
            async with RolloutClient(Store(db), pan, SPEC, grader,
                                     prompt_fn=lambda it, s: f"<problem>{it['problem']}</problem>") as rc:
                return await rc.rollouts(items)

        res = asyncio.run(go())
    assert len(res) == 40 and all(not r.error for r in res) and grader.graded >= 40
    assert grader.unstored == [], f"{len(grader.unstored)} replies graded before their call was stored"


def test_a_call_shared_with_a_batch_cancelled_once_its_reply_came_is_not_sent_again(tmp_path):
    """Two batches ask the same request at once; the one whose call it is gets cancelled just after the
    reply came, before the write: the other batch takes the reply from the cache, not from a new call."""
    item = {"id": "q0", "problem": "question 0"}
    with LoopbackOpenAI(models=("m1",), latency_s=0.05) as srv:
        pan = ProbePanel([ProbeConfig(name="p", base_url=srv.base_url, model="m1", trials=2)],
                         RetryConfig(max_attempts=2, initial_wait_s=0, max_wait_s=0, jitter_s=0))

        class Yes:
            def grade(self, response, item, spec=None):
                return "yes" in response

        async def go():
            async with RolloutClient(Store(tmp_path / "s.db"), pan, SPEC, Yes(),
                                     prompt_fn=lambda it, s: it["problem"]) as rc:
                first = asyncio.ensure_future(rc.rollouts([item]))
                await asyncio.sleep(0.01)  # its request is out
                second = asyncio.ensure_future(rc.rollouts([item]))
                add = rc.cache.add

                def add_then_cancel(row):  # the reply is in: the first batch is stopped right here
                    add(row)
                    first.cancel()

                rc.cache.add = add_then_cancel
                with pytest.raises(asyncio.CancelledError):
                    await first
                return await second

        (got,) = asyncio.run(go())
    assert len(srv.bodies) == 1 and got.cached and got.trials == 2 and not got.error


def _request_hash(raw: bytes) -> str:
    b = json.loads(raw)
    what = [b.get(k) for k in ("model", "messages", "seed", "n", "temperature", "top_p", "max_tokens")]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


@pytest.mark.slow
def test_a_run_killed_during_benchmark_rollouts_repeats_no_answered_call(tmp_path):
    """``run --backend openai`` against the simulated world on loopback, SIGKILLed once the server has
    answered 60 probe requests of the benchmark rollouts; the rerun sends again at most the requests that
    were in flight (4 per attempt, and the replies read in the loop's last turn), never the rest."""
    from benchfill.benchmarks import get_benchmark
    from benchfill.sim import SimServer, World

    bench = get_benchmark("demo")
    spec = bench.spec
    world = World.from_items(bench.items, evaluator=spec.evaluator, text_field=spec.text_field,
                             answer_field=spec.answer_field, n_probes=6, seed=0, latency_ms=10)
    srv = SimServer(world)
    answered: list[tuple[str, str]] = []  # (request hash, model) of each reply the server sent, in order
    chat = srv.app._chat

    async def logged(raw, receive, send):
        await chat(raw, receive, send)
        b = json.loads(raw)
        answered.append((_request_hash(raw), b["model"]))

    srv.app._chat = logged
    cap = 4
    with srv:
        url = srv.base_url
        probes = "".join(f'[[probes]]\nname = "{n}"\nbase_url = "{url}"\nmodel = "{n}"\ntrials = 8\n'
                         f"temperature = 1.0\nconcurrency = {cap}\n" for n in world.probes)
        roles = "".join(f'[{r}]\nmodel = "openai/{m}"\napi_base = "{url}"\nconcurrency = {cap}\n'
                        for r, m in (("rewriter", world.rewriter_model), ("judge", world.judge_model)))
        cfg = tmp_path / "panel.toml"
        cfg.write_text(probes + roles)
        args = [sys.executable, "-m", "benchfill", "run", "--benchmark", "demo", "--backend", "openai",
                "--config", str(cfg), "--gaps", "1", "--rounds", "1", "--parents", "2", "--children", "2",
                "--quiet", "--seed", "5", "--runs-dir", str(tmp_path / "runs")]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while len(answered) < 60 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        p.send_signal(signal.SIGKILL)
        p.wait()
        before = list(answered)
        probe_models = set(world.probes)
        assert 60 <= len(before) < 6 * len(bench.items) and {m for _, m in before} <= probe_models, \
            "not killed during the benchmark rollouts"
        subprocess.run(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, check=True, timeout=300)
        again = answered[len(before):]
    seen = {h for h, _ in before}
    repeated = [h for h, _ in again if h in seen]
    print(f"killed after {len(seen)} answered requests; the rerun sent {len(repeated)} of them again")
    assert len(repeated) <= 2 * cap, f"{len(repeated)} of {len(seen)} answered requests sent again after the kill"
    assert len(again) > len(repeated)  # the rerun did go on with the rest
