"""report.json's probe traffic counts every process of a run: a run stopped after one gap and resumed
reports what the same run uninterrupted does, and a rerun of a finished run adds nothing sent."""

from __future__ import annotations

import asyncio
import json

from benchfill.run import RunOptions, execute, run

FAST = dict(benchmark="demo", gaps=2, rounds=2, parents=2, children=2, references=8, sim_probes=6, progress=False,
            sim_rewriter="kind")


def _traffic(d):
    return json.loads((d / "report.json").read_text())["backend"]["traffic"]


def test_a_resumed_run_reports_the_traffic_of_all_its_processes(tmp_path):
    whole = _traffic(run(RunOptions(runs_dir=str(tmp_path / "a"), **FAST)))
    assert whole["processes"] == 1 and whole["requests"] > 0 and whole["this_process"]["requests"] == whole["requests"]
    opts = RunOptions(runs_dir=str(tmp_path / "b"), **FAST)
    asyncio.run(execute(opts, gaps_only=[0]))  # a first process that got through gap 0 only
    d = run(opts)
    resumed = _traffic(d)
    assert resumed["processes"] == 2 and 0 < resumed["this_process"]["requests"] < resumed["requests"]
    # A retry is the machine's timing, not the run's work (a request that met the server closing an idle
    # connection, bench/bench_keepalive.py): the first attempts are the run's, and all of them are counted.
    keys = ("calls", "failures", "prompt_tokens", "completion_tokens")
    assert ({k: resumed[k] for k in keys}, resumed["requests"] - resumed["retries"]) == \
        ({k: whole[k] for k in keys}, whole["requests"] - whole["retries"]), (resumed, whole)
    again = _traffic(run(opts))  # everything from the store's cache: nothing sent, nothing lost
    assert again["processes"] == 3 and again["this_process"]["requests"] == 0
    assert (again["requests"], again["calls"]) == (resumed["requests"], resumed["calls"])
    assert again["cache_hits"] > resumed["cache_hits"]
