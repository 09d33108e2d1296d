"""The spread of item discrimination (irt/spread.py) and the misfit allowance ``--misfit auto`` built on it:
recovery of a known spread from drawn matrices, the posterior variance worked by hand, and a run that
records what it allowed for and says so in its report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchfill.errors import ConfigError
from benchfill.irt.likelihood import Posterior
from benchfill.irt.simulate import simulate_responses
from benchfill.irt.spread import ALLOWANCE_FLOOR, _log_a_variance, discrimination_spread, misfit_allowance
from benchfill.matrix import ResponseMatrix


def _drawn(tau: float, models: int, items: int, trials: int, seed: int = 2):
    a = np.exp(np.random.default_rng(seed + 100).normal(0.0, tau, items))
    sim = simulate_responses(models, items, trials, discrimination=a, difficulty_sd=1.3, seed=seed)
    return sim.matrix, float(np.log(a).std())


@pytest.mark.parametrize("tau", [0.35, 0.6])
@pytest.mark.parametrize("shape", [(12, 150, 8), (40, 300, 1)])
def test_a_known_spread_is_recovered(tau, shape):
    """Within 0.08 of the drawn slopes' own sd (the estimates come out 0.87-0.99 of it), where the Laplace
    EM alone falls 10-20% short: the bootstrap correction is what closes it."""
    matrix, drawn = _drawn(tau, *shape)
    s = discrimination_spread(matrix)
    assert abs(s.sd - drawn) < 0.08, (s, drawn)
    assert s.sd > s.raw_sd  # the EM's own figure understates; the correction raises it
    assert s.converged and 0 < s.information < 1


def test_items_that_all_fit_the_1pl_give_a_small_spread():
    matrix, _ = _drawn(0.0, 12, 150, 8)
    assert discrimination_spread(matrix).sd < 0.1


def test_the_posterior_variance_of_log_a_worked_by_hand():
    """One item, two models at theta -1 and +1, one trial each, no guessing, a = 1, prior sd 1.

    At b = 0: eta = +-1, w = p(1 - p) = 0.196612 each; I_bb = I_aa = 1 + 0.393224, I_ab = 0, so
    var = 1 / 1.393224 = 0.717761. At b = 0.5: eta = 0.5, -1.5; w = 0.235004, 0.149146; I_bb = 1.384150,
    I_aa = 1 + 0.058751 + 0.335579 = 1.394330, I_ab = -(0.117502 - 0.223719) = 0.106217, so
    var = 1.384150 / (1.394330 * 1.384150 - 0.011282) = 0.721406."""
    m = ResponseMatrix(("lo", "hi"), ("i",), np.array([[0], [1]]), np.array([[1], [1]]), np.zeros(1), "hand")
    post = Posterior(m, model="2pl", guessing=False, log_a_prior=(0.0, 1.0))
    for b, want in ((0.0, 0.717761), (0.5, 0.721406)):
        x = np.array([-1.0, 1.0, b, 0.0])
        assert _log_a_variance(post, x, 1.0)[0] == pytest.approx(want, abs=2e-6)


def test_too_few_models_or_items_are_refused_by_name_and_the_allowance_falls_back_to_its_floor():
    few, _ = _drawn(0.35, 4, 100, 8)
    with pytest.raises(ConfigError, match=r"simulated\(seed=2\): 4 models are too few"):
        discrimination_spread(few)
    sd, record = misfit_allowance(few)
    assert sd == ALLOWANCE_FLOOR and record["estimate"] is None and "too few" in record["why"]
    flat = ResponseMatrix(tuple(f"m{j}" for j in range(6)), tuple(f"i{k}" for k in range(20)),
                          np.ones((6, 20), dtype=int), np.ones((6, 20), dtype=int), np.zeros(20), "flat.csv")
    with pytest.raises(ConfigError, match="flat.csv: 0 items have both right and wrong answers"):
        discrimination_spread(flat)


def test_the_allowance_is_the_estimate_above_the_floor_and_the_floor_below_it():
    wide, _ = _drawn(0.8, 12, 150, 8)
    sd, record = misfit_allowance(wide)
    assert sd == pytest.approx(record["estimate"]["sd"], abs=1e-4) and sd > ALLOWANCE_FLOOR
    flat, _ = _drawn(0.0, 12, 150, 8)
    sd, record = misfit_allowance(flat)
    assert sd == ALLOWANCE_FLOOR and record["estimate"]["sd"] < ALLOWANCE_FLOOR


def test_a_large_matrix_is_estimated_on_a_seeded_subset_of_its_items():
    matrix, _ = _drawn(0.35, 12, 900, 2)
    s = discrimination_spread(matrix, max_items=200, replicates=0)
    assert s.items == 200 and s.sd == s.raw_sd
    assert discrimination_spread(matrix, max_items=200, replicates=0) == s  # the same subset again


# plumbing: probes that answer independently about the curve, so that a short run through a few of them
# chooses a child (the default world's offsets are run by test_report_claims.py and test_readme_demo.py)
FAST = dict(gaps=1, rounds=1, parents=2, children=2, references=8, sim_probes=6, progress=False, sim_pair_sd=0.0)


def test_a_run_resolves_auto_once_records_it_and_says_what_it_allowed(tmp_path, monkeypatch):
    from benchfill.irt import spread
    from benchfill.run import RunOptions, run
    from benchfill.store import open_run_store

    assert RunOptions.misfit == "auto"
    d = run(RunOptions(benchmark="demo", runs_dir=str(tmp_path), **FAST))
    store = open_run_store(d)
    saved = store.get_meta("misfit")
    store.close()
    # The demo's matrix is a 1PL draw: its own spread is near 0, so the allowance is the floor.
    assert saved["sd"] == ALLOWANCE_FLOOR and saved["estimate"]["sd"] < ALLOWANCE_FLOOR and saved["matrix"]
    rep = json.loads((d / "report.json").read_text())
    assert rep["backend"]["misfit"]["sd"] == ALLOWANCE_FLOOR
    text = (d / "report.md").read_text()
    assert f"sd of log a {ALLOWANCE_FLOOR:.2f}, estimated from the run's response matrix" in text
    assert "raised to the floor" in text and "answers fall across the probes weighs the slopes" in text

    def no_estimate(*a, **kw):
        raise AssertionError("a resumed run estimates again")

    monkeypatch.setattr(spread, "misfit_allowance", no_estimate)
    assert run(RunOptions(benchmark="demo", runs_dir=str(tmp_path), **FAST)) == d


def test_a_given_allowance_is_used_as_given_and_a_bad_one_is_refused_in_one_line(tmp_path, capsys):
    from benchfill.cli import main
    from benchfill.run import RunOptions, run

    d = run(RunOptions(benchmark="demo", runs_dir=str(tmp_path), misfit=0.5, **FAST))
    rep = json.loads((d / "report.json").read_text())
    assert rep["backend"]["misfit"] == {"sd": 0.5, "estimate": None, "given": True}
    assert "sd of log a 0.50, as given by `--misfit`" in (d / "report.md").read_text()
    with pytest.raises(ConfigError, match=r"misfit: a number in \[0, 2\] or auto, got 'wide'"):
        RunOptions(benchmark="demo", misfit="wide").check()
    with pytest.raises(SystemExit) as e:
        main(["run", "--benchmark", "demo", "--misfit", "3", "--runs-dir", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--misfit: must be auto or an sd of log discrimination in [0, 2], got 3" in err
    assert not math.isnan(rep["top_k_reduction"])


def test_fit_spread_prints_the_benchmarks_figure(tmp_path, capsys, shared_data):
    from benchfill.cli import main

    out = tmp_path / "fit.json"
    assert main(["fit", "--responses", str(shared_data / "humaneval" / "responses.csv"), "--spread", "--json",
                 "--out", str(out)]) == 0
    sp = json.loads(capsys.readouterr().out)["discrimination_spread"]
    # HumanEval's 49 models: a spread like the public matrices' (0.36 at this commit), not the 1PL's 0
    assert 0.2 < sp["sd"] < 0.6 and sp["models"] == 49 and sp["items"] < 164 and out.exists()
