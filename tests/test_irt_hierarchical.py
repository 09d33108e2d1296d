"""The hierarchical prior on difficulties (benchfill/irt/hierarchical.py): worked by hand and by recovery."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from benchfill.coverage import diagnose, max_gap
from benchfill.errors import ConfigError
from benchfill.irt import fit
from benchfill.irt.fit import IrtFit
from benchfill.irt.hierarchical import m_step
from benchfill.irt.simulate import simulate_responses


def test_the_m_step_by_hand():
    # mu = sum b / (n + v) = 2 / 4; S = (0.5^2 + 1.5^2 + 1.5^2) + 3 x 0.25 = 5.5; v = (-3 + sqrt(9 + 22)) / 2
    mu, v = m_step(np.array([1.0, -1.0, 2.0]), np.array([0.5, 0.5, 0.5]), 1.0)
    assert mu == pytest.approx(0.5) and v == pytest.approx((-3 + math.sqrt(31)) / 2)
    # the HalfNormal(1) on sigma pulls the variance a little below S / n (5.5 / 3 = 1.83): 1.28
    assert v < 5.5 / 3


def test_the_default_prior_is_the_papers_n01_to_the_last_bit():
    sim = simulate_responses(12, 40, 4, difficulty_sd=1.5, seed=2)
    a, b = fit(sim.matrix), fit(sim.matrix, prior="normal")
    assert np.array_equal(a.difficulty, b.difficulty) and np.array_equal(a.difficulty_se, b.difficulty_se)
    assert "prior" not in a.diagnostics


@pytest.mark.parametrize("sd", [1.0, 2.2])
def test_a_known_spread_is_recovered_where_the_n01_prior_draws_it_in(sd):
    # 40 models x 300 items x 10 trials: each item measured well enough that the spread is the items' own
    sims = [simulate_responses(40, 300, 10, ability_sd=1.2, difficulty_sd=sd, seed=s) for s in range(3)]
    normal = [fit(s.matrix) for s in sims]
    hier = [fit(s.matrix, prior="hierarchical") for s in sims]
    sigma = np.mean([f.diagnostics["difficulty_prior_sd"] for f in hier])
    assert sigma == pytest.approx(sd, rel=0.08)
    assert all(f.diagnostics["prior"] == "hierarchical" and f.diagnostics["converged"] for f in hier)
    if sd > 1.5:  # the N(0, 1) fit comes out narrower than the truth; the hierarchical one does not
        assert np.mean([np.std(f.difficulty) for f in normal]) < 0.92 * sd
        assert np.mean([np.std(f.difficulty) for f in hier]) == pytest.approx(sd, rel=0.08)
        # and its largest gap sits nearer the true one
        true = [max_gap((s.difficulty - s.difficulty.min()) / np.ptp(s.difficulty)) for s in sims]
        err_n = np.mean([abs(max_gap(f.z) - t) for f, t in zip(normal, true, strict=True)])
        err_h = np.mean([abs(max_gap(f.z) - t) for f, t in zip(hier, true, strict=True)])
        assert err_h < err_n
    # the order of the items is the same either way (the paper's "highly consistent")
    for f0, f1 in zip(normal, hier, strict=True):
        assert np.corrcoef(f0.difficulty, f1.difficulty)[0, 1] > 0.99


def test_only_the_1pl_takes_it_and_a_misspelt_prior_is_named():
    sim = simulate_responses(8, 20, 4, seed=1)
    for engine in ("map", "nuts"):
        with pytest.raises(ConfigError, match="^prior: hierarchical is fitted for the 1PL only, not model '2pl'"):
            fit(sim.matrix, model="2pl", prior="hierarchical", engine=engine)
    with pytest.raises(ConfigError, match="^prior: unknown difficulty prior 'hierarchy'"):
        fit(sim.matrix, prior="hierarchy")


def test_a_saved_hierarchical_fit_keeps_its_prior_and_diagnose_says_so_in_place_of_the_wide_spread(tmp_path):
    sim = simulate_responses(20, 120, 4, difficulty_sd=2.5, seed=4)
    f = fit(sim.matrix, prior="hierarchical")
    f.save(tmp_path / "fit.json")
    back = IrtFit.load(tmp_path / "fit.json")
    assert back.diagnostics["difficulty_prior_sd"] == f.diagnostics["difficulty_prior_sd"] > 1.25
    notes = diagnose(back).notes
    assert "wide_spread" not in notes and notes["difficulty_prior"]["sd"] == f.diagnostics["difficulty_prior_sd"]
    assert "wide_spread" in diagnose(fit(sim.matrix)).notes  # the same items under N(0, 1)


def test_the_cli_fits_and_diagnoses_under_it_and_refuses_it_with_nuts(tmp_path, capsys, shared_data):
    from benchfill.cli import main

    resp = str(shared_data / "humaneval" / "responses.csv")
    assert main(["diagnose", "--responses", resp, "--prior", "hierarchical"]) == 0
    out = capsys.readouterr().out
    assert "difficulties under the hierarchical prior N(" in out and "spread wider" not in out
    assert main(["diagnose", "--responses", resp]) == 0
    assert "a fit under the hierarchical prior (--prior hierarchical) estimates the spread" in capsys.readouterr().out
    assert main(["fit", "--responses", resp, "--prior", "hierarchical", "--model", "2pl",
                 "--out", str(tmp_path / "f.json")]) == 2
    assert "--prior hierarchical: fitted for --model 1pl only, not --model 2pl" in capsys.readouterr().err
    assert not (tmp_path / "f.json").exists()
    # with NUTS the draws are taken under the prior the items support, and the saved fit says which
    assert main(["fit", "--responses", resp, "--prior", "hierarchical", "--engine", "nuts", "--chains", "2",
                 "--warmup", "100", "--draws", "100", "--out", str(tmp_path / "f.json")]) == 0
    assert "; hierarchical prior N(" in capsys.readouterr().out
    saved = IrtFit.load(tmp_path / "f.json")
    assert saved.engine == "nuts" and saved.diagnostics["prior"] == "hierarchical"
    assert saved.diagnostics["difficulty_prior_sd"] > 1.5  # humaneval's items spread wider than N(0, 1)


def test_nuts_draws_under_the_estimated_prior_cover_a_wide_spread_the_n01_prior_does_not():
    # 30 models x 120 items x 2 trials, difficulties truly spread at sd 2.2: under N(0, 1) the posterior draws
    # the weakly measured ends in, and the items' 90% intervals miss their true difficulty a quarter of the time
    covered: dict[str, list[float]] = {"normal": [], "hierarchical": []}
    for seed in range(3):
        sim = simulate_responses(30, 120, 2, ability_sd=1.2, difficulty_sd=2.2, seed=seed)
        for prior, got in covered.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # short chains: R-hat a little above 1.01 is no matter here
                f = fit(sim.matrix, engine="nuts", prior=prior, chains=2, warmup=300, draws=300)
            lo, hi = np.quantile(f.difficulty_draws, [0.05, 0.95], axis=0)
            got.append(float(np.mean((sim.difficulty >= lo) & (sim.difficulty <= hi))))
            if prior == "hierarchical":  # the prior drawn under is the one the MAP EM estimates, and it says so
                est = fit(sim.matrix, prior="hierarchical").diagnostics
                assert f.diagnostics["difficulty_prior_sd"] == est["difficulty_prior_sd"] > 1.6
                assert f.diagnostics["difficulty_prior_mean"] == est["difficulty_prior_mean"]
    # measured: 0.725 / 0.775 / 0.758 under N(0, 1), 0.842 / 0.883 / 0.900 under the estimated prior
    assert max(covered["normal"]) < 0.8
    assert min(covered["hierarchical"]) > 0.82
    assert all(h > n + 0.05 for n, h in zip(covered["normal"], covered["hierarchical"], strict=True))
