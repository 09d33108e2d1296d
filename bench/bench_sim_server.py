"""Throughput of one simulated-world server process: 64 requests in flight at 50 ms latency.

Starts ``benchfill sim serve`` in its own process (as a user would) and drives it with a lean
async keep-alive load of probe requests (n samples each) for a fixed time. The ideal is
in_flight / latency requests per second (64 / 0.05 = 1,280/s); prints achieved/ideal.

    python bench/bench_sim_server.py [--seconds 8] [--in-flight 64] [--latency-ms 50] [--n 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import shared_data


async def drive(url: str, prompts: list[str], seconds: float, in_flight: int, n: int) -> tuple[int, int, float]:
    """A lean keep-alive HTTP/1.1 client on raw asyncio streams, so the load generator is not the limit."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    done = errors = 0
    stop = time.perf_counter() + seconds

    async def worker(k: int) -> None:
        nonlocal done, errors
        reader, writer = await asyncio.open_connection(host, int(port))
        i = k
        while time.perf_counter() < stop:
            body = json.dumps({"model": f"sim-probe-{1 + i % 12:02d}", "n": n, "seed": i, "temperature": 0.7,
                               "messages": [{"role": "user",
                                             "content": f"<problem>{prompts[i % len(prompts)]}</problem>"}]}).encode()
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            payload = await reader.readexactly(length)
            if head.startswith(b"HTTP/1.1 200") and len(json.loads(payload)["choices"]) == n:
                done += 1
            else:
                errors += 1
            i += in_flight
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(in_flight)))
    return done, errors, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--n", type=int, default=8)
    args = ap.parse_args()
    data = shared_data()
    prompts = [json.loads(line)["problem"] for line in open(data / "aime24" / "items.jsonl")]
    proc = subprocess.Popen([sys.executable, "-m", "benchfill", "sim", "serve", "--benchmark", "aime24",
                             "--data-dir", str(data), "--port", "0", "--latency-ms", str(args.latency_ms)],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = ""
        while not url:
            line = proc.stdout.readline()
            if not line:
                sys.exit("sim serve failed to start")
            if line.startswith("serving "):
                url = line.split()[-1]
        server_cpu0 = _cpu_seconds(proc.pid)
        done, errors, wall = asyncio.run(drive(url, prompts, args.seconds, args.in_flight, args.n))
        server_cpu = _cpu_seconds(proc.pid) - server_cpu0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    ideal = args.in_flight / (args.latency_ms / 1000)
    rate = done / wall
    print(f"in flight {args.in_flight}, latency {args.latency_ms:.0f} ms, n={args.n}: {done} requests "
          f"({errors} errors) in {wall:.2f} s = {rate:,.0f} req/s; ideal {ideal:,.0f} req/s; "
          f"ratio {rate / ideal:.2f}; server CPU {1e3 * server_cpu / max(done, 1):.3f} ms/request")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
