"""Probe-rollout throughput against the simulated server, in realistic terms (issues 3 and 11).

A vLLM reply with n samples takes seconds (issue 11: 64 requests in flight make about 13 a second,
so about 5 s each). The server (``benchfill sim serve``, its own process) answers each request after
``--latency-s`` seconds on average (5), spread uniformly by ``--jitter`` (+-50%: replies differ in
length), and the client keeps ``--inflight`` requests in flight (256). Ideal throughput is
inflight / latency. Throughput is counted in the steady state: the calls completed between one
maximal latency after the start and one before the end (ramp-up and drain excluded), sampled every
0.25 s. The goal is at least 95% of ideal with the client's CPU under 10% of one core.

The client is ``RolloutClient`` as a run uses it: the openai SDK's typed ``chat.completions.create``
on its aiohttp client (``DefaultAioHttpClient``), one event loop, the store-backed cache and real
grading (multiple choice on mmlu-pro). Beside it, in the same run: the bare SDK loop on each of the
SDK's transports (same requests, nothing else), a rerun from the cache, and, for information, the
old figure of issue 3 (50 ms latency, 64 in flight, no jitter): there the simulated server and the
SDK's CPU per request set the pace, not the latency. And a probe fleet (issue 15): the same
collection against two server processes as replicas of every probe, each bounded to half the
requests in flight, so the ideal is the same; its line says how the requests split. Client CPU is ``time.process_time()`` of this process over the whole timed collection
(the server's is not counted, though it shares the machine); as a share of one core it is CPU
seconds over wall seconds.

    python bench/bench_traffic.py                       # 256 in flight, 5 s +- 50%, 6 rounds of requests
    python bench/bench_traffic.py --latency-s 2 --rounds 8 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import shared_data

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))




def start_server(data: Path, benchmark: str, latency_ms: float, probes: int,
                 jitter_ms: float = 0.0) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchfill", "sim", "serve", "--benchmark", benchmark, "--data-dir", str(data),
         "--port", "0", "--latency-ms", str(latency_ms), "--latency-jitter-ms", str(jitter_ms),
         "--probes", str(probes)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("serving "):
            return proc, line.split()[1]
        if not line and proc.poll() is not None:
            break
    proc.kill()
    sys.exit("simulated server did not start")


def panel(url: str | list[str], probes: int, trials: int, inflight: int):
    """The simulated panel at one endpoint, or at a fleet of replicas (a list of URLs) sharing ``inflight``."""
    from benchfill.config import ProbeConfig, RetryConfig
    from benchfill.probes import ProbePanel

    if isinstance(url, str):
        where = {"base_url": url, "concurrency": inflight}
    else:
        where = {"replicas": url, "concurrency": max(1, inflight // len(url))}
    return ProbePanel([ProbeConfig(name=f"sim-probe-{j + 1:02d}", model=f"sim-probe-{j + 1:02d}",
                                   trials=trials, timeout_s=120, **where) for j in range(probes)],
                      RetryConfig(max_attempts=3, initial_wait_s=0.05, jitter_s=0.05))


class Progress:
    """Completed calls sampled every 0.25 s: ``steady(margin)`` is the rate between ``margin`` seconds
    after the first sample and ``margin`` before the last (ramp-up and drain left out)."""

    def __init__(self, count):
        self.count = count
        self.samples: list[tuple[float, int]] = []

    async def watch(self, work):
        async def sample():
            while True:
                self.samples.append((time.perf_counter(), self.count()))
                await asyncio.sleep(0.25)

        sampler = asyncio.ensure_future(sample())
        try:
            return await work
        finally:
            sampler.cancel()
            self.samples.append((time.perf_counter(), self.count()))

    def steady(self, margin: float) -> float:
        t0, t1 = self.samples[0][0] + margin, self.samples[-1][0] - margin
        inside = [(t, n) for t, n in self.samples if t0 <= t <= t1]
        if len(inside) < 2:
            return float("nan")  # too short a run for a steady state: raise --rounds
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


async def collect(url: str | list[str], args, inflight: int, items, spec, store_path: Path, seeds: list[int]):
    """Warm up, then one timed collection per seed (each seed a fresh, uncached collection)."""
    from benchfill.probes import RolloutClient
    from benchfill.store import Store

    store = Store(store_path)
    out = []
    async with RolloutClient(store, panel(url, args.probes, args.trials, inflight), spec) as rc:
        await rc.rollouts(items[:2], seed=10_000 + seeds[0], phase="warmup")  # imports, grader, connections
        for seed in seeds:
            rc.stats = type(rc.stats)()
            progress = Progress(lambda: rc.stats.calls)
            wall0, cpu0 = time.perf_counter(), time.process_time()
            await progress.watch(rc.rollouts(items, seed=seed))
            out.append((time.perf_counter() - wall0, time.process_time() - cpu0, rc.stats, progress))
    store.close()
    return out


async def bare_sdk(url: str, args, inflight: int, items, spec, transport: str):
    """The same requests through ``AsyncOpenAI.chat.completions.create`` alone, same bound in flight."""
    import httpx2
    import openai

    from benchfill.prompts import format_solver_prompt

    pool = httpx2.Limits(max_connections=inflight, max_keepalive_connections=inflight)
    http = (openai.DefaultAioHttpClient if transport == "aiohttp" else openai.DefaultAsyncHttpxClient)(limits=pool)
    client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0, timeout=120, http_client=http)
    asks = [(f"sim-probe-{j + 1:02d}", format_solver_prompt(item, spec)) for item in items for j in range(args.probes)]
    gate = asyncio.Semaphore(inflight)

    done = [0]

    async def one(model: str, prompt: str, seed: int) -> int:
        async with gate:
            reply = await client.chat.completions.create(model=model, n=args.trials, seed=seed,
                                                         messages=[{"role": "user", "content": prompt}])
            done[0] += 1
            return len(reply.choices)

    await asyncio.gather(*(one(m, p, 5) for m, p in asks[:8]))  # warm up
    progress = Progress(lambda: done[0])
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await progress.watch(asyncio.gather(*(one(m, p, 7) for m, p in asks)))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await client.close()
    return wall, cpu, len(asks), progress


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="mmlu-pro")
    ap.add_argument("--probes", type=int, default=12)
    ap.add_argument("--trials", type=int, default=8, help="samples per request (n)")
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--latency-s", type=float, default=5.0, help="mean seconds per request with n samples")
    ap.add_argument("--jitter", type=float, default=0.5, help="latency spread, a share of --latency-s (uniform)")
    ap.add_argument("--rounds", type=int, default=6, help="requests timed = rounds x inflight")
    ap.add_argument("--repeat", type=int, default=3, help="timed collections (median judged)")
    ap.add_argument("--asyncio", action="store_true",
                    help="run the client on asyncio's loop (default: as benchfill runs it, on uvloop where installed)")
    ap.add_argument("--no-info", action="store_true", help="skip the 50 ms / 64 in flight figure")
    ap.add_argument("--no-fleet", action="store_true", help="skip the fleet of two replicas")
    args = ap.parse_args()

    from benchfill import netguard
    from benchfill.benchmarks import get_benchmark

    data = shared_data()
    bench = get_benchmark(args.benchmark, data_dir=data)
    n_items = max(1, args.rounds * args.inflight // args.probes)
    items = bench.items[4 : 4 + n_items]
    runner = asyncio.run if args.asyncio else netguard.run
    seeds = list(range(1, args.repeat + 1))
    rows: list[str] = []

    margin = args.latency_s * (1 + args.jitter)

    def row(name: str, wall: float, cpu: float, requests: int, ideal: float, progress: Progress | None,
            extra: str = "") -> tuple[float, float]:
        rate = progress.steady(margin) if progress is not None else requests / wall
        ratio, core = rate / ideal, cpu / wall
        rows.append(f"{name:46s} {rate:7.1f} {ratio:7.3f} {requests / wall / ideal:7.3f} {core:8.3f} "
                    f"{1000 * cpu / requests:8.3f}  {extra}")
        return ratio, core

    proc, url = start_server(data, args.benchmark, 1000 * args.latency_s, args.probes,
                             1000 * args.latency_s * args.jitter)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            timed = runner(collect(url, args, args.inflight, items, bench.spec, Path(tmp) / "a.db", seeds))
            (wall2, cpu2, st2, _), = runner(collect(url, args, args.inflight, items, bench.spec, Path(tmp) / "a.db",
                                                 seeds[:1]))
            bare = {t: runner(bare_sdk(url, args, args.inflight, items, bench.spec, t)) for t in ("aiohttp", "httpx")}
    finally:
        proc.terminate()
        proc.wait(10)
    fleet = None
    if not args.no_fleet:  # two server processes, each a replica of every probe, half the bound each
        servers = [start_server(data, args.benchmark, 1000 * args.latency_s, args.probes,
                                1000 * args.latency_s * args.jitter) for _ in range(2)]
        try:
            with tempfile.TemporaryDirectory() as tmp:
                (fleet,) = runner(collect([u for _, u in servers], args, args.inflight, items, bench.spec,
                                          Path(tmp) / "f.db", seeds[:1]))
        finally:
            for p, _ in servers:
                p.terminate()
                p.wait(10)
    info = None
    if not args.no_info:  # issue 3's figure: 50 ms, 64 in flight, 9,600 requests
        proc, url = start_server(data, args.benchmark, 50.0, args.probes)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                info_items = bench.items[4 : 4 + 9600 // args.probes]
                (info,) = runner(collect(url, argparse.Namespace(probes=args.probes, trials=4), 64, info_items,
                                         bench.spec, Path(tmp) / "c.db", [1]))
        finally:
            proc.terminate()
            proc.wait(10)

    import importlib.util

    uv = not args.asyncio and not netguard.enabled() and importlib.util.find_spec("uvloop") is not None
    ideal = args.inflight / args.latency_s
    requests = timed[0][2].requests
    print(f"benchmark {args.benchmark}: {len(items)} items x {args.probes} probes = {requests} requests, "
          f"n={args.trials}, {args.inflight} in flight, {args.latency_s:g} s +- {100 * args.jitter:.0f}% latency, "
          f"ideal {ideal:.1f} req/s; loop {'uvloop (as benchfill runs)' if uv else 'asyncio'}, {os.cpu_count()} CPUs")
    print(f"{'':46s} {'req/s':>7s} {'ideal':>7s} {'whole':>7s} {'core':>8s} {'CPU ms':>8s}  (steady-state rate and "
          "its share of ideal; share over the whole run, ramps included; client CPU as a share of one core; "
          "CPU per request, grading included)")
    ratios, cores = [], []
    for k, (wall, cpu, st, progress) in enumerate(timed):
        r, c = row(f"RolloutClient (aiohttp), run {k + 1}", wall, cpu, st.requests, ideal, progress,
                   f"retries {st.retries}, failures {st.failures}")
        ratios.append(r)
        cores.append(c)
    for transport, (wall, cpu, n, progress) in bare.items():
        row(f"bare chat.completions.create loop ({transport})", wall, cpu, n, ideal, progress,
            "no grading, no cache, no store")
    if fleet is not None:
        wall, cpu, st, progress = fleet
        split = " / ".join(str(c["calls"]) for c in st.replicas.values())
        row("RolloutClient, fleet of 2, half bound each", wall, cpu, st.requests, ideal, progress,
            f"calls per replica {split}, ejections {sum(c['ejections'] for c in st.replicas.values())}")
    if info is not None:
        wall, cpu, st, _ = info
        row("information: 50 ms latency, 64 in flight, n=4", wall, cpu, st.requests, 64 / 0.05, None,
            "whole run, information only (issue 3's figure)")
    print("\n".join(rows))
    med_r, med_c = statistics.median(ratios), statistics.median(cores)
    met = med_r >= 0.95 and med_c < 0.10
    print(f"median of {len(ratios)} runs: {100 * med_r:.1f}% of ideal, client CPU {100 * med_c:.1f}% of one core "
          f"(goal: >= 95% and < 10%) -> {'met' if met else 'NOT met'}")
    print(f"rerun from cache: {st2.cache_hits} hits, {st2.requests} requests, {wall2:.2f} s, "
          f"{1000 * cpu2 / max(st2.cache_hits, 1):.3f} ms CPU per cached call")


if __name__ == "__main__":
    main()
