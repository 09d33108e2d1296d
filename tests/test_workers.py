"""Worker pools end with their owner, even one killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

OWNER = textwrap.dedent("""
    import os, sys, time
    from benchfill.workers import owned_pool

    if __name__ == "__main__":
        pool = owned_pool(2, sys.argv[1])
        futs = [pool.submit(time.sleep, 0.3) for _ in range(4)]
        [f.result() for f in futs]
        print(" ".join(str(p) for p in pool._processes), flush=True)
        time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead: only its parent's wait remains, and under a killed owner that is PID 1's
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped between the signal and the read: gone
        return False


@pytest.mark.parametrize("method", ["forkserver", "fork"])
def test_workers_end_when_their_owner_is_killed(tmp_path, method):
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    # its own TMPDIR: a forkserver whose owner is killed never removes its pymp-* folder
    owner = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE, text=True,
                             cwd=tmp_path, start_new_session=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        workers = [int(p) for p in owner.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(p) for p in workers)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in workers), "a worker outlived its killed owner"
    finally:
        try:
            os.killpg(owner.pid, signal.SIGKILL)  # whatever is left of the test's own group
        except ProcessLookupError:
            pass


NUTS = textwrap.dedent("""
    import signal, sys
    import benchfill.irt.sampling as sampling
    from benchfill.demo import demo_benchmark

    def stop(sig, frame):
        raise KeyboardInterrupt  # as benchfill's commands turn SIGTERM into a stop

    if __name__ == "__main__":
        signal.signal(signal.SIGTERM, stop)
        sampling.PROGRESS_EVERY_S = 0.5
        sampling._workers = lambda chains: 2  # the pool, whatever this machine's cores
        try:
            sampling.fit_nuts(demo_benchmark(0).matrix, chains=4, warmup=50_000, draws=50_000,
                              progress=lambda s: print(s, flush=True))
        except KeyboardInterrupt:
            print("stopped", flush=True)
""")


@pytest.mark.parametrize("to_group", [True, False])
def test_a_stopped_nuts_fit_ends_its_chains_at_once(tmp_path, to_group):
    # The pool's shutdown waited for every queued chain, and a worker that got the stop itself reported it
    # as its chain's error and took the next: a stopped fit on mmlu-pro ran on for minutes.
    script = tmp_path / "nuts.py"
    script.write_text(NUTS)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                            start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("nuts iterations"):
                break
        assert lines and lines[-1].startswith("nuts iterations"), lines  # said while the chains run
        workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                  text=True).stdout.split()]
        start = time.monotonic()
        if to_group:
            os.killpg(proc.pid, signal.SIGTERM)  # the whole group, as a terminal's Ctrl-C reaches it
        else:
            proc.send_signal(signal.SIGTERM)  # the command alone, as `kill PID` does
        assert proc.wait(timeout=30) == 0 and "stopped" in proc.stdout.read()
        assert time.monotonic() - start < 5
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in workers)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
