"""The process's one event loop for litellm's calls (benchfill/llm_loop.py): who holds it, and a forked child."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from benchfill import llm_loop


def test_a_call_in_flight_holds_the_loops_clients_when_a_run_lets_go():
    # a caller of benchfill.llm outside any run had its connection closed under it when a run ended
    closed = []

    async def slow() -> int:
        await asyncio.sleep(0.5)
        return 1

    async def main() -> None:
        real = llm_loop._close_if_idle

        async def spy() -> None:
            closed.append(llm_loop._HOLDERS)
            await real()

        llm_loop._close_if_idle = spy
        try:
            call = asyncio.ensure_future(llm_loop.call(slow()))
            await asyncio.sleep(0.1)
            llm_loop.hold()  # a run starts and ends while the call is in flight
            await llm_loop.let_go()
            assert await call == 1
        finally:
            llm_loop._close_if_idle = real

    before = llm_loop._HOLDERS
    asyncio.run(main())
    assert closed == [before + 1]  # the run's let-go found the call holding: nothing closed under it
    assert llm_loop._HOLDERS == before


_FORKED = r"""
import asyncio, gc, os, sys
from benchfill import llm_loop

WORKER = None

async def park():  # as litellm's logging worker: a task waiting on its queue, replaced on a new loop
    global WORKER
    queue = asyncio.Queue()
    WORKER = (queue, asyncio.get_running_loop().create_task(queue.get()))
    return os.getpid()

asyncio.run(llm_loop.call(park()))
pid = os.fork()
if pid == 0:
    child = asyncio.run(llm_loop.call(park()))  # a loop of the child's own
    gc.collect()
    print("child", child == os.getpid(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", asyncio.run(llm_loop.call(park())) == os.getpid(), flush=True)
"""


def test_a_forked_child_makes_its_own_loop_and_lets_the_parents_tasks_go_quietly():
    out = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split("\n")[:2]) == ["child True", "parent True"]
    assert "Task was destroyed" not in out.stderr, out.stderr  # (the parent's loop has no thread in the child)
