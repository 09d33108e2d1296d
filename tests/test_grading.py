"""Grading off the event loop: code replies graded in batches in worker processes while the loop runs on."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from loopback_openai import LoopbackOpenAI, reply

from benchfill.benchmarks import BenchmarkSpec
from benchfill.config import ProbeConfig, RetryConfig
from benchfill.evaluators import Evaluator, Grade, get_evaluator
from benchfill.grading import Grading
from benchfill.probes import ProbePanel, RolloutClient
from benchfill.store import Store

ITEM = {"id": "add", "prompt": "def add(a, b):\n", "entry_point": "add",
        "test": "def check(f):\n    assert f(2, 3) == 5\n"}


class SlowYes(Evaluator):
    """Passes replies with "yes"; each batch takes ``delay`` seconds and leaves a line in ``log_dir``."""

    name = "slow_yes"
    offload = True

    def __init__(self, log_dir: str, delay: float = 0.3):
        self.log_dir = log_dir
        self.delay = delay

    def grade_pairs(self, pairs, spec=None):
        time.sleep(self.delay)  # a blocking grader: in the loop's thread this would stall every call
        with open(Path(self.log_dir) / f"{os.getpid()}-{time.monotonic_ns()}", "w") as fh:
            fh.write(str(len(pairs)))
        return [Grade("yes" in r, None, "") for r, _ in pairs]


async def _longest_stall(work) -> tuple[object, float]:
    """Run ``work`` while a 10 ms ticker measures the longest the event loop went without turning."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.02)  # the ticker is running before the work starts
    try:
        result = await work
    finally:
        done.set()
        await ticker  # its last gap is the one the work ended in
    return result, max(gaps)


def test_code_is_graded_in_worker_processes_and_the_loop_stays_free():
    sleepy = "    import time\n    time.sleep(0.3)\n    return a + b\n"
    wrong = "    import time\n    time.sleep(0.3)\n    return a - b\n"
    texts = [sleepy, wrong, sleepy, sleepy, wrong, sleepy]
    grading = Grading(get_evaluator("code", timeout=5.0, cpu_seconds=5), None, workers=2)

    async def go():
        t0 = time.perf_counter()
        counted = await grading.count_correct(ITEM, texts)
        return counted, time.perf_counter() - t0

    try:
        (correct, took), stall = asyncio.run(_longest_stall(go()))
    finally:
        grading.close()
    assert correct == 4  # the duplicates were graded once and counted each time
    assert took > 0.6  # the programs did run (two distinct ones of 0.3 s at least, and a sandbox launch)
    assert stall < 0.25, f"the event loop stalled {stall:.3f} s while code was graded"


def test_replies_asked_together_go_in_one_batch_split_over_the_workers(tmp_path):
    grading = Grading(SlowYes(str(tmp_path), delay=0.2), None, workers=2)
    items = [{"id": f"q{i}"} for i in range(4)]

    async def go():
        return await asyncio.gather(*(grading.count_correct(it, [f"yes {i}", f"no {i}", f"yes {i}!", "no"] * 2)
                                      for i, it in enumerate(items)))

    try:
        counts, stall = asyncio.run(_longest_stall(go()))
    finally:
        grading.close()
    assert counts == [4, 4, 4, 4]
    sizes = sorted(int(p.read_text()) for p in tmp_path.iterdir())
    assert sizes == [8, 8]  # 16 distinct replies of 4 rollouts: one batch, in two parts, not 16 calls
    assert len({p.name.split("-")[0] for p in tmp_path.iterdir()}) == 2  # on two worker processes
    assert stall < 0.15


def test_rollouts_grade_off_the_loop_with_the_same_results(tmp_path):
    spec = BenchmarkSpec(name="toy", evaluator="slow_yes")
    items = [{"id": f"q{i}", "problem": f"question {i}"} for i in range(6)]

    def prompt(item, spec):
        return item["problem"]

    with LoopbackOpenAI(latency_s=0.05) as srv:
        panel = ProbePanel([ProbeConfig(name="p", base_url=srv.base_url, model="m1", trials=4, concurrency=6)],
                           RetryConfig(max_attempts=2, initial_wait_s=0, max_wait_s=0, jitter_s=0))

        async def go():
            async with RolloutClient(Store(tmp_path / "s.db"), panel, spec, SlowYes(str(tmp_path)),
                                     prompt_fn=prompt, grade_workers=2) as rc:
                return await _longest_stall(rc.rollouts(items, seed=4))

        results, stall = asyncio.run(go())
    want = {it["id"]: sum("yes" in reply("m1", prompt(it, spec), 4, k) for k in range(4)) for it in items}
    assert {r.item_id: r.correct for r in results} == want and all(r.trials == 4 for r in results)
    assert stall < 0.15


class Dies(SlowYes):
    """A grader whose worker process is killed mid-batch (as the OOM killer would)."""

    def grade_pairs(self, pairs, spec=None):
        os._exit(9)


def test_a_pool_that_cannot_start_or_loses_a_worker_fails_the_callers_in_one_line(tmp_path, monkeypatch):
    # an error raised while the batch was handed to the pool (a TMPDIR too long for the forkserver's socket)
    # went to the loop's exception handler: every caller waited forever, the traceback printed at each batch
    import pytest

    from benchfill import grading as grading_mod
    from benchfill.errors import BenchfillError

    def no_pool(workers, method):
        raise OSError("AF_UNIX path too long")

    monkeypatch.setattr(grading_mod, "owned_pool", no_pool)
    grading = Grading(SlowYes(str(tmp_path)), None, workers=2)

    async def go(g):
        return await asyncio.wait_for(g.count_correct({"id": "q"}, ["yes", "no"]), timeout=30)

    with pytest.raises(BenchfillError, match=r"could not start \(OSError: AF_UNIX path too long\): TMPDIR is too "
                                             r"long a path .*; rerun the same command to resume$"):
        asyncio.run(go(grading))
    monkeypatch.undo()
    grading = Grading(Dies(str(tmp_path)), None, workers=1)
    try:
        with pytest.raises(BenchfillError, match=r"worker process ended abruptly: killed .*if __name__ == "
                                                 r"\"__main__\":.*define it in a module\)$"):
            asyncio.run(go(grading))
    finally:
        grading.close()


def test_graded_replies_are_remembered_by_digest_not_by_their_text():
    """A long run grades thousands of distinct replies: what is kept of each is a digest, not its text (the
    text is in the store); a reply graded again is still answered from memory."""
    class Counting(Evaluator):
        name = "counting"

        def __init__(self):
            self.calls = 0

        def grade(self, reply, item, spec=None):
            self.calls += 1
            return Grade("yes" in reply, None, "")

    ev = Counting()
    g = Grading(ev, BenchmarkSpec(name="t", text_field="q", answer_field="a", evaluator="counting"))
    long_replies = [("yes " if k % 2 else "no ") + "x" * 8000 + str(k) for k in range(20)]
    assert asyncio.run(g.count_correct({"id": "q1"}, long_replies + long_replies[:5])) == 10 + 2
    assert ev.calls == 20
    assert asyncio.run(g.count_correct({"id": "q1"}, long_replies[:4])) == 2 and ev.calls == 20
    assert all(len(reply_key) <= 32 for _, reply_key in g._known)
