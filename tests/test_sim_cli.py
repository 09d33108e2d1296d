"""``benchfill sim serve`` in its own process: loopback only, real endpoints, one-line errors."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx


def listening_addresses(port: int) -> list[str]:
    """Local addresses of sockets in LISTEN state on ``port`` (Linux /proc/net/tcp{,6})."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:
                found.append(addr)
    return found


def start(args: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "benchfill", "sim", "serve", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    banner = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        banner += line
        if line.startswith("serving "):
            return proc, banner
    proc.kill()
    raise AssertionError(f"sim serve did not start: {banner} {proc.stderr.read()}")


def test_sim_serve_binds_loopback_only_and_serves(shared_data, tmp_path):
    proc, banner = start(["--benchmark", "aime25", "--data-dir", str(shared_data), "--probes", "4",
                          "--seed", "3", "--state", str(tmp_path / "state.jsonl")])
    try:
        url = banner.strip().splitlines()[-1].split()[-1]
        assert url.startswith("http://127.0.0.1:")
        assert "SIMULATED" in banner and "truth from fit" in banner
        port = int(url.split(":")[2].split("/")[0])
        # 0100007F is 127.0.0.1 in /proc's little-endian hex: never 0.0.0.0 or a public address.
        assert listening_addresses(port) == ["0100007F"]
        ids = [m["id"] for m in httpx.get(f"{url}/models").json()["data"]]
        assert ids == ["sim-probe-01", "sim-probe-02", "sim-probe-03", "sim-probe-04", "sim-rewriter", "sim-judge"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_sim_serve_user_errors_are_one_line(tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "problem": "1+1?", "answer": "2"}\n')
    r = subprocess.run([sys.executable, "-m", "benchfill", "sim", "serve", "--items", str(items)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0 and "--evaluator" in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "problem": "x", "answer": "1"}\n{oops\n')
    r = subprocess.run([sys.executable, "-m", "benchfill", "sim", "serve", "--items", str(bad), "--evaluator", "math"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and f"{bad}:2" in r.stderr and r.stderr.strip().count("\n") == 0
