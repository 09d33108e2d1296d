"""Probe calls spread over worker processes, for batches too large for one event loop.

One asyncio loop making probe calls through the openai SDK tops out at about one CPU: building,
sending and reading each request costs ~0.6 ms of CPU, grading and caching more, so on a loaded
machine a single process falls behind well before its bound on requests in flight. ``ProbePool`` starts
``workers`` processes (``python -m benchfill.probe_pool``), each with its own loop and its own
``ProbeHttp`` (the same request and retry code as in-process), and hands each call to the worker
with the fewest calls outstanding. Each worker keeps its share of every endpoint's bound on
requests in flight, so a slot frees as soon as a reply is in. The parent keeps everything else:
the cache, grading and the store, so the store still has one writer and a
killed run resumes from its cache as before.

Protocol: one JSON object per line. Parent -> worker: ``{"panel": ..., "transport": ...}`` once,
then ``{"id", "probe", "body"}`` per call. Worker -> parent: ``{"ready": true}`` once, then per
call ``{"id", "texts", "usage", "latency", "requests", "retries"}`` or, when it failed,
``{"id", "error" | "refuses_n" | "bug", "requests", "retries"}``; ``{"cpu": seconds}``, the
worker's CPU time so far, leads a batch of replies at least every 50 ms and whenever the worker
falls idle. A worker exits when its
stdin closes, so it never outlives its parent. Credentials are never sent: a worker reads the
same environment variables the parent would.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import orjson

from benchfill.config import ProbeConfig, RetryConfig
from benchfill.errors import EndpointError
from benchfill.probes import (
    ProbeHttp,
    ProbePanel,
    RefusesN,
    RemoteCallError,
    _describe,
    _is_call_error,
)

log = logging.getLogger("benchfill.probe_pool")

_LINE_LIMIT = 1 << 28  # a reply carries every sample's full text; never split a message
_START_TIMEOUT_S = 120.0


class _Lines:
    """Lines written to a pipe once per turn of the event loop, not once each.

    A write on a pipe is a system call and wakes the reader; at a thousand messages a second each
    way, gathering those made in one loop iteration into one write saves a tenth of the CPU.
    ``first`` (when given) may make a leading line for each write (or return None).
    """

    def __init__(self, writer: Any, first: Any = None):
        self.writer = writer
        self.first = first
        self.buf: list[bytes] = []

    def add(self, line: bytes) -> None:
        if not self.buf:
            asyncio.get_running_loop().call_soon(self.flush)
        self.buf.append(line)

    def flush(self) -> None:
        if not self.buf or self.writer.is_closing():
            self.buf.clear()
            return
        head = self.first() if self.first is not None else None
        lines = [head, *self.buf] if head is not None else self.buf
        self.buf = []
        self.writer.write(b"".join(lines))


@dataclass
class _Worker:
    proc: asyncio.subprocess.Process
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    cpu_s: float = 0.0  # the worker's own CPU time, as of its latest report
    reader: asyncio.Task | None = None
    out: _Lines | None = None
    caps: dict[str, int] = field(default_factory=dict)  # its share of each endpoint's bound


class ProbePool:
    """``pool = await ProbePool.start(panel, workers)``; ``await pool.call(probe, body, counts)``."""

    def __init__(self, workers: list[_Worker]):
        self.workers = workers
        self._ids = itertools.count()
        self.cpu_s = 0.0  # summed over workers

    @classmethod
    async def start(cls, panel: ProbePanel, workers: int, transport: str = "lean") -> ProbePool:
        caps = panel.caps()
        workers = max(1, min(workers, max(caps.values())))
        # Each endpoint's bound on requests in flight is split between the workers (the first ones
        # get the remainder), and each worker enforces its share: then a slot frees the moment the
        # reply is in, without waiting for this process to read it.
        shares = [{url: cap // workers + (i < cap % workers) for url, cap in caps.items()} for i in range(workers)]
        procs = []
        try:
            for share in shares:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "benchfill.probe_pool", stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, limit=_LINE_LIMIT)
                procs.append(proc)
                proc.stdin.write(orjson.dumps({"panel": [p.model_dump() for p in panel.probes],
                                               "retry": panel.retry.model_dump(), "transport": transport,
                                               "caps": share}) + b"\n")
            for proc in procs:
                line = await asyncio.wait_for(proc.stdout.readline(), _START_TIMEOUT_S)
                if not line.startswith(b'{"ready"'):
                    raise EndpointError(f"probe worker {proc.pid} did not start (exit {proc.returncode}); "
                                        "see its error above, or set BENCHFILL_PROBE_WORKERS=0")
        except BaseException:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
            raise
        pool = cls([_Worker(p, out=_Lines(p.stdin), caps=share) for p, share in zip(procs, shares, strict=True)])
        for w in pool.workers:
            w.reader = asyncio.create_task(pool._read(w))
        return pool

    async def call(self, p: ProbeConfig, body: dict[str, Any], counts: Any) -> tuple[list[str], dict, float]:
        """Run ``ProbeHttp.call`` in the least busy worker; same results, same exceptions' meaning.

        Call it without holding a slot of the endpoint's bound: the workers keep that bound.
        """
        return self.unpack(await self.submit(p, body), counts)

    def submit(self, p: ProbeConfig, body: dict[str, Any]) -> asyncio.Future:
        """Send one call to the least busy worker; the future resolves to its reply (never raises)."""
        fut = asyncio.get_running_loop().create_future()
        w = min((w for w in self.workers if w.caps.get(p.base_url)), key=lambda w: len(w.pending) / w.caps[p.base_url])
        if w.proc.returncode is not None:
            fut.set_result({"error": f"probe worker {w.proc.pid} has exited (code {w.proc.returncode})"})
            return fut
        i = next(self._ids)
        w.pending[i] = fut
        w.out.add(orjson.dumps({"id": i, "probe": p.name, "body": body}) + b"\n")
        return fut

    @staticmethod
    def unpack(reply: dict, counts: Any) -> tuple[list[str], dict, float]:
        """A worker's reply as ``ProbeHttp.call`` would have returned or raised it."""
        counts.requests += reply.get("requests", 0)
        counts.retries += reply.get("retries", 0)
        if "texts" in reply:
            return reply["texts"], reply["usage"], reply["latency"]
        if reply.get("refuses_n"):
            raise RefusesN()
        if "bug" in reply:
            raise RuntimeError(f"a probe worker failed:\n{reply['bug']}")
        raise RemoteCallError(reply["error"])

    async def _read(self, w: _Worker) -> None:
        while True:
            line = await w.proc.stdout.readline()
            if not line:
                break
            try:
                reply = orjson.loads(line)
            except orjson.JSONDecodeError:  # not ours (the worker's stdout is the protocol alone)
                log.warning("probe worker %s wrote a line that is not a reply: %.120r", w.proc.pid, line)
                continue
            if "id" not in reply:  # {"cpu": s}, leading each batch of replies
                self.cpu_s += reply["cpu"] - w.cpu_s
                w.cpu_s = reply["cpu"]
                continue
            fut = w.pending.pop(reply["id"], None)
            if fut is not None and not fut.done():
                fut.set_result(reply)
        code = await w.proc.wait()
        for fut in w.pending.values():  # the worker died with calls in hand: they fail, a rerun resumes
            if not fut.done():
                fut.set_result({"error": f"probe worker {w.proc.pid} exited (code {code}) during the call"})
        w.pending.clear()

    async def close(self) -> None:
        for w in self.workers:
            if w.proc.stdin is not None and not w.proc.stdin.is_closing():
                w.proc.stdin.close()
        for w in self.workers:
            try:
                await asyncio.wait_for(w.proc.wait(), 10)
            except TimeoutError:
                w.proc.kill()
                await w.proc.wait()
            if w.reader is not None:
                await w.reader


