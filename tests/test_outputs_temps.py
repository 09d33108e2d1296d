"""Temp files a killed writer left are removed by the next writer of the same file, and no live writer's.

A file written through a temp file and a rename is never half-written, but a writer killed between the two
(SIGKILL, the OOM killer, a power cut) leaves its temp file: a profile's folder of three outputs, a fit, a
predictor, a plot, a review queue. The temp's name says whose it is (``.<name>.bf<pid>@<host>.<random>``), so
the next writer of that file can ask whether its writer still runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchfill.cli import main
from benchfill.outputs import STALE_S, _host, sweep_temps, temp_path


def _dead_writers_temp(folder, name, **kw):
    """A temp made by another process, which then died without renaming it (as a SIGKILL leaves it)."""
    code = ("import sys; from pathlib import Path; from benchfill.outputs import temp_path; "
            f"p = temp_path(Path(sys.argv[1]), {name!r}, **{kw!r}); (p / 'profile.json').write_text('{{}}') "
            "if p.is_dir() else p.write_text('half'); print(p)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(folder)], check=True, capture_output=True, text=True)
    from pathlib import Path

    return Path(out.stdout.strip())


def test_a_dead_writers_temp_goes_and_a_live_ones_stays(tmp_path):
    dead = _dead_writers_temp(tmp_path, "queue.csv")
    assert dead.exists() and dead.name.startswith(".queue.csv.bf") and f"@{_host()}." in dead.name
    # a live writer: another process that still runs, and this process itself
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".queue.csv.bf{sleeper.pid}@{_host()}.abc123.tmp"
        live.write_text("being written")
        own = temp_path(tmp_path, "queue.csv")
        assert not dead.exists()  # removed by the next writer of queue.csv
        assert live.exists() and own.exists()
        assert sweep_temps(tmp_path, "queue.csv") == []  # own and live spared
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sweep_temps(tmp_path, "queue.csv") == [live]  # its writer has gone now


def test_temps_it_cannot_ask_about_go_only_once_stale(tmp_path):
    other_host = tmp_path / ".fit.json.bf12345@elsewhere.abc123.tmp"  # another host's: its pid means nothing here
    unnamed = tmp_path / ".fit.json.draws.bf1@x.tmp"  # named otherwise
    other_file = tmp_path / ".fit.jsonl.bf1@elsewhere.abc.tmp"  # another file's temp
    for p in (other_host, unnamed, other_file):
        p.write_text("x")
    assert sweep_temps(tmp_path, "fit.json") == []
    old = time.time() - STALE_S - 60
    for p in (other_host, unnamed, other_file):
        os.utime(p, (old, old))
    assert sorted(sweep_temps(tmp_path, "fit.json")) == sorted([other_host, unnamed])
    assert other_file.exists()


def test_a_killed_profiles_folder_is_removed_by_the_next_profile(tmp_path, capsys):
    from tests.test_cli_profile import _write_responses

    resp = _write_responses(tmp_path / "responses.csv")
    out = tmp_path / "out"
    out.mkdir()
    left = _dead_writers_temp(out, "profile", directory=True)
    assert left.is_dir() and (left / "profile.json").exists()
    assert main(["profile", "--responses", str(resp), "--out", str(out), "--draws", "99"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["histograms.png", "profile.json", "trajectories.png"]


def test_writers_beside_a_users_file_named_like_a_fixed_temp_leave_it(tmp_path):
    # "<out>.tmp" was the temp name of predict score, probes serve --write and the run's report: a user's
    # file of that name was written over and removed
    from benchfill.report import _write

    mine = tmp_path / "report.md.tmp"
    mine.write_text("my notes")
    _write(tmp_path / "report.md", "# report\n")
    assert mine.read_text() == "my notes" and (tmp_path / "report.md").read_text() == "# report\n"
