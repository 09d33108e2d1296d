"""What a run reports as spent is what the endpoints served, and the dry run's bounds hold it.

A repair turn (the rewriter's reply could not be read, so the model is asked again) is a call to the model,
and the order screen's spot checks are rollouts: the report once left the first out of its spend and the
dry run left both out of the bounds it calls upper bounds."""

from __future__ import annotations

import contextlib
import json

from benchfill.benchmarks import get_benchmark
from benchfill.run import RunOptions, dry_run, run
from benchfill.sim import SimServer, World


@contextlib.contextmanager
def _panel(tmp_path, *, n_probes: int, trials: int, malformed: float):
    """The simulated world served on loopback, its rewriter's replies malformed at the rate given, and a panel
    config naming it: (server, config path)."""
    bench = get_benchmark("demo")
    world = World.from_items(bench.items, evaluator=bench.spec.evaluator, text_field=bench.spec.text_field,
                             answer_field=bench.spec.answer_field, matrix=bench.matrix, n_probes=n_probes, seed=3,
                             rewriter_malformed_rate=malformed)
    with SimServer(world) as srv:
        probes = "".join(f'[[probes]]\nname = "{m}"\nmodel = "{m}"\nbase_url = "{srv.base_url}"\ntrials = {trials}\n'
                         for m in world.probes)
        cfg = tmp_path / "panel.toml"
        cfg.write_text(probes + f'[rewriter]\nmodel = "openai/sim-rewriter"\napi_base = "{srv.base_url}"\n'
                       f'[judge]\nmodel = "openai/sim-judge"\napi_base = "{srv.base_url}"\ntemperature = 0.0\n')
        yield srv, cfg


def test_repairs_and_spot_checks_are_spent_and_bounded(tmp_path, capsys):
    with _panel(tmp_path, n_probes=4, trials=2, malformed=0.5) as (srv, cfg):
        opts = RunOptions(benchmark="demo", config=str(cfg), runs_dir=str(tmp_path / "runs"), gaps=1, rounds=2,
                          parents=2, children=2, references=8, progress=False, seed=3, confirm=False)
        plan = dry_run(opts)
        d = run(opts)
        served = srv.stats["models"]
    rep = json.loads((d / "report.json").read_text())
    spend = rep["spend"]
    llm_calls = served["sim-rewriter"]["successes"] + served["sim-judge"]["successes"]
    print(f"spend {spend}; the server answered {llm_calls} rewriter and judge calls; dry run {plan}")
    assert spend["repair_calls"] > 0  # half the rewriter's replies malformed: some were repaired
    assert spend["model_calls"] == llm_calls  # every call the server answered is in the spend
    assert spend["model_calls"] <= plan["model_calls_max"]
    assert spend["screen_rollouts"] > 0
    assert spend["rollouts"] + spend["screen_rollouts"] <= plan["annotation_rollouts_max"] + plan["screen_rollouts_max"]
    from benchfill.report import summary_lines

    assert any(f"(+ {spend['screen_rollouts']} spot-check rollouts)" in line for line in summary_lines(rep))
    # `sim serve` behind a config is the simulated world, whatever the backend is called: said at the start, in
    # the report, and in the shared memory, whose real runs must never read its children as real ones
    assert (f"{srv.base_url} serves benchfill's simulated world (sim serve): this run is a simulated run"
            in capsys.readouterr().err)
    assert rep["simulated"] is True and rep["backend"]["backend"] == "openai"
    assert rep["backend"]["sim_endpoints"] == [srv.base_url]
    assert (d / "report.md").read_text().startswith("**SIMULATED RUN**: the configured endpoints serve")
    assert "true_target_deviation (simulated)" not in rep  # the world's truth is sim serve's own, not this run's
    import sqlite3

    rows = sqlite3.connect(d / "store.db").execute(
        "select simulated, count(*) from memoryrecord where origin = 'generated' group by simulated").fetchall()
    assert rows and all(bool(sim) for sim, _ in rows), rows


def test_a_rewriter_that_never_answers_in_the_format_asked_is_said_not_only_counted(tmp_path, caplog, capsys,
                                                                                     monkeypatch):
    # Every rewriter reply malformed, the repairs too: the run filled nothing and had said only "no valid child",
    # the reasons at -v alone. Now a warning names the first reason, and the headline and the report count them.
    import logging

    from benchfill.engine import backend

    monkeypatch.setattr(backend, "PROGRESS_EVERY_S", 0.02)  # the panel's rollouts said nothing under 500 items
    with _panel(tmp_path, n_probes=2, trials=1, malformed=1.0) as (srv, cfg):
        opts = RunOptions(benchmark="demo", config=str(cfg), runs_dir=str(tmp_path / "runs"), gaps=1, rounds=1,
                          parents=1, children=2, references=8, progress=True, seed=3, confirm=False,
                          misfit=0.5)  # (the spread of the panel's discrimination, estimated, took 19 s)
        with caplog.at_level(logging.WARNING, logger="benchfill"):
            d = run(opts)
    assert "requests sent so far, of about 96 (" in capsys.readouterr().err  # 2 probes x 48 items
    rep = json.loads((d / "report.json").read_text())
    failed, asked = rep["spend"]["failures"], rep["spend"]["rewriter_calls"]
    assert failed == asked == 2
    said = [r.getMessage() for r in caplog.records if "rewriter reply malformed after 2 repairs (" in r.getMessage()]
    assert len(said) == 1 and "flagged rewrite_failed" in said[0]
    from benchfill.report import summary_lines

    assert ("  unreadable   2 of 2 rewrites: no reply readable after the repair turns allowed (flagged "
            "rewrite_failed; -v shows why)") in summary_lines(rep)
    assert "no valid child (2 of 2 rewrites unreadable)" in (d / "report.md").read_text()
    from benchfill.source import code_identity
    from benchfill.store import Store

    store = Store(d / "store.db")  # the code that made the run, for a release's card
    assert store.get_meta("code") == code_identity()
    store.close()
