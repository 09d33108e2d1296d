"""Probe requests lost to the server's keep-alive timeout after a pause (the flaky traffic-totals test, s21).

A run's event loop stops sending while it does the run's own CPU work (the benchmark's fit, the search's
arithmetic); on a busy machine that takes seconds. The probe client keeps its idle connections in a pool. uvicorn, and so vLLM and the simulated
world, closes a connection idle for 5 s. When the pool keeps one for as long (the openai SDK's default
``keepalive_expiry`` is 5 s), a request sent on a connection idle for just under 5 s reaches a server that
closes it at that moment: the request fails and is retried. The run's figures survive (retries are
counted), but a retry waits out a backoff and the traffic counts depend on the machine's timing.

For each pause, the client sends a batch, blocks its event loop for the pause (CPU work), then sends another
batch on the pooled connections, and counts the requests of that batch that failed. The server is the
simulated world on loopback (``SimServer``, uvicorn's 5 s keep-alive as vLLM's). Columns, in one run:
the bare SDK client with its default pool, the same with benchfill's pool (``probe_http.pool_limits``),
and benchfill's ``RolloutClient`` as a run uses it (its retries).

    python bench/bench_keepalive.py                     # pauses around 4 s and 5 s, 16 requests each
    python bench/bench_keepalive.py --pauses 4.95 4.97 4.99 --batch 32
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from _common import shared_data

DEFAULT_PAUSES = [round(3.96 + 0.01 * k, 2) for k in range(9)] + [round(4.92 + 0.01 * k, 2) for k in range(13)]


async def bare(url: str, model: str, prompt: str, pauses: list[float], batch: int, limits) -> list[int]:
    import openai

    kw = {} if limits is None else {"limits": limits}
    client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0,
                                http_client=openai.DefaultAioHttpClient(**kw))

    def ask():
        return client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], n=1)

    failed = []
    try:
        for pause in pauses:
            await asyncio.gather(*(ask() for _ in range(batch)))
            time.sleep(pause)  # the loop held, as by the run's CPU work
            got = await asyncio.gather(*(ask() for _ in range(batch)), return_exceptions=True)
            failed.append(sum(isinstance(g, Exception) for g in got))
    finally:
        await client.close()
    return failed


async def product(url: str, world, bench, pauses: list[float], batch: int) -> list[int]:
    from benchfill.config import ProbeConfig, RetryConfig
    from benchfill.probes import ProbePanel, RolloutClient
    from benchfill.store import Store

    model = world.probes[0]
    panel = ProbePanel([ProbeConfig(name=model, model=model, trials=1, concurrency=batch, base_url=url)],
                       RetryConfig(initial_wait_s=0, max_wait_s=0, jitter_s=0))
    items = bench.items[: 2 * batch]
    retried = []
    with tempfile.TemporaryDirectory() as tmp:
        async with RolloutClient(Store(Path(tmp) / "s.db"), panel, bench.spec, record=False,
                                 prompt_fn=lambda it, spec: str(it["problem"])) as rc:
            for seed, pause in enumerate(pauses):  # a new seed: new calls, none from the cache
                await rc.rollouts(items[:batch], seed=seed)
                time.sleep(pause)
                before = rc.stats.retries
                await rc.rollouts(items[batch:], seed=seed)
                retried.append(rc.stats.retries - before)
    return retried


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pauses", type=float, nargs="+", default=DEFAULT_PAUSES, help="seconds the loop is held")
    ap.add_argument("--batch", type=int, default=16, help="requests sent after each pause (15 at most: aime24 has 30 items)")
    args = ap.parse_args()
    from benchfill.benchmarks import get_benchmark
    from benchfill.probe_http import pool_limits
    from benchfill.sim import SimServer, World

    bench = get_benchmark("aime24", data_dir=shared_data())
    batch = min(args.batch, len(bench.items) // 2)
    world = World.from_items(bench.items, evaluator="math", text_field="problem", answer_field="answer",
                             n_probes=4, seed=11, latency_ms=5)
    prompt, model = str(bench.items[0]["problem"]), world.probes[0]
    t0 = time.perf_counter()
    with SimServer(world) as srv:
        sdk = asyncio.run(bare(srv.base_url, model, prompt, args.pauses, batch, None))
        ours = asyncio.run(bare(srv.base_url, model, prompt, args.pauses, batch, pool_limits()))
        run = asyncio.run(product(srv.base_url, world, bench, args.pauses, batch))
    print(f"{batch} requests after each pause; server keep-alive 5 s (uvicorn's, as vLLM's); "
          f"benchfill's pool keeps a connection {pool_limits().keepalive_expiry:g} s")
    print(f"{'pause s':>8} {'SDK pool (5 s) failed':>22} {'benchfill pool failed':>22} {'RolloutClient retries':>22}")
    for p, a, b, c in zip(args.pauses, sdk, ours, run, strict=True):
        print(f"{p:>8.2f} {a:>22} {b:>22} {c:>22}")
    n = batch * len(args.pauses)
    print(f"{'all':>8} {f'{sum(sdk)} of {n}':>22} {f'{sum(ours)} of {n}':>22} {f'{sum(run)} of {n}':>22}")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
