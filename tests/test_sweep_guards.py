"""What a sweep refuses before any work, and where its paths point.

A bad option of a sweep file ends in one line naming the file and the field, with nothing written; a
second sweep of one file is refused while the first runs (they would run the same runs at once); a path
on the command line is relative to the current directory and a path in the file to the file (its SQLite
store's too); a simulated world's busy port is seen where the server starts.
"""

from __future__ import annotations

import socket
import sys
import types
from pathlib import Path

import pytest
from test_sweep_config import GOOD  # the smallest sweep that runs

from benchfill.cli import main
from benchfill.errors import BenchfillError
from benchfill.sweep import check_benchmarks, load_sweep


def _write(folder: Path, body: str, name: str = "sweep.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(body)
    return path


def test_a_bad_option_ends_the_command_in_one_line_before_any_folder(tmp_path, capsys):
    """The auditor's file: each of these options was refused only after run folders and a table were
    written (annotation, sim_rewriter), or not at all (confirm = "no" ran with confirmation on)."""
    for option, field in (('confirm = "no"', "options.confirm: true or false, got 'no'"),
                          ('annotation = "fixd"', "options.annotation: unknown protocol 'fixd'"),
                          ('sim_rewriter = "kindd"', "options.sim_rewriter: unknown preset 'kindd'")):
        path = _write(tmp_path, GOOD + option + "\n")
        assert main(["sweep", "--config", str(path), "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"benchfill: error: {path}: field {field}" + err[0].split(field, 1)[1]], err
        assert not (tmp_path / "runs").exists()


def test_one_benchmark_twice_with_other_settings_is_two_runs(tmp_path):
    path = _write(tmp_path, GOOD.replace('{name = "demo"}',
                                         '{name = "demo"}, {name = "demo", label = "d2", options = {rounds = 2}}'))
    plans = load_sweep(path).runs
    assert [p.row for p in plans] == ["demo", "d2"] and plans[0].run_dir != plans[1].run_dir


def test_a_second_sweep_of_the_file_is_refused_while_the_first_holds_it(tmp_path, capsys):
    """Two sweeps of one file would run the same runs at once: locally both ended saying units failed
    (each run holds its directory); on Ray both served the runs' simulated worlds on the same ports."""
    from benchfill import locks

    path = _write(tmp_path, GOOD)
    out = tmp_path / "runs" / "sweep-sweep"
    out.mkdir(parents=True)
    held = locks.hold(out, wait=False)  # as the first sweep holds it (flock: per open file, as another process)
    assert held is not None
    try:
        assert main(["sweep", "--config", str(path), "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"benchfill: error: {path}: sweep sweep is in progress in another process (it holds {out}); "
                       "wait for it to end"]
        assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["sweep-sweep"]  # no run begun
        assert not any(out.iterdir())
    finally:
        locks.release(held)


def test_paths_on_the_command_line_are_from_the_cwd_and_in_the_file_from_the_file(tmp_path, monkeypatch):
    conf, cwd = tmp_path / "conf", tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    path = _write(conf, 'store = "sqlite:///shared.db"\n' + GOOD.replace('runs_dir = "runs"\n', ""))
    sweep = load_sweep(path)
    assert sweep.store == f"sqlite:///{conf / 'shared.db'}"  # as the file's other paths: beside the file
    assert [p.opts.store for p in sweep.runs] == [sweep.store]
    sweep = load_sweep(path, store="sqlite:///mine.db", runs_dir="out")  # as `benchfill run --store/--runs-dir`
    assert sweep.store == f"sqlite:///{cwd / 'mine.db'}"
    assert sweep.runs[0].run_dir.parent == cwd / "out" and sweep.out_dir == cwd / "out" / "sweep-sweep"
    for url in ("sqlite:////abs/x.db", "postgresql+psycopg://u@127.0.0.1:1/db"):  # left as they are
        assert load_sweep(_write(conf, f'store = "{url}"\n' + GOOD)).store == url


def test_a_benchmark_missing_from_data_dir_names_its_entry_once(tmp_path):
    (tmp_path / "data").mkdir()
    path = _write(tmp_path, 'data_dir = "data"\n' + GOOD.replace('{name = "demo"}',
                                                                 '{name = "demo"}, {name = "aime24", label = "A"}'))
    with pytest.raises(BenchfillError) as exc:
        check_benchmarks(load_sweep(path))
    line = str(exc.value)
    assert line.startswith(f"{path}: field benchmarks.1: benchmark A (aime24): {tmp_path / 'data' / 'aime24' / 'items.jsonl'} "
                           "not found"), line
    assert "benchmark aime24:" not in line


def test_a_port_another_process_binds_at_the_same_moment_fails_in_start(monkeypatch):
    """With SO_REUSEADDR two processes may both bind a port neither listens on yet; the one that listens
    second fails. That must happen in start(), where the caller sees a busy port (start_sim takes another,
    and a sweep's driver refuses), not in the server's thread after start() returned."""
    from benchfill.sim import World, server

    real = socket.socket
    rivals: list[socket.socket] = []

    class Raced(real):
        def bind(self, address):
            super().bind(address)
            rival = real(socket.AF_INET, socket.SOCK_STREAM)  # another process, a moment later
            rival.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            rival.bind(self.getsockname())
            rival.listen()
            rivals.append(rival)

    monkeypatch.setattr(server, "socket", types.SimpleNamespace(**{**vars(socket), "socket": Raced}))
    items = [{"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(6)]
    world = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", n_probes=2)
    srv = server.SimServer(world)
    try:
        with pytest.raises(OSError):
            srv.start()
    finally:
        srv.stop()
        for r in rivals:
            r.close()


def test_bench_sweep_compares_the_simulated_true_column():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        import bench_sweep
    finally:
        sys.path.pop(0)

    def table(true: float) -> dict:
        cell = {"reduction": 0.25, "target_deviation": 0.01, "model_calls": 16, "rollouts": 232,
                "true_reduction (simulated)": true}
        return {"rows": [{"benchmark": "demo", "strategies": {"benchfill": cell, "oracle": None}}]}

    assert bench_sweep._cells(table(0.1)) != bench_sweep._cells(table(0.2))
    assert bench_sweep._cells(table(0.1)) == {("demo", "benchfill"): (0.25, 0.01, 16, 232, 0.1)}


def test_a_run_that_fails_counts_its_units_as_the_progress_line_does(tmp_path, capsys):
    # A run another process holds fails all its units at once: the error said "1 of 3 units failed"
    # (runs) under a progress line that said 3 failed (units).
    from benchfill import locks
    from benchfill.run import LOCK_FILE

    path = _write(tmp_path, GOOD.replace("gaps = 1", "gaps = 2"))
    plan = load_sweep(path).runs[0]
    n = len(plan.units)
    assert n > 1
    plan.run_dir.mkdir(parents=True)
    held = locks.hold(plan.run_dir / LOCK_FILE, wait=False)  # as another process's run holds it
    try:
        assert main(["sweep", "--config", str(path), "--quiet"]) != 0
    finally:
        locks.release(held)
    err = capsys.readouterr().err
    assert f"benchfill: error: {n} of {n} units failed (first: demo/benchfill/seed0: run " in err
