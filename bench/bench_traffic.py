"""Probe-rollout throughput against the simulated server (issue 3).

The server runs in its own process (``benchfill sim serve``) with a fixed latency per request; the
client (``RolloutClient``: openai SDK, per-endpoint semaphore, store-backed cache, real grading) keeps
``--inflight`` requests in flight. Ideal throughput is inflight / latency; the bar is 80% of it.
Client CPU is ``time.process_time()`` in this process only (the server's CPU is not counted).

    python bench/bench_traffic.py                       # 64 in flight, 50 ms, mmlu-pro items
    python bench/bench_traffic.py --requests 12000 --inflight 64 --latency-ms 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
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


async def run(args, url: str, items, spec, store_path: Path, seed: int):
    from benchfill.config import ProbeConfig, RetryConfig
    from benchfill.probes import ProbePanel, RolloutClient
    from benchfill.store import Store

    probes = [ProbeConfig(name=f"sim-probe-{j + 1:02d}", base_url=url, model=f"sim-probe-{j + 1:02d}",
                          trials=args.trials, concurrency=args.inflight, timeout_s=30) for j in range(args.probes)]
    panel = ProbePanel(probes, RetryConfig(max_attempts=3, initial_wait_s=0.05, jitter_s=0.05))
    store = Store(store_path)
    async with RolloutClient(store, panel, spec, transport=args.transport, workers=args.workers) as rc:
        # Warm-up on another seed: connections, grader, imports and, when the client spreads large
        # batches over worker processes, their start (timed apart, it is paid once per client).
        from benchfill.probes import POOL_MIN_CALLS

        w0 = time.perf_counter()
        await rc.rollouts(items[: POOL_MIN_CALLS // args.probes + 1], seed=10_000 + seed, phase="warmup")
        rc.warmup_s = time.perf_counter() - w0
        rc.stats = type(rc.stats)()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        await rc.rollouts(items, seed=seed)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0 + rc.stats.worker_cpu_s
        stats = rc.stats
        stats.parent_cpu_s = cpu - stats.worker_cpu_s
        workers = len(rc.pool.workers) if rc.pool is not None else 0
        stats.warmup_s, stats.workers = rc.warmup_s, workers
    store.close()
    return wall, cpu, stats


async def bare_sdk(args, url: str, items, spec):
    """The same requests through AsyncOpenAI.post alone: what any client built on the SDK can reach."""
    import openai
    from openai import _base_client

    from benchfill.prompts import format_solver_prompt

    hx = getattr(_base_client, "httpx2", None) or _base_client.httpx
    pool = hx.Limits(max_connections=args.inflight, max_keepalive_connections=args.inflight)
    client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0,
                                http_client=openai.DefaultAioHttpClient(limits=pool))
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
    ap.add_argument("--uvloop", action="store_true", help="run the client on uvloop (if installed)")
    args = ap.parse_args()

    from benchfill.benchmarks import get_benchmark

    data = shared_data()
    bench = get_benchmark(args.benchmark, data_dir=data)
    n_items = max(1, args.requests // args.probes)
    items = bench.items[4 : 4 + n_items]
    proc, url = start_server(data, args.benchmark, args.latency_ms, args.probes)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runner = asyncio.run
            if args.uvloop:
                import uvloop

                runner = uvloop.run
            wall, cpu, st = runner(run(args, url, items, bench.spec, Path(tmp) / "store.db", seed=1))
            # the same collection again: every call from the cache
            wall2, cpu2, st2 = runner(run(args, url, items, bench.spec, Path(tmp) / "store.db", seed=1))
            # the floor: the openai SDK alone, same server, same prompts, same in-flight, nothing else
            wall3, cpu3, n3 = runner(bare_sdk(args, url, items, bench.spec))
    finally:
        proc.terminate()
        proc.wait(10)
    ideal = args.inflight / (args.latency_ms / 1000) if args.latency_ms > 0 else float("inf")
    achieved = st.requests / wall
    rollouts = st.requests * args.trials
    print(f"benchmark {args.benchmark}: {len(items)} items x {args.probes} probes, n={args.trials}, "
          f"{args.inflight} in flight, {args.latency_ms:.0f} ms latency, loop {'uvloop' if args.uvloop else 'asyncio'}, "
          f"transport {args.transport}")
    print(f"probe calls made by {st.workers} worker processes" if st.workers else "probe calls made in one process",
          f"(warm-up batch, pool start included: {st.warmup_s:.2f} s)")
    print(f"requests {st.requests} (retries {st.retries}, failures {st.failures}) in {wall:.2f} s, "
          f"mean latency seen by the client {1000 * st.latency_s / max(st.calls, 1):.0f} ms")
    print(f"ideal     {ideal:8.0f} req/s")
    print(f"achieved  {achieved:8.0f} req/s")
    print(f"ratio     {achieved / ideal:8.2f}  (bar: 0.80)")
    print(f"client CPU {1000 * cpu / st.requests:.3f} ms per request, {1000 * cpu / rollouts:.3f} ms per rollout "
          f"(grading included), {100 * cpu / wall:.0f}% of one core"
          + (f"; this process {1000 * st.parent_cpu_s / st.requests:.3f} ms, workers "
             f"{1000 * st.worker_cpu_s / st.requests:.3f} ms per request" if st.workers else ""))
    print(f"bare openai SDK loop (no grading, no cache, same prompts): {n3 / wall3:.0f} req/s = "
          f"{n3 / wall3 / ideal:.2f} of ideal, {1000 * cpu3 / n3:.3f} ms CPU per request "
          f"(RolloutClient / bare SDK: {achieved / (n3 / wall3):.2f} of its throughput)")
    print(f"rerun from cache: {st2.cache_hits} hits, {st2.requests} requests, {wall2:.2f} s, "
          f"{1000 * cpu2 / max(st2.cache_hits, 1):.3f} ms CPU per cached call")


if __name__ == "__main__":
    main()