# -- the worker process ---------------------------------------------------------------------------

class _Counts:
    __slots__ = ("requests", "retries")

    def __init__(self) -> None:
        self.requests = 0
        self.retries = 0


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    # The protocol gets its own copy of stdout, and fd 1 then points at stderr: a stray print from
    # any library in this process lands in the log instead of corrupting a reply.
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, protocol_out)
    out = asyncio.StreamWriter(transport, protocol, None, loop)

    init = orjson.loads(await reader.readline())
    panel = ProbePanel([ProbeConfig(**p) for p in init["panel"]], RetryConfig(**init["retry"]))
    probes = {p.name: p for p in panel.probes}
    http = ProbeHttp(panel, init.get("transport", "lean"))
    http.open()
    limits = {url: asyncio.Semaphore(cap) for url, cap in init["caps"].items() if cap > 0}
    out.write(b'{"ready":true}\n')
    # This worker's CPU time so far leads a batch of replies every 50 ms, and the batch that leaves
    # it idle: reading the process clock is a real system call (in a VM, ~8% of the work when it was
    # read for every batch).
    busy = {"calls": 0, "reported": 0.0}

    def cpu_report() -> bytes | None:
        now = time.monotonic()
        if busy["calls"] and now - busy["reported"] < 0.05:
            return None
        busy["reported"] = now
        return orjson.dumps({"cpu": time.process_time()}) + b"\n"

    replies = _Lines(out, first=cpu_report)
    tasks: set[asyncio.Task] = set()

    async def one(msg: dict) -> None:
        counts = _Counts()
        try:
            p = probes[msg["probe"]]
            async with limits[p.base_url]:
                texts, usage, latency = await http.call(p, msg["body"], counts)
            reply = {"texts": texts, "usage": usage, "latency": latency}
        except RefusesN:
            reply = {"refuses_n": True}
        except Exception as exc:  # noqa: BLE001  (sent back to the parent, which decides)
            reply = {"error": _describe(exc)} if _is_call_error(exc) else {"bug": traceback.format_exc()}
        reply.update(id=msg["id"], requests=counts.requests, retries=counts.retries)
        busy["calls"] -= 1
        replies.add(orjson.dumps(reply) + b"\n")

    while line := await reader.readline():
        busy["calls"] += 1
        task = asyncio.create_task(one(orjson.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    for task in list(tasks):  # stdin closed: the parent is done or gone
        task.cancel()
    await http.close()


def main() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from benchfill import netguard

    if netguard.enabled():  # held to loopback like its parent
        netguard.install()
    netguard.run(_serve())


if __name__ == "__main__":
    main()
