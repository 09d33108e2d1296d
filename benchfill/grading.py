"""Grading probe replies without holding up the event loop.

Cheap graders (math answers, multiple choice) grade in place: microseconds a reply. The code
grader launches a sandbox and waits seconds for the programs; called inside the loop it would
stall every request in flight. A grader that says so (``Evaluator.offload``) runs in a pool of
worker processes (``concurrent.futures.ProcessPoolExecutor`` through ``loop.run_in_executor``), and
the replies asked for in one turn of the loop are graded together: one sandbox launch for all the
samples of a rollout, or of several, instead of one per sample. A batch is split over the workers
so that they all run. The same reply to the same item grades the same, so each is graded once.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from benchfill.workers import owned_pool

__all__ = ["Grading", "default_workers"]

_MIN_CHUNK = 8  # below this many replies a batch is not split further: a launch costs ~50 ms


def default_workers() -> int:
    """Grading processes: ``BENCHFILL_GRADE_WORKERS``, else one per CPU, at most 4."""
    env = os.environ.get("BENCHFILL_GRADE_WORKERS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            from benchfill.errors import ConfigError

            raise ConfigError(f"BENCHFILL_GRADE_WORKERS must be an integer, got {env!r}") from None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 4))


def _correct(grade: Any) -> bool:
    return bool(getattr(grade, "correct", grade))


def _pool_trouble(exc: BaseException) -> Exception:
    """One line for a pool of grading workers that could not start or lost a worker (the user's to fix)."""
    from benchfill.errors import BenchfillError

    if isinstance(exc, BrokenProcessPool):
        return BenchfillError(
            "a code grader's worker process ended abruptly: killed (out of memory?), and a rerun of the same "
            "command resumes; or, from code of your own, a worker could not start it: each worker imports the "
            "script (run it under `if __name__ == \"__main__\":`), and cannot import a grader defined in a "
            "notebook, in `python -c` or on stdin (define it in a module)")
    why = f"{type(exc).__name__}: {exc}"
    hint = (": TMPDIR is too long a path for the socket of its forkserver (at most about 100 bytes); set a "
            "shorter one" if "AF_UNIX path too long" in str(exc) else "")
    return BenchfillError(f"the code grader's worker processes could not start ({why}){hint}; rerun the same "
                          "command to resume")


def _grade_batch(evaluator: Any, pairs: list[tuple[str, dict]], spec: Any) -> list[bool]:
    """In a worker process: one ``grade_pairs`` call for the batch (one sandbox launch)."""
    return [_correct(g) for g in evaluator.grade_pairs(pairs, spec)]


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Grading:
    """``await grading.count_correct(item, texts)``; ``close()`` when done (stops the workers)."""

    def __init__(self, evaluator: Any, spec: Any, workers: int | None = None):
        self.evaluator = evaluator
        self.spec = spec
        self.workers = workers
        # (item id, digest of a reply) -> graded: the reply's text itself is in the store; held here, every
        # distinct reply of a long run stayed in memory until it ended (8 KB a reasoning reply)
        self._known: dict[tuple[str, bytes], bool] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._pending: list[tuple[dict, list[str], asyncio.Future]] = []
        self._batches: set[asyncio.Task] = set()  # held here: the loop keeps only weak references

    def grader(self) -> Any:
        if self.evaluator is None:
            from benchfill.evaluators import get_evaluator

            self.evaluator = get_evaluator(self.spec.evaluator)
        return self.evaluator

    async def count_correct(self, item: dict, texts: list[str]) -> int:
        """How many of ``texts`` (replies to ``item``) the grader passes."""
        ev = self.grader()
        keys = {t: (item["id"], _digest(t)) for t in texts}
        todo = [t for t in keys if keys[t] not in self._known]
        if todo and getattr(ev, "offload", False):
            for t, ok in zip(todo, await self._offload(item, todo), strict=True):
                self._known[keys[t]] = ok
        else:
            for t in todo:
                self._known[keys[t]] = _correct(ev.grade(t, item, self.spec))
        return sum(self._known[keys[t]] for t in texts)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # -- the pool -------------------------------------------------------------------------------
    def _offload(self, item: dict, texts: list[str]) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not self._pending:  # the first of this turn: the batch goes once the turn is over
            loop.call_soon(self._flush)
        self._pending.append((item, texts, fut))
        return fut

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        loop = asyncio.get_running_loop()
        try:
            if self._pool is None:
                workers = self.workers or default_workers()
                # forkserver: a clean process to fork workers from (this one may run threads)
                method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
                self._pool = owned_pool(workers, method)
                self.workers = workers
            pairs = [(t, item) for item, texts, _ in pending for t in texts]
            size = max(_MIN_CHUNK, math.ceil(len(pairs) / self.workers))
            parts = [loop.run_in_executor(self._pool, _grade_batch, self.evaluator, pairs[i : i + size], self.spec)
                     for i in range(0, len(pairs), size)]
        except Exception as exc:  # noqa: BLE001  (raised in a loop callback it reached no caller: every
            # count_correct waited forever while the loop printed the traceback at each batch)
            for _, _, fut in pending:
                if not fut.done():
                    fut.set_exception(_pool_trouble(exc))
            return
        task = asyncio.ensure_future(self._deliver(pending, parts))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    @staticmethod
    async def _deliver(pending: list, parts: list[asyncio.Future]) -> None:
        try:
            grades = [ok for part in await asyncio.gather(*parts) for ok in part]
        except BaseException as exc:  # noqa: BLE001  (the grader's error is each caller's error)
            for _, _, fut in pending:
                if fut.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(_pool_trouble(exc) if isinstance(exc, BrokenProcessPool) else exc)
            if not isinstance(exc, Exception):
                raise
            return
        start = 0
        for _, texts, fut in pending:
            if not fut.done():
                fut.set_result(grades[start : start + len(texts)])
            start += len(texts)
