"""``benchfill run`` end to end against the simulated world, and resumption after SIGKILL."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cache_lookups import count_cache_lookups
from conftest import ctrl_c_as_at_a_terminal

from benchfill.errors import BenchfillError
from benchfill.run import RunOptions, run, run_id_for

# The mechanics of a run: probes that answer independently about the curve (pair_sd 0), so that a tiny budget fills
# both gaps; test_report_claims.py and test_readme_demo.py run the default world, whose probes agree with themselves.
FAST = dict(gaps=2, rounds=2, parents=2, children=2, references=8, sim_probes=6, progress=False, sim_pair_sd=0.0)


def test_demo_run_fills_gaps_and_writes_the_run_directory(tmp_path):
    # The mechanics of a run, on the kind rewriter: with this tiny budget the realistic one may not
    # land a confirmed child inside every gap (test_report_claims.py covers what is said then).
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), sim_rewriter="kind", **FAST)
    d = run(opts)
    assert d == tmp_path / run_id_for(opts)
    rep = json.loads((d / "report.json").read_text())
    assert rep["simulated"] and (d / "report.md").read_text().startswith("**SIMULATED RUN**")
    assert rep["top_k_sum_after"] < rep["top_k_sum_before"] and rep["top_k_reduction"] > 0
    assert rep["max_gap_after"] <= rep["max_gap_before"]
    assert len(rep["gaps"]) == 2 and all(g["status"] == "filled" for g in rep["gaps"])
    queue = [json.loads(x) for x in (d / "review_queue.jsonl").read_text().splitlines()]
    assert {q["item_id"] for q in queue} == {g["chosen_id"] for g in rep["gaps"]}
    for q in queue:
        assert q["ancestor"]["id"] == q["ancestor_id"] and q["child"]["problem"]
        assert q["judge"]["valid"] and q["probe_results"] and q["confirmed"]["z"] is not None
        assert q["true_difficulty"] is not None and q["simulated"]
    assert (d / "plots" / "ecdf_before_after.png").stat().st_size > 1000
    assert (d / "fit.json").is_file() and (d / "store.db").is_file()


def test_unknown_benchmark_and_missing_panel_are_one_clear_error(tmp_path):
    with pytest.raises(BenchfillError, match="unknown benchmark"):
        run(RunOptions(benchmark="nope", runs_dir=str(tmp_path)))
    cfg = tmp_path / "c.toml"
    cfg.write_text("seed = 1\n")
    with pytest.raises(BenchfillError, match="no probe panel"):
        run(RunOptions(benchmark="demo", config=str(cfg), runs_dir=str(tmp_path)))


def test_user_errors_through_the_cli_are_one_line_with_a_nonzero_exit(tmp_path, capsys):
    from benchfill.cli import main

    port = _closed_port()
    cfg = tmp_path / "panel.toml"
    url = f"http://127.0.0.1:{port}/v1"
    cfg.write_text(
        f"[[probes]]\nname = 'p1'\nbase_url = '{url}'\nmodel = 'm'\n"
        f"[rewriter]\nmodel = 'openai/r'\napi_base = '{url}'\n"
        f"[judge]\nmodel = 'openai/j'\napi_base = '{url}'\n"
    )
    spec = tmp_path / "spec.toml"
    spec.write_text("name = 'custom'\ntext_field = 'problem'\nanswer_field = 'answer'\nevaluator = 'math'\n")
    cases = [
        (["--benchmark", "nope"], 2, "unknown benchmark 'nope'"),
        (["--benchmark", "aime24", "--data-dir", str(tmp_path / "none")], 2, "aime24/items.jsonl not found"),
        (["--items", str(tmp_path / "missing.jsonl"), "--spec", str(spec)], 2, "missing.jsonl: items file not found"),
        (["--benchmark", "demo", "--config", str(cfg)], 3, f"p1 at http://127.0.0.1:{port}/v1: unreachable"),
    ]
    for args, code, message in cases:
        t0 = time.monotonic()
        assert main(["run", *args, "--runs-dir", str(tmp_path / "runs"), "--quiet"]) == code, args
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1 and err.startswith("benchfill: error:"), err
        assert time.monotonic() - t0 < 20  # an endpoint that is down fails fast, before any work
        runs = tmp_path / "runs"
        assert not runs.exists(), args  # and leaves no empty run directory, nor the runs dir it made


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _report_without_time(d: Path) -> dict:
    rep = json.loads((d / "report.json").read_text())
    rep["backend"].pop("traffic", None)
    return rep


def _calls(d: Path) -> int:
    with sqlite3.connect(d / "store.db") as c:
        return c.execute("select count(*) from modelcall").fetchone()[0]


@pytest.mark.slow
def test_killed_three_times_then_resumed_gives_the_uninterrupted_result(tmp_path, monkeypatch):
    args = [sys.executable, "-m", "benchfill", "run", "--benchmark", "demo", "--gaps", "2", "--rounds", "2",
            "--parents", "2", "--children", "2", "--sim-probes", "6", "--quiet", "--seed", "5"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    root = Path(__file__).resolve().parent.parent
    whole = tmp_path / "whole"
    subprocess.run([*args, "--runs-dir", str(whole)], check=True, env=env, cwd=root, timeout=300)
    cut = tmp_path / "cut"
    rng = random.Random(11)
    for attempt in range(3):
        p = subprocess.Popen([*args, "--runs-dir", str(cut)], env=env, cwd=root,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if attempt < 2:
            time.sleep(rng.uniform(2.0, 6.0))
        else:  # the last one is killed once some gap has a completed round in the store
            _wait_for_a_round(cut, p)
        p.send_signal(signal.SIGKILL)
        p.wait()
    (d,) = list(cut.iterdir())
    restored = _restored_model_calls(d)
    assert restored > 0
    # The resume runs here, counting what it asks the call cache for: no completed round is replayed.
    asked = count_cache_lookups(monkeypatch)
    opts = RunOptions(benchmark="demo", gaps=2, rounds=2, parents=2, children=2, sim_probes=6, seed=5,
                      progress=False, runs_dir=str(cut))
    assert run(opts) == d
    (a,) = list(whole.iterdir())
    assert _report_without_time(a) == _report_without_time(d)
    assert _calls(a) == _calls(d)
    with sqlite3.connect(d / "store.db") as c:
        kinds = dict(c.execute("select key, kind from modelcall"))
        model_calls = sum(k in ("rewriter", "judge") for k in kinds.values())
    looked_up = sum(kinds.get(k) in ("rewriter", "judge") for k in asked)
    print(f"resume: {looked_up} rewriter/judge cache look-ups of {model_calls} model calls; {restored} restored")
    assert looked_up <= model_calls - restored, (looked_up, model_calls, restored)


def _wait_for(run_root: Path, p: subprocess.Popen, query: str) -> None:
    """Until ``query`` counts a row in the run's store (or the run ends, or two minutes pass)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        for db in run_root.glob("*/store.db"):
            try:
                with sqlite3.connect(db, timeout=1) as c:
                    if c.execute(query).fetchone()[0]:
                        return
            except sqlite3.OperationalError:
                pass  # not created yet
        time.sleep(0.02)


