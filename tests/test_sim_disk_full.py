"""The simulated world's state file on a full disk: one line naming it, the exit status of a full disk."""

from __future__ import annotations

import errno
import time

from benchfill.cli import main
from benchfill.sim.world import World


def test_a_full_disk_under_the_worlds_state_file_is_said_in_one_line(tmp_path, monkeypatch, capsys):
    # Its writes failed inside the world's server: a traceback per request, 28 s of retries, then "rewriter
    # ... HTTP 500", exit 3 (an endpoint unreachable), with the store on another disk.
    def full(self, item):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(World, "_append", full)
    started = time.monotonic()
    code = main(["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1", "--quiet",
                 "--runs-dir", str(tmp_path / "runs"), "--store", f"sqlite:///{tmp_path / 's.db'}", "--sim-pair-sd", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and time.monotonic() - started < 20  # not retried as if the server were busy
    assert len(err) == 1 and err[0].endswith("sim_world_state.jsonl: no space left on device: free some; what was "
                                             "written before is kept; rerun the same command to resume")
    monkeypatch.undo()  # room again: the same command goes on
    assert main(["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1", "--quiet",
                 "--runs-dir", str(tmp_path / "runs"), "--store", f"sqlite:///{tmp_path / 's.db'}", "--sim-pair-sd", "0"]) == 0
