"""Probe-rollout throughput against the simulated server (issue 3).

The server runs in its own process (``benchfill sim serve``) with a fixed latency per request; the
client (``RolloutClient``: openai SDK, store-backed cache, real grading; calls spread over probe
worker processes for large batches, as it decides by default) keeps ``--inflight`` requests in
flight. Ideal throughput is inflight / latency; the bar is 80% of it. The default client is timed
``--repeat`` times (5; fresh seeds, nothing cached) and the median ratio is judged; beside it, the
same collection with every call in one process, the bare openai SDK loop (the ceiling of one
process), and a rerun from the cache. Client CPU is ``time.process_time()`` of this process plus
that of its probe workers (the server's CPU is not counted, though it shares the machine).

    python bench/bench_traffic.py                       # 64 in flight, 50 ms, mmlu-pro items
    python bench/bench_traffic.py --requests 12000 --inflight 64 --latency-ms 50
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def shared_data() -> Path:
    for cand in (os.environ.get("BENCHFILL_SHARED_DATA"), ROOT.parent / "shared" / "data", ROOT / "shared" / "data"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    sys.exit("../shared/data not found; set BENCHFILL_SHARED_DATA")


def start_server(data: Path, benchmark: str, latency_ms: float, probes: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchfill", "sim", "serve", "--benchmark", benchmark, "--data-dir", str(data),
         "--port", "0", "--latency-ms", str(latency_ms), "--probes", str(probes)],
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


async def run(args, url: str, items, spec, store_path: Path, seeds: list[int], workers: int | None):
    """Warm up, then one timed collection per seed (each seed is a fresh, uncached collection)."""
    from benchfill.config import ProbeConfig, RetryConfig
    from benchfill.probes import POOL_MIN_CALLS, ProbePanel, RolloutClient
    from benchfill.store import Store

    probes = [ProbeConfig(name=f"sim-probe-{j + 1:02d}", base_url=url, model=f"sim-probe-{j + 1:02d}",
                          trials=args.trials, concurrency=args.inflight, timeout_s=30) for j in range(args.probes)]
    panel = ProbePanel(probes, RetryConfig(max_attempts=3, initial_wait_s=0.05, jitter_s=0.05))
    store = Store(store_path)
    out = []
    async with RolloutClient(store, panel, spec, transport=args.transport, workers=workers) as rc:
        # Warm-up on another seed: connections, grader, imports and, when the client spreads large
        # batches over worker processes, their start (timed apart: it is paid once per client).
        w0 = time.perf_counter()
        await rc.rollouts(items[: POOL_MIN_CALLS // args.probes + 1], seed=10_000 + seeds[0], phase="warmup")
        warmup_s = time.perf_counter() - w0
        for seed in seeds:
            rc.stats = type(rc.stats)()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            await rc.rollouts(items, seed=seed)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0 + rc.stats.worker_cpu_s
            st = rc.stats
            st.parent_cpu_s, st.warmup_s = cpu - st.worker_cpu_s, warmup_s
            st.workers = len(rc.pool.workers) if rc.pool is not None else 0
            out.append((wall, cpu, st))
    store.close()
    return out


async def bare_sdk(args, url: str, items, spec):
    """The same requests through AsyncOpenAI.post alone: what any client built on the SDK can reach."""
    import httpx2 as hx
    import openai

    from benchfill.prompts import format_solver_prompt

    pool = hx.Limits(max_connections=args.inflight, max_keepalive_connections=args.inflight)
    if args.transport == "lean":
        from benchfill.http import LeanHttpClient

        http = LeanHttpClient(max_connections=args.inflight)
    else:
        http = (openai.DefaultAioHttpClient if args.transport == "aiohttp" else openai.DefaultAsyncHttpxClient)(
            limits=pool)
    client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0, http_client=http)
    bodies = [{"model": f"sim-probe-{j + 1:02d}", "n": args.trials, "seed": 7,
               "messages": [{"role": "user", "content": format_solver_prompt(item, spec)}]}
              for item in items for j in range(args.probes)]
    gate = asyncio.Semaphore(args.inflight)

    async def one(body):
        async with gate:
            return (await client.post("/chat/completions", body=body, cast_to=hx.Response)).content

    await asyncio.gather(*(one(b) for b in bodies[:64]))  # warm the pool
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(b) for b in bodies))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await client.close()
    return wall, cpu, len(bodies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="mmlu-pro")
    ap.add_argument("--requests", type=int, default=9600, help="requests to time (items x probes)")
    ap.add_argument("--probes", type=int, default=12)
    ap.add_argument("--trials", type=int, default=4, help="samples per request (n)")
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--workers", type=int, default=None,
                    help="probe worker processes (default: as RolloutClient decides; 0: all in this process)")
    ap.add_argument("--transport", choices=("lean", "aiohttp", "httpx"), default="lean",
                    help="HTTP transport under the openai SDK")
    ap.add_argument("--asyncio", action="store_true",
                    help="run the client on asyncio's loop (default: as benchfill runs it, on uvloop where installed)")
    ap.add_argument("--repeat", type=int, default=5, help="timed collections of the default client (median reported)")
    args = ap.parse_args()

    from benchfill.benchmarks import get_benchmark

    data = shared_data()
    bench = get_benchmark(args.benchmark, data_dir=data)
    n_items = max(1, args.requests // args.probes)
    items = bench.items[4 : 4 + n_items]
    proc, url = start_server(data, args.benchmark, args.latency_ms, args.probes)
    ideal = args.inflight / (args.latency_ms / 1000) if args.latency_ms > 0 else float("inf")
    rows = []

    def row(name: str, wall: float, cpu: float, requests: int, extra: str = "") -> float:
        ratio = requests / wall / ideal
        rows.append(f"{name:44s} {requests / wall:7.0f} {ratio:6.2f} {1000 * cpu / requests:8.3f} "
                    f"{1000 * cpu / (requests * args.trials):8.3f}  {extra}")
        return ratio

    try:
        with tempfile.TemporaryDirectory() as tmp:
            from benchfill import netguard

            runner = asyncio.run if args.asyncio else netguard.run
            seeds = list(range(1, args.repeat + 1))
            pooled = runner(run(args, url, items, bench.spec, Path(tmp) / "a.db", seeds, args.workers))
            # side by side: every call in this one process
            single = runner(run(args, url, items, bench.spec, Path(tmp) / "b.db", seeds[:1], 0))
            # the same collection again: every call from the cache
            (wall2, cpu2, st2), = runner(run(args, url, items, bench.spec, Path(tmp) / "a.db", seeds[:1], 0))
            # the ceiling of one process: the openai SDK alone, same server, prompts and in-flight, nothing else
            wall3, cpu3, n3 = runner(bare_sdk(args, url, items, bench.spec))
    finally:
        proc.terminate()
        proc.wait(10)
    st0 = pooled[0][2]
    import importlib.util

    from benchfill import netguard

    uv = not args.asyncio and not netguard.enabled() and importlib.util.find_spec("uvloop") is not None
    loop_name = "uvloop (as benchfill runs)" if uv else "asyncio"
    print(f"benchmark {args.benchmark}: {len(items)} items x {args.probes} probes = {st0.requests} requests, "
          f"n={args.trials}, {args.inflight} in flight, {args.latency_ms:.0f} ms latency, ideal {ideal:.0f} req/s; "
          f"loop {loop_name}, transport {args.transport}, {os.cpu_count()} CPUs")
    print(f"{'':44s} {'req/s':>7s} {'ratio':>6s} {'CPU ms':>8s} {'ms/roll':>8s}  (CPU: this process + workers, "
          "per request / per rollout, grading included)")
    ratios = []
    for k, (wall, cpu, st) in enumerate(pooled):
        where = f"{st.workers} worker processes" if st.workers else "one process"
        extra = (f"this process {1000 * st.parent_cpu_s / st.requests:.3f} + workers "
                 f"{1000 * st.worker_cpu_s / st.requests:.3f} ms; " if st.workers else "")
        ratios.append(row(f"RolloutClient, {where}, run {k + 1}", wall, cpu, st.requests,
                          extra + f"client-side latency {1000 * st.latency_s / max(st.calls, 1):.0f} ms, "
                          f"retries {st.retries}, failures {st.failures}"))
    wall, cpu, st = single[0]
    row("RolloutClient, one process (workers=0)", wall, cpu, st.requests,
        f"client-side latency {1000 * st.latency_s / max(st.calls, 1):.0f} ms")
    row(f"bare AsyncOpenAI.post loop ({args.transport}), one process", wall3, cpu3, n3,
        "no grading, no cache: the ceiling of one process")
    print("\n".join(rows))
    med = statistics.median(ratios)
    print(f"median ratio of {len(ratios)} runs: {med:.2f} (bar: 0.80) -> {'met' if med >= 0.80 else 'NOT met'}; "
          f"worker start + warm-up batch {st0.warmup_s:.2f} s (once per client)")
    print(f"rerun from cache: {st2.cache_hits} hits, {st2.requests} requests, {wall2:.2f} s, "
          f"{1000 * cpu2 / max(st2.cache_hits, 1):.3f} ms CPU per cached call")


if __name__ == "__main__":
    main()