def _wait_for_a_round(run_root: Path, p: subprocess.Popen) -> None:
    _wait_for(run_root, p, "select count(*) from gapstate where rounds_used >= 1")


def _small_demo_run(runs_dir: Path) -> tuple[list[str], dict, Path]:
    """(argv, env, cwd) of a small simulated demo run whose rounds take a few seconds."""
    args = [sys.executable, "-m", "benchfill", "run", "--benchmark", "demo", "--gaps", "2", "--rounds", "2",
            "--parents", "2", "--children", "2", "--sim-probes", "6", "--quiet", "--seed", "5",
            "--runs-dir", str(runs_dir)]
    root = Path(__file__).resolve().parent.parent
    return args, {**os.environ, "PYTHONPATH": str(root)}, root


def _restored_model_calls(d: Path) -> int:
    """Model calls of the rounds the store holds as completed (a resumed run must not ask for them again)."""
    with sqlite3.connect(d / "store.db") as c:
        return sum(json.loads(s).get("spend", {}).get("model_calls", 0)
                   for (s,) in c.execute("select state_json from gapstate"))


def test_sigterm_stops_a_run_as_ctrl_c_does_and_the_rerun_resumes(tmp_path, monkeypatch):
    """A scheduler's SIGTERM ends the command through the same cleanup as Ctrl-C, says so, exits 143, and
    the same command then finishes the run from where it stopped."""
    from benchfill.cli import main

    args, env, root = _small_demo_run(tmp_path)
    p = subprocess.Popen(args, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_a_round(tmp_path, p)
    p.send_signal(signal.SIGTERM)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == 143 and "benchfill: terminated; rerun the same command to resume" in err, err
    assert "Traceback" not in err
    (d,) = list(tmp_path.iterdir())
    restored = _restored_model_calls(d)
    assert restored > 0 and not (d / "report.json").exists()
    # the same command, in this process to count what it asks the call cache: no completed round replayed
    asked = count_cache_lookups(monkeypatch)
    assert main(args[3:]) == 0
    with sqlite3.connect(d / "store.db") as c:
        kinds = dict(c.execute("select key, kind from modelcall"))
    model_calls = sum(k in ("rewriter", "judge") for k in kinds.values())
    looked_up = sum(kinds.get(k) in ("rewriter", "judge") for k in asked)
    assert looked_up <= model_calls - restored, (looked_up, model_calls, restored)
    assert (d / "report.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_run_stopped_mid_call_prints_no_never_awaited_warning(tmp_path, sig):
    """Ctrl-C or SIGTERM while rewriter and judge calls are in flight ends with the one-line message alone:
    litellm's request coroutines that the cancelled calls never started (and so never sent) do not surface
    as Python's "RuntimeWarning: coroutine ... was never awaited"."""
    args, env, root = _small_demo_run(tmp_path)
    p = subprocess.Popen(args, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=ctrl_c_as_at_a_terminal)
    # the first rewriter or judge call stored: others are then in flight through litellm
    _wait_for(tmp_path, p, "select count(*) from modelcall where kind in ('rewriter', 'judge')")
    assert p.poll() is None, "the run ended before it was signalled"
    p.send_signal(sig)
    err = p.communicate(timeout=60)[1]
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    assert p.returncode == (130 if sig == signal.SIGINT else 143) and f"benchfill: {word}" in err, err
    assert "never awaited" not in err and "Traceback" not in err, err


def test_a_stop_during_the_misfit_step_is_heard_at_once(tmp_path, monkeypatch):
    # The misfit allowance (20 s on mmlu-pro) ran on the event loop, which handles Ctrl-C and SIGTERM:
    # a stop waited for it to end. Here it takes 60 s; the stop must not wait.
    import threading
    import time

    import benchfill.irt.spread as spread
    from benchfill.cli import main

    started = threading.Event()

    def slow(*a, **kw):
        started.set()
        time.sleep(60)
        raise AssertionError("the stop waited for the misfit step")

    monkeypatch.setattr(spread, "misfit_allowance", slow)
    import benchfill.engine.backend as backend

    monkeypatch.setattr(backend, "_MEMO", {})  # not the allowance an earlier test's run left in this process

    signalled = []

    def stop():
        if started.wait(120):
            time.sleep(0.5)
            signalled.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop, daemon=True).start()
    args = ["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1",
            "--runs-dir", str(tmp_path), "--quiet"]
    assert main(args) == 143
    assert signalled and time.monotonic() - signalled[0] < 5


def test_an_items_file_name_that_is_not_utf8_names_its_run_in_plain_letters():
    # bytes of another code page reach Python as surrogates: the run id's encoding stopped the run with a
    # traceback, --dry-run included
    import os

    latin = RunOptions(items=os.fsdecode(b"/data/m\xfcller quiz.jsonl"))
    assert run_id_for(latin).startswith("m_ller_quiz-benchfill-")
    assert run_id_for(RunOptions(items="/data/müller.jsonl")).startswith("müller-benchfill-")  # UTF-8 stays
