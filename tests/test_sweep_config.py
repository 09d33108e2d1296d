"""The sweep file, the table and a local sweep's resume.

Bad input ends in one line naming the file and the field, before any work; the table is the runs'
own reports (averaged over seeds, values worked out by hand); rerunning a sweep resumes it: the same
table, and no call is made again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from benchfill.cli import main
from benchfill.errors import ConfigError
from benchfill.store import Store
from benchfill.sweep import load_sweep, run_sweep
from benchfill.sweep_table import collect, markdown


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(body)
    return path


GOOD = """
benchmarks = [{name = "demo"}]
strategies = ["benchfill"]
gaps = 1
runs_dir = "runs"
[options]
rounds = 1
parents = 2
children = 2
sim_probes = 6
"""


@pytest.mark.parametrize("body, message", [
    ('benchmarks = [{name = "demo"}]\nstratgies = ["benchfill"]\n', "field stratgies: not a field here"),
    ('benchmarks = [{name = "demo"}]\nstrategies = ["best"]\n', "field strategies: unknown strategy 'best'"),
    ('benchmarks = []\n', "field benchmarks: List should have at least 1 item"),
    ('benchmarks = [{name = "demo", gaps = 0}]\n', "field benchmarks.0.gaps: Input should be greater than or equal to 1"),
    # a string where a number belongs is named, not read as the number ("3" once ran 3 gaps)
    ('benchmarks = [{name = "demo"}]\ngaps = "3"\n', "field gaps: Input should be a valid integer"),
    ('benchmarks = [{name = "demo", gaps = "2"}]\n', "field benchmarks.0.gaps: Input should be a valid integer"),
    ('benchmarks = [{name = "demo"}]\nseeds = ["1"]\n', "field seeds.0: Input should be a valid integer"),
    ('benchmarks = [{name = "demo"}]\n[options]\nroundz = 2\n', "field options.roundz: not a run option"),
    ('benchmarks = [{name = "demo"}]\n[options]\nseed = 2\n', "field options.seed: set by the sweep itself"),
    ('benchmarks = [{gaps = 2}]\n', "field benchmarks.0: name a benchmark (name = ...) or give items and spec"),
    ('benchmarks = [{name = "demo"}, {name = "demo"}]\n', "field benchmarks.1: 'demo' appears twice"),
    ('benchmarks = [{name = "demo", options = {parentz = 2}}]\n', "field benchmarks.0.options.parentz: not a run option"),
    ('backend = "openai"\nbenchmarks = [{name = "demo"}]\n', "field config: backend openai needs a config file"),
    ('benchmarks = [{name = "demo"\n', "sweep.toml:"),
    ('benchmarks = [{name = "demo"}]\nseeds = [-1]\n', "field seeds: must be at least 0, got -1"),
    ('benchmarks = [{name = "demo"}]\n[options]\nrounds = "two"\n', "field options.rounds: a whole number, got 'two'"),
    ('benchmarks = [{name = "demo"}]\n[options]\nrounds = 0\n', "field options.rounds: must be at least 1, got 0"),
    ('benchmarks = [{name = "demo"}]\n[options]\nconfirm_se = 0\n',
     "field options.confirm_se: a z standard error in (0, 1)"),
    ('benchmarks = [{name = "demo"}, {name = "aime24", options = {rounds = "2"}}]\n',
     "field benchmarks.1.options.rounds: a whole number, got '2'"),
    # Options a run would refuse only once under way (after other runs' work), or never: "no" and "false"
    # are truthy (confirmation on, unconfined code allowed).
    ('benchmarks = [{name = "demo"}]\n[options]\nannotation = "fixd"\n',
     "field options.annotation: unknown protocol 'fixd' (choose from fixed, adaptive)"),
    ('benchmarks = [{name = "demo", options = {confirm = "no"}}]\n',
     "field benchmarks.0.options.confirm: true or false, got 'no'"),
    ('benchmarks = [{name = "demo"}]\n[options]\nallow_unconfined = "false"\n',
     "field options.allow_unconfined: true or false, got 'false'"),
    ('benchmarks = [{name = "demo"}]\n[options]\nsim_rewriter = "kindd"\n',
     "field options.sim_rewriter: unknown preset 'kindd' (choose from kind, realistic, hostile)"),
    ('benchmarks = [{name = "demo", options = {sim_rewriter_knobs = {driftt = 1}}}]\n',
     "field benchmarks.0.options.sim_rewriter_knobs: unknown knob 'driftt'"),
    ('benchmarks = [{name = "demo", options = {sim_rewriter_knobs = {slip = 2}}}]\n',
     "field benchmarks.0.options.sim_rewriter_knobs: slip must lie in [0, 1], got 2.0"),
    # One registered benchmark under two labels with the same settings: one run directory, counted twice.
    ('benchmarks = [{name = "demo"}, {name = "demo", label = "demo again"}]\n',
     "field benchmarks.1: same benchmark and settings as benchmarks.0 (the same runs: its options differ, if at all, "
     "only where benchfill and baseline and oracle never read them)"),
    # ... and one whose options differ only in what its strategies never read: the same runs again
    ('benchmarks = [{name = "demo"}, {name = "demo", label = "r3", options = {rounds = 3}}]\nstrategies = ["oracle"]\n',
     "field benchmarks.1: same benchmark and settings as benchmarks.0 (the same runs: its options differ, if at all, "
     "only where oracle never reads them)"),
    # ... and one whose benchfill run is one entry's and its oracle run another's: both named, neither misnamed
    ('benchmarks = [{name = "demo"}, {name = "demo", label = "r3", options = {rounds = 3}}, '
     '{name = "demo", label = "r3b", options = {rounds = 3}}]\nstrategies = ["benchfill", "oracle"]\n',
     "field benchmarks.2: the same runs as other entries (benchfill: benchmarks.1; oracle: benchmarks.0)"),
    ('data_dir = "nowhere"\nbenchmarks = [{name = "aime24"}]\n', "field data_dir: "),
])
def test_bad_sweep_files_fail_in_one_line_naming_the_field(tmp_path, body, message):
    path = _write(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        load_sweep(path)
    line = str(exc.value)
    assert line.startswith(str(path)) and message in line and "\n" not in line


def test_unknown_benchmark_fails_before_any_work(tmp_path, capsys):
    path = _write(tmp_path, GOOD.replace('name = "demo"', 'name = "no-such-bench"'))
    assert main(["sweep", "--config", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"benchfill: error: {path}: field benchmarks.0: benchmark no-such-bench: "
                                               "unknown benchmark 'no-such-bench'")
    assert not (tmp_path / "runs").exists()


def test_a_panel_config_a_unit_cannot_use_fails_before_any_work(tmp_path, capsys):
    # every unit failed on it, one at a time, and the sweep wrote an empty table ("1 of 1 units failed")
    (tmp_path / "panel.toml").write_text('[[probes]]\nname = "p"\nbase_url = "http://127.0.0.1:9/v1"\n'
                                         'model = "m"\ntemprature = 0.6\n[rewriter]\nmodel = "openai/r"\n'
                                         '[judge]\nmodel = "openai/j"\n')
    # (sim_probes sets the simulated world: refused with real endpoints)
    body = GOOD.replace("gaps = 1", 'gaps = 1\nbackend = "openai"\nconfig = "panel.toml"').replace("sim_probes = 6\n", "")
    path = _write(tmp_path, body)
    for what in ("temprature: not a field here", "nopanel.toml: config file not found"):
        assert main(["sweep", "--config", str(path), "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"benchfill: error: {path}: field config: ") and what in err[0], err
        assert not (tmp_path / "runs").exists()
        path.write_text(body.replace('config = "panel.toml"', 'config = "nopanel.toml"'))


def _report(run_id: str, seed: int, before: float, after: float, dev: float | None, calls: int, rollouts: int):
    return {"run_id": run_id, "seed": seed, "n_items": 10, "top_k": 3, "top_k_sum_before": before,
            "top_k_sum_after": after, "top_k_reduction": 1 - after / before, "target_deviation": dev,
            "gaps_filled": 3, "gaps_expected_inside": None if dev is None else 2.0 + seed / 2,
            "gaps_expected_between_edges": None if dev is None else 1.5 + seed / 4,
            "spend": {"model_calls": calls, "rollouts": rollouts}, "simulated": False}


def test_table_averages_seeds_and_strategies_by_hand(tmp_path):
    path = _write(tmp_path, """
