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
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("method", ["forkserver", "fork"])
def test_workers_end_when_their_owner_is_killed(tmp_path, method):
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    owner = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE, text=True,
                             cwd=tmp_path, start_new_session=True)
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
