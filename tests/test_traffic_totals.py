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
    assert whole["scope"].startswith("probe requests only")  # a replica's requests were read as all its calls
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


def test_a_process_killed_before_its_first_checkpoint_is_counted_too(tmp_path):
    # SIGKILLed during the panel's rollouts, before its first checkpoint (after the fit), a process left its
    # answers in the cache and no count of the requests that made them: the resumed report said 1,691
    # requests where the run sends 1,915. Its figures are now kept with each write of its calls.
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    whole = _traffic(run(RunOptions(runs_dir=str(tmp_path / "a"), **FAST)))
    runs = tmp_path / "b"
    cmd = [sys.executable, "-m", "benchfill", "run", "--benchmark", "demo", "--gaps", "2", "--rounds", "2",
           "--parents", "2", "--children", "2", "--references", "8", "--sim-probes", "6", "--rewriter", "kind",
           "--runs-dir", str(runs), "--quiet"]  # FAST, as a user types it  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})  # fmt: skip
    calls = 0
    deadline = time.monotonic() + 120
    while calls < 50 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        for db in runs.glob("*/store.db"):
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                    calls = con.execute("select count(*) from modelcall").fetchone()[0]
                    fit = con.execute("select count(*) from runmeta where key like 'fit%'").fetchone()[0]
            except sqlite3.Error:
                continue
    assert calls >= 50 and fit == 0, "the run was to be killed during the panel's rollouts, before its fit"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = _traffic(run(RunOptions(runs_dir=str(runs), **FAST)))
    assert resumed["processes"] == 2
    keys = ("calls", "failures", "prompt_tokens", "completion_tokens")
    assert {k: resumed[k] for k in keys} == {k: whole[k] for k in keys}, (resumed, whole)
    # every request is counted; those the kill caught in flight were sent twice, once by each process
    sent, once = resumed["requests"] - resumed["retries"], whole["requests"] - whole["retries"]
    assert once <= sent <= once + 64, (resumed, whole)


def test_the_traffic_figures_are_written_in_the_same_transaction_as_the_calls_they_count(tmp_path, monkeypatch):
    # Written just after the calls, in a transaction of their own, a SIGKILL between the two lost a batch's
    # count (the resumed report said 634 calls where the run made 637): now one transaction, so a failure in
    # the figures' write takes the calls back too
    import pytest
    from sqlalchemy.exc import IntegrityError

    from benchfill.cache import CallCache, make_call
    from benchfill.schema import ModelCall
    from benchfill.store import Store

    store = Store(tmp_path / "s.db")
    # only the explicit flushes below write: at the default age of 1 s a slow disk let the add of k3 flush (and
    # raise) itself on a loaded CI machine
    monkeypatch.setattr("benchfill.cache._WRITE_THROUGH", False)
    cache = CallCache(store, flush_after_s=3600.0)
    cache.meta_with_calls = lambda: {"traffic/p1": {"calls": 2}}
    cache.add(make_call("probe", "k1", "http://h/v1", "m", {"n": 1}, {"text": "a"}))
    cache.add(make_call("probe", "k2", "http://h/v1", "m", {"n": 2}, {"text": "b"}))
    cache.flush()
    assert len(store.all(ModelCall)) == 2 and store.get_meta("traffic/p1") == {"calls": 2}
    cache.meta_with_calls = lambda: {"traffic/p1": {"calls": 3}, None: {}}  # a key the table refuses (NOT NULL)
    cache.add(make_call("probe", "k3", "http://h/v1", "m", {"n": 3}, {"text": "c"}))
    with pytest.raises(IntegrityError):
        cache.flush()
    assert len(store.all(ModelCall)) == 2 and store.get_meta("traffic/p1") == {"calls": 2}  # neither written
    store.close()