benchmarks = [{name = "demo"}, {name = "aime24", label = "A24"}]
strategies = ["benchfill", "oracle"]
seeds = [0, 1]
runs_dir = "runs"
""")
    sweep = load_sweep(path)
    assert [p.label for p in sweep.runs] == ["demo/benchfill/seed0", "demo/benchfill/seed1", "demo/oracle/seed0",
                                             "demo/oracle/seed1", "A24/benchfill/seed0", "A24/benchfill/seed1",
                                             "A24/oracle/seed0", "A24/oracle/seed1"]
    # Reductions: demo benchfill 0.5 and 0.3, oracle 0.6 and 0.6; A24 benchfill 0.2 and 0.2, oracle 0.4, 0.4.
    after = {("demo", "benchfill"): (1.0, 1.4), ("demo", "oracle"): (0.8, 0.8),
             ("A24", "benchfill"): (1.6, 1.6), ("A24", "oracle"): (1.2, 1.2)}
    for p in sweep.runs:
        p.run_dir.mkdir(parents=True)
        a = after[(p.row, p.strategy)][p.seed]
        dev = None if p.strategy == "oracle" else 0.01 * (p.seed + 1)
        (p.run_dir / "report.json").write_text(json.dumps(
            _report(p.run_dir.name, p.seed, 2.0, a, dev, 100 + p.seed, 1000 * (p.seed + 1))))
    table = collect(sweep)
    demo, a24 = table["rows"]
    assert demo["benchmark"] == "demo" and a24["benchmark"] == "A24"
    assert demo["strategies"]["benchfill"]["reduction"] == pytest.approx(0.4)
    assert demo["strategies"]["benchfill"]["reduction_sd"] == pytest.approx(0.1414213562, rel=1e-6)
    assert demo["strategies"]["benchfill"]["target_deviation"] == pytest.approx(0.015)
    assert demo["strategies"]["benchfill"]["model_calls"] == pytest.approx(100.5)
    assert demo["strategies"]["oracle"]["target_deviation"] is None
    # gaps truly filled as the reports expect them: 2.0 and 2.5 over the seeds; the oracle has none
    assert demo["strategies"]["benchfill"]["gaps_expected_inside"] == pytest.approx(2.25)
    assert demo["strategies"]["oracle"]["gaps_expected_inside"] is None
    # ... and between their gaps' edge items, the edges' fit error counted: 1.5 and 1.75
    assert demo["strategies"]["benchfill"]["gaps_expected_between_edges"] == pytest.approx(1.625)
    assert demo["strategies"]["oracle"]["gaps_expected_between_edges"] is None
    assert table["average_reduction"] == {"benchfill": pytest.approx(0.3), "oracle": pytest.approx(0.5)}
    md = markdown(table)
    assert "| demo | 10 | 2.0000 | 1.2000 | 40.00% ± 14.14 | 0.8000 | 60.00% ± 0.00 | 0.0150 | 100.5 / 1500 |" in md
    assert "| average |  |  |  | 30.00% |  | 50.00% |  |  |" in md
    # A run without a report is said to be missing, and the average needs a complete column.
    (sweep.runs[0].run_dir / "report.json").unlink()
    table = collect(sweep)
    assert table["missing_runs"] == ["demo/benchfill/seed0"]
    assert table["rows"][0]["strategies"]["benchfill"]["reduction"] == pytest.approx(0.3)
    # A sweep stopped while writing its table left temp files; the next table removes them.
    from benchfill.sweep_table import write_table

    out = Path(sweep.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in (".table-dgesxsdz.png", ".table.md-abc123", ".table.json-x9"):
        (out / stale).write_bytes(b"")
    write_table(sweep)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".table")) == []
    assert {"table.md", "table.json", "table.png"} <= {p.name for p in out.iterdir()}


def test_entries_that_differ_only_where_a_strategy_never_reads_share_its_run(tmp_path, capsys, monkeypatch):
    # Comparing the search's rounds on one benchmark: the oracle reads no rounds, so both rows' oracle is one
    # run (its id leaves rounds out), run once and shown in both rows. This sweep was once refused whole as
    # "same benchmark and settings", since the oracle's run directory was the same.
    path = _write(tmp_path, GOOD.replace('benchmarks = [{name = "demo"}]',
                                         'benchmarks = [{name = "demo"}, {name = "demo", label = "r2", options = '
                                         '{rounds = 2}}]').replace('["benchfill"]', '["benchfill", "oracle"]'))
    sweep = load_sweep(path)
    assert [(p.label, p.shares) for p in sweep.runs] == [
        ("demo/benchfill/seed0", None), ("demo/oracle/seed0", None),
        ("r2/benchfill/seed0", None), ("r2/oracle/seed0", "demo/oracle/seed0")]
    assert sweep.runs[3].run_dir == sweep.runs[1].run_dir and sweep.runs[2].run_dir != sweep.runs[0].run_dir
    assert [p.label for p in sweep.to_run] == ["demo/benchfill/seed0", "demo/oracle/seed0", "r2/benchfill/seed0"]
    # The runs themselves stand in here (a real sweep runs them in test_rerun_resumes_without_new_calls): each
    # writes its report; what is tested is that the sweep runs each run once and reads it for both rows.
    import benchfill.run

    ran = []

    async def execute(opts, **_):
        run_dir = Path(opts.runs_dir) / benchfill.run.run_id_for(opts)
        ran.append(opts.progress_label)
        run_dir.mkdir(parents=True)  # (a second run of one directory would fail here)
        after = {"benchfill": 1.0 + 0.1 * opts.rounds, "oracle": 0.8}[opts.strategy]
        (run_dir / "report.json").write_text(json.dumps(_report(run_dir.name, opts.seed, 2.0, after, None, 10, 100)))
        return run_dir

    monkeypatch.setattr(benchfill.run, "execute", execute)
    table = run_sweep(sweep, progress=True)
    assert ran == ["demo/benchfill/seed0", "demo/oracle/seed0", "r2/benchfill/seed0"]
    # three runs, their units counted once: two benchfill runs of one gap each, and the oracle's one
    assert "sweep: units 3/3 done" in capsys.readouterr().err
    demo, r2 = table["rows"]
    assert r2["strategies"]["oracle"] == demo["strategies"]["oracle"]
    assert r2["strategies"]["oracle"]["reduction"] == pytest.approx(0.6)
    assert demo["strategies"]["benchfill"]["reduction"] == pytest.approx(0.45)
    assert r2["strategies"]["benchfill"]["reduction"] == pytest.approx(0.4)
    assert table["missing_runs"] == [] and table["shared_runs"] == {"r2/oracle/seed0": "demo/oracle/seed0"}
    assert "One run shown in more than one row" in markdown(table) and "r2/oracle/seed0 is demo/oracle/seed0." in markdown(table)


def test_rerun_resumes_without_new_calls(tmp_path):
    path = _write(tmp_path, GOOD)
    first = run_sweep(load_sweep(path), progress=False)
    out = Path(first["paths"]["table.md"]).parent
    assert sorted(p.name for p in out.iterdir()) == ["table.json", "table.md", "table.png"]  # no temp files left
    (db,) = (tmp_path / "runs").glob("demo-benchfill-*/store.db")

    def rows() -> int:
        s = Store(db)
        with s.engine.connect() as conn:
            n = int(conn.execute(text("SELECT count(*) FROM modelcall")).scalar())
        s.close()
        return n

    before = rows()
    assert before > 0
    second = run_sweep(load_sweep(path), progress=False)
    assert rows() == before  # every call came from the cache
    assert second["rows"] == first["rows"]
    assert json.loads((out / "table.json").read_text())["rows"] == first["rows"]


def test_a_rerun_says_its_calls_were_replayed_not_made(tmp_path, capsys):
    """The progress line counts what the searches took (cache hits included: they were paid for once)
    and says how much of it a rerun replayed from the store: restored with a finished gap, or, for a
    search cut short before its state was saved, served from the cache call by call."""
    import re

    path = _write(tmp_path, GOOD)

    def last_line() -> tuple[int, int, int, int]:
        line = capsys.readouterr().err.strip().splitlines()[-1]
        got = re.search(r"search model calls (\d+)(?: \((\d+) replayed\))?, "
                        r"rollouts (\d+)(?: \((\d+) replayed\))?", line)
        assert got and line.endswith(": finished"), line
        return tuple(int(g or 0) for g in got.groups())

    run_sweep(load_sweep(path), progress=True)
    err = capsys.readouterr().err
    capsys.readouterr()
    print(err, file=sys.stderr, end="")  # read again by last_line
    # Between the sweep's own lines, each run says how its rounds go, named by the run (a unit can take minutes)
    label = load_sweep(path).runs[0].label
    assert re.search(rf"^{re.escape(label)}: gap 0 \[[0-9.]+, [0-9.]+\] round 1/\d+: ", err, re.M), err
    assert re.search(rf"^{re.escape(label)}: fitting IRT on ", err, re.M), err
    calls, none, rollouts, also_none = last_line()
    assert calls > 0 and rollouts > 0 and none == also_none == 0  # the first run makes every call
    run_sweep(load_sweep(path), progress=True)
    assert last_line() == (calls, calls, rollouts, rollouts)  # every gap restored: nothing made again
    (db,) = (tmp_path / "runs").glob("demo-benchfill-*/store.db")
    store = Store(db)
    with store.engine.begin() as conn:  # as if killed before the search saved its state: it runs again
        conn.execute(text("DELETE FROM gapstate"))
    store.close()
    run_sweep(load_sweep(path), progress=True)
    assert last_line() == (calls, calls, rollouts, rollouts)  # ... every call from the cache


def test_a_malformed_responses_file_fails_before_any_run(tmp_path, shared_data, capsys):
    """A benchmark's responses are read with its items before any unit starts: one line, no run begun."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(shared_data / "aime25", data / "aime25")
    with (data / "aime25" / "responses.csv").open("a") as fh:
        fh.write("bogus-model,2025-I-01,abc,4\n")
    path = _write(tmp_path, GOOD.replace('name = "demo"', 'name = "aime25"')
                  .replace('runs_dir = "runs"', f'runs_dir = "runs"\ndata_dir = "{data}"'))
    assert main(["sweep", "--config", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "benchmark aime25:" in err[0] and "field 'correct' must be a non-negative integer" in err[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_sweep_sharing_a_panel_config_that_names_a_benchmark_runs_its_own(tmp_path):
    """A panel config's [benchmark] section names the benchmark of a single run; a sweep names its
    benchmarks itself and may share the panel among them (docs/panel.example.toml names aime24)."""
    from benchfill.sweep import check_benchmarks

    url = "http://127.0.0.1:9/v1"
    panel = tmp_path / "panel.toml"
    panel.write_text(f'[benchmark]\nname = "aime24"\n[[probes]]\nname = "p1"\nbase_url = "{url}"\nmodel = "m"\n'
                     f'[rewriter]\nmodel = "openai/r"\napi_base = "{url}"\n[judge]\nmodel = "openai/j"\napi_base = "{url}"\n')
    path = _write(tmp_path, GOOD.replace('runs_dir = "runs"', 'runs_dir = "runs"\nbackend = "openai"\nconfig = "panel.toml"')
                  .replace("sim_probes = 6\n", ""))
    sweep = load_sweep(path)
    check_benchmarks(sweep)  # demo, though the panel names aime24: no refusal
    assert [p.opts.benchmark for p in sweep.runs] == ["demo"]


# -- a custom benchmark's run directories ------------------------------------------------------------
CUSTOM = GOOD.replace('benchmarks = [{name = "demo"}]',
                      'benchmarks = [{items = "a/items.jsonl", spec = "spec.toml", '
                      'responses = "a/responses.csv", label = "My set/v2"}]')


def _custom_data(tmp_path: Path, shared_data: Path, *dirs: str) -> None:
    """A spec, and aime25's items and responses under each of ``dirs`` (every items file items.jsonl)."""
    import shutil

    (tmp_path / "spec.toml").write_text('[benchmark]\nname = "mine"\n')
    for d in dirs:
        (tmp_path / d).mkdir(parents=True)
        for f in ("items.jsonl", "responses.csv"):
            shutil.copy(shared_data / "aime25" / f, tmp_path / d / f)


def _old_dir(plan) -> Path:
    """Where sweeps before named the plan's run: after its items file."""
    import dataclasses

    from benchfill.run import run_id_for

    old = dataclasses.replace(plan.opts, run_id=None)
    return Path(old.runs_dir) / run_id_for(old)


def _a_run_in(run_dir: Path, identity: dict) -> None:
    """A run directory whose store of its own records these settings (as a run does at its start)."""
    from benchfill.store import open_run_store

    run_dir.mkdir(parents=True)
    store = open_run_store(run_dir)
    store.set_meta("options", json.loads(json.dumps(identity, default=str)))
    store.close()


def _model_calls(db: Path) -> int:
    s = Store(db)
    with s.engine.connect() as conn:
        n = int(conn.execute(text("SELECT count(*) FROM modelcall")).scalar())
    s.close()
    return n


def test_a_custom_benchmarks_runs_are_named_after_its_label(tmp_path, shared_data):
    _custom_data(tmp_path, shared_data, "a")
    path = _write(tmp_path, CUSTOM.replace('strategies = ["benchfill"]',
                                           'strategies = ["benchfill", "oracle"]')
                  .replace("benchmarks = [", 'benchmarks = [{name = "demo"}, '))
    sweep = load_sweep(path)
    demo, demo_oracle, mine, mine_oracle = sweep.runs
    # a registered benchmark's runs: named after it, as before (the id `benchfill run` gives them; the unit is
    # told it, so that it runs in the folder planned here)
    assert demo.run_dir.name.startswith("demo-benchfill-") and demo.opts.run_id == demo.run_dir.name
    demo.opts.run_id = None
    from benchfill.run import run_id_for

    assert run_id_for(demo.opts) == demo.run_dir.name
    assert mine.row == "My set/v2"
    assert mine.run_dir.name.startswith("My_set_v2-benchfill-")
    assert mine_oracle.run_dir.name.startswith("My_set_v2-oracle-")
    for p in (mine, mine_oracle):
        assert p.run_dir.parent == tmp_path / "runs" and p.opts.run_id == p.run_dir.name  # where it writes
        assert p.run_dir.name.rsplit("-", 1)[1] == _old_dir(p).name.rsplit("-", 1)[1]  # the settings' digest
    from benchfill.sweep import folder_name

    assert [folder_name(s) for s in ("../x y", "..", "aime-24.v2")] == ["x_y", "custom", "aime-24.v2"]


def test_two_custom_benchmarks_never_share_a_run_folder(tmp_path, shared_data):
    """Items files of one name in two directories; one items file under two labels, even labels alike as
    file names; and an earlier sweep's folder, which only the first of them may resume."""
    _custom_data(tmp_path, shared_data, "a", "b")
    entries = [("a", "A"), ("b", "B"), ("a", "A again"), ("a", "A/again")]
    body = ", ".join(f'{{items = "{d}/items.jsonl", spec = "spec.toml", responses = "{d}/responses.csv", '
                     f'label = "{label}"}}' for d, label in entries)
    path = _write(tmp_path, GOOD.replace('{name = "demo"}', body))
    plans = load_sweep(path).runs
    assert len({p.run_dir for p in plans}) == 4
    assert [p.run_dir.name.split("-benchfill-")[0] for p in plans][:3] == ["A", "B", "A_again"]
    assert plans[3].run_dir.name.startswith("A_again-") and plans[3].run_dir != plans[2].run_dir
    old = _old_dir(plans[0])
    assert old == _old_dir(plans[2]) == _old_dir(plans[3])  # the three were one folder before
    _a_run_in(old, plans[0].opts.identity())
    again = load_sweep(path).runs
    assert again[0].run_dir == old and again[0].opts.run_id == old.name  # resumed where it is
    assert [p.run_dir for p in again[1:]] == [p.run_dir for p in plans[1:]]
    assert len({p.run_dir for p in again}) == 4


def test_an_old_named_folder_without_a_run_is_left_alone(tmp_path, shared_data):
    _custom_data(tmp_path, shared_data, "a")
    path = _write(tmp_path, CUSTOM)
    (plan,) = load_sweep(path).runs
    old = _old_dir(plan)
    old.mkdir(parents=True)  # no store: no run
    assert load_sweep(path).runs[0].run_dir == plan.run_dir
    old.rmdir()
    _a_run_in(old, plan.opts.identity())
    assert load_sweep(path).runs[0].run_dir == old  # (its name carries these settings' digest)
    _a_run_in(plan.run_dir, plan.opts.identity())  # a run under the new name already: it wins
    assert load_sweep(path).runs[0].run_dir == plan.run_dir


def test_a_rerun_resumes_a_custom_run_in_its_old_named_folder(tmp_path, shared_data):
    """A run an earlier sweep made in the folder named after the items file is resumed there: no call
    made again, no new folder, the table's row its report."""
    import dataclasses

    from benchfill.run import run

    _custom_data(tmp_path, shared_data, "a")
    path = _write(tmp_path, CUSTOM)
    (plan,) = load_sweep(path).runs
    assert plan.run_dir.name.startswith("My_set_v2-benchfill-")
    old = _old_dir(plan)
    assert old.name.startswith("items-benchfill-")
    assert run(dataclasses.replace(plan.opts, run_id=None)) == old  # the earlier sweep's run
    calls = _model_calls(old / "store.db")
    report = json.loads((old / "report.json").read_text())
    assert calls > 0
    sweep = load_sweep(path)
    assert [p.run_dir for p in sweep.runs] == [old]
    table = run_sweep(sweep, progress=False)
    assert _model_calls(old / "store.db") == calls  # every call from its store
    assert not plan.run_dir.exists() and sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        old.name, "sweep-sweep"]
    (row,) = table["rows"]
    assert row["benchmark"] == "My set/v2"
    assert row["strategies"]["benchfill"]["reduction"] == pytest.approx(report["top_k_reduction"])


def test_a_store_with_a_password_fails_before_any_run(tmp_path):
    """As `benchfill run --store` refuses it (store.check_store_url): in the file or on the command line,
    user:password@ or ?password=, one line, no secret in it, nothing written."""
    for url in ("postgresql+psycopg://u:s3cret@127.0.0.1:1/db", "postgresql+psycopg://u@127.0.0.1:1/db?password=s3cret"):
        path = _write(tmp_path, f'store = "{url}"\n' + GOOD)
        with pytest.raises(ConfigError, match=r"sweep\.toml: field store: the URL carries a password; .*PGPASSWORD") as err:
            load_sweep(path)
        assert "s3cret" not in str(err.value)
        with pytest.raises(ConfigError, match=r"^--store: the URL carries a password") as err:
            load_sweep(_write(tmp_path, GOOD), store=url)
        assert "s3cret" not in str(err.value)
    assert not (tmp_path / "runs").exists()


def test_a_store_that_cannot_be_opened_fails_the_sweep_once_before_any_run(tmp_path):
    """Every unit failed on it one at a time, and a table of blank rows was written."""
    from benchfill.sweep import run_sweep

    sweep = load_sweep(_write(tmp_path, GOOD), store="postgresql+psycopg://u@127.0.0.1:9/db", runs_dir=str(tmp_path / "runs"))
    with pytest.raises(ConfigError, match=r"^cannot open store postgresql\+psycopg://u@127\.0\.0\.1:9/db: "):
        run_sweep(sweep, progress=False)
    assert not (tmp_path / "runs").exists() and not sweep.out_dir.exists()
