"""MAP engine: recovery of known parameters, agreement with a generic optimiser, real data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from benchfill.errors import ConfigError
from benchfill.irt import fit
from benchfill.irt.likelihood import Posterior
from benchfill.irt.simulate import simulate_responses
from benchfill.matrix import ResponseMatrix


def _corr(x, y) -> float:
    return float(np.corrcoef(x, y)[0, 1])


@pytest.mark.parametrize(("n_items", "trials", "min_corr"), [(30, 32, 0.98), (1299, 4, 0.95)])
def test_map_recovers_difficulties_at_paper_sizes(n_items, trials, min_corr):
    # Difficulties spread with sd 1.5, as real benchmarks' do (items from near-trivial to
    # near-impossible); with only 4 trials per pair a narrower spread caps any estimator's
    # correlation near 0.94 at 1,299 x 12.
    sim = simulate_responses(12, n_items, trials, difficulty_sd=1.5, seed=3)
    f = fit(sim.matrix, engine="map")
    assert f.diagnostics["converged"]
    assert _corr(f.difficulty, sim.difficulty) >= min_corr
    assert _corr(f.ability, sim.ability) >= 0.95


@pytest.mark.parametrize(("n_items", "trials", "n_sets"), [(30, 32, 6), (1299, 4, 1)])
def test_laplace_intervals_cover_the_truth(n_items, trials, n_sets):
    # Coverage is a frequency property: draw the truth from the model's own N(0, 1) priors and
    # pool over data sets (errors of one small set share its location shift).
    covered = []
    for seed in range(n_sets):
        sim = simulate_responses(12, n_items, trials, seed=100 + seed)
        f = fit(sim.matrix)
        covered.append(np.abs(f.difficulty - sim.difficulty) <= 1.645 * f.difficulty_se)
    assert np.mean(np.concatenate(covered)) >= 0.85


def test_map_equals_generic_optimiser_and_laplace_se_matches_numeric_hessian():
    sim = simulate_responses(5, 8, 6, chance=0.25, seed=11)
    f = fit(sim.matrix, engine="map", guessing=True)
    post = Posterior(sim.matrix, guessing=True)

    def neg(x):
        lp, g = post.logp_grad(x)
        return -lp, -g

    res = minimize(neg, np.zeros(post.dim), jac=True, method="BFGS", options={"gtol": 1e-9})
    x = np.concatenate([f.ability, f.difficulty])
    np.testing.assert_allclose(x, res.x, atol=1e-5)
    # Observed information by central differences of the analytic gradient.
    h = 1e-5
    hess = np.array([(post.logp_grad(x + h * e)[1] - post.logp_grad(x - h * e)[1]) / (2 * h) for e in np.eye(post.dim)])
    se = np.sqrt(np.diag(np.linalg.inv(-hess)))
    np.testing.assert_allclose(np.concatenate([f.ability_se, f.difficulty_se]), se, rtol=1e-4)


def test_symmetric_one_by_one_matrix_sits_at_zero_by_hand():
    # One model, one item, half right: the posterior is symmetric in theta - b and the priors
    # pull both to 0; the information there is t/4 per pair plus the prior's 1.
    m = ResponseMatrix(("m",), ("i",), np.array([[5]]), np.array([[10]]))
    f = fit(m)
    assert f.ability[0] == pytest.approx(0.0, abs=1e-9)
    assert f.difficulty[0] == pytest.approx(0.0, abs=1e-9)
    # Inverse of [[1 + 2.5, -2.5], [-2.5, 1 + 2.5]] has diagonal 3.5 / (3.5^2 - 2.5^2) = 0.5833...
    assert f.difficulty_se[0] == pytest.approx(np.sqrt(3.5 / 6.0), rel=1e-9)


def test_guessing_floor_is_recovered_only_when_modelled():
    sim = simulate_responses(12, 300, 16, chance=0.25, seed=5)
    with_floor = fit(sim.matrix, guessing=True)
    without = fit(sim.matrix, guessing=False)
    assert with_floor.chance[0] == 0.25 and without.chance[0] == 0.0
    err_with = np.sqrt(np.mean((with_floor.difficulty - sim.difficulty) ** 2))
    err_without = np.sqrt(np.mean((without.difficulty - sim.difficulty) ** 2))
    assert _corr(with_floor.difficulty, sim.difficulty) >= 0.95
    assert err_with < 0.8 * err_without
    # Ignoring the floor compresses the scale: hard items look easier than they are.
    slope = np.polyfit(sim.difficulty, without.difficulty, 1)[0]
    assert slope < np.polyfit(sim.difficulty, with_floor.difficulty, 1)[0]


def test_pairs_without_trials_contribute_nothing():
    sim = simulate_responses(6, 40, 8, seed=2)
    m = sim.matrix
    junk_c, junk_t = m.correct.copy(), m.trials.copy()
    junk_t[0, :5] = 0
    junk_c[0, :5] = 0
    f1 = fit(ResponseMatrix(m.models, m.item_ids, junk_c, junk_t))
    # The same fit as dropping those observations by hand through the likelihood directly.
    post = Posterior(ResponseMatrix(m.models, m.item_ids, junk_c, junk_t), guessing=False)
    _, grad = post.logp_grad(np.concatenate([f1.ability, f1.difficulty]))
    assert np.max(np.abs(grad)) < 1e-6
    assert not np.isnan(f1.difficulty).any()


def test_two_pl_recovers_discriminations_roughly():
    rng = np.random.default_rng(7)
    a = np.exp(rng.normal(0.0, 0.5, 200))
    sim = simulate_responses(40, 200, 8, discrimination=a, ability_sd=1.5, seed=7)
    f = fit(sim.matrix, model="2pl")
    assert f.model == "2pl" and f.discrimination is not None
    assert _corr(np.log(f.discrimination), np.log(a)) >= 0.6
    assert _corr(f.difficulty, sim.difficulty) >= 0.95


def test_unknown_engine_or_model_is_a_config_error():
    sim = simulate_responses(3, 4, 2, seed=0)
    with pytest.raises(ConfigError, match="engine"):
        fit(sim.matrix, engine="vi")
    with pytest.raises(ConfigError, match="model"):
        fit(sim.matrix, model="3pl")


def test_progress_takes_a_callable_or_true_as_run_and_run_sweep_do(capsys):
    # fit(m, progress=True) was a TypeError deep in the engine ("'bool' object is not callable")
    sim = simulate_responses(3, 4, 2, seed=0)
    seen = []
    fit(sim.matrix, progress=seen.append)
    assert seen and seen[0].startswith("map iteration 1:")
    fit(sim.matrix, progress=True)
    assert capsys.readouterr().err.splitlines() == seen
    fit(sim.matrix, progress=False)
    assert capsys.readouterr().err == ""
    fit(sim.matrix, progress=np.True_)  # numpy's bool too
    assert capsys.readouterr().err.splitlines() == seen
    with pytest.raises(ConfigError, match="^progress: "):
        fit(sim.matrix, progress="yes")


def test_mmlu_pro_real_matrix_converges(shared_data):
    from benchfill.data import read_responses

    m = read_responses(shared_data / "mmlu-pro" / "responses.csv").with_chance(0.1)
    f = fit(m)
    assert f.diagnostics["converged"] and f.diagnostics["iterations"] < 20
    # Items more models solve must sit lower on the axis.
    rate = np.nanmean(m.success_rate, axis=0)
    from scipy.stats import spearmanr

    assert spearmanr(rate, f.difficulty).statistic < -0.9
    assert np.all(np.isfinite(f.difficulty_se)) and np.all(f.difficulty_se > 0)


def test_non_convergence_is_reported_not_hidden(monkeypatch):
    import benchfill.irt.map as map_engine

    monkeypatch.setattr(map_engine, "MAX_ITER", 1)
    sim = simulate_responses(6, 50, 8, chance=0.25, seed=1)
    with pytest.warns(map_engine.ConvergenceWarning, match="did not converge"):
        f = fit(sim.matrix)
    assert f.diagnostics["converged"] is False and f.diagnostics["iterations"] == 1


def test_fit_round_trips_through_save_and_load(tmp_path):
    from benchfill.irt import IrtFit

    sim = simulate_responses(4, 12, 8, seed=0)
    f = fit(sim.matrix)
    f.save(tmp_path / "fit.json")
    g = IrtFit.load(tmp_path / "fit.json")
    np.testing.assert_allclose(g.difficulty, f.difficulty)
    assert g.diagnostics["converged"] and g.seed == 0
    assert (tmp_path / "fit.json").read_text().endswith("}\n")  # a text file, as the run's others are


def test_a_matrix_nobody_tried_and_a_seed_that_is_no_number_are_refused():
    # the priors alone placed every model and item, and fit.seed came back as the string given
    from benchfill.errors import BenchfillError
    from benchfill.irt import fit

    zero = ResponseMatrix(("a", "b"), ("x", "y"), np.zeros((2, 2), int), np.zeros((2, 2), int), source="r.csv")
    with pytest.raises(BenchfillError, match=r"^r\.csv: no model tried any item"):
        fit(zero)
    ok = ResponseMatrix(("a", "b"), ("x", "y"), np.array([[1, 0], [2, 1]]), np.full((2, 2), 2))
    with pytest.raises(BenchfillError, match=r"^seed: a whole number \(or None\), got 'x'$"):
        fit(ok, seed="x")
    assert fit(ok, seed=np.int64(3)).seed == 3


def test_the_2pl_log_posterior_and_its_gradient_by_hand():
    # One model, one item, one trial, answered right: log p = log sigmoid(a (theta - b)), and the priors
    # theta, b ~ N(0, 1), log a ~ N(0, 0.5^2) (the documented LOG_DISCRIMINATION_SD). An sd of 0.71 in the
    # prior (dividing by the sd, not its square) had passed every test, log posterior and gradient alike.
    from benchfill.irt.likelihood import LOG_DISCRIMINATION_SD

    assert LOG_DISCRIMINATION_SD == 0.5
    post = Posterior(ResponseMatrix(["m"], ["q"], np.array([[1.0]]), np.array([[1.0]])), model="2pl",
                     guessing=False)
    theta, b, log_a = 0.3, -0.2, 0.4
    a = np.exp(log_a)
    eta = a * (theta - b)
    lp, grad = post.logp_grad(np.array([theta, b, log_a]))
    want = -np.log1p(np.exp(-eta)) - 0.5 * (theta**2 + b**2) - 0.5 * log_a**2 / 0.25
    assert lp == pytest.approx(want, rel=1e-12)
    r = 1.0 / (1.0 + np.exp(eta))  # d log sigmoid(eta) / d eta
    assert grad == pytest.approx([r * a - theta, -r * a - b, r * eta - log_a / 0.25], rel=1e-12)


@pytest.mark.parametrize(("n_models", "n_items"), [(8, 30), (30, 8)])
def test_map_is_the_mode_with_the_dense_inverse_information_on_either_side(n_models, n_items):
    # The Newton step keeps the smaller side's Schur complement: models when they are fewer (a benchmark),
    # items when they are (10,000 models x 5 items took minutes and 3 GB through an m x m complement).
    # Either way: the gradient of the log posterior vanishes at the mode, and the standard errors are the
    # diagonal of the dense (m + n) x (m + n) information's inverse, computed here whole.
    sim = simulate_responses(n_models, n_items, 6, seed=11)
    f = fit(sim.matrix, guessing=False)
    post = Posterior(sim.matrix, model="1pl", guessing=False)
    x = np.concatenate([f.ability, f.difficulty])
    _, r, w, _ = post.terms(x)
    assert np.abs(r.sum(axis=1) - f.ability).max() < 1e-6 and np.abs(-r.sum(axis=0) - f.difficulty).max() < 1e-6
    info = np.block([[np.diag(w.sum(axis=1) + 1.0), -w], [-w.T, np.diag(w.sum(axis=0) + 1.0)]])
    se = np.sqrt(np.diag(np.linalg.inv(info)))
    np.testing.assert_allclose(f.ability_se, se[:n_models], rtol=1e-6)
    np.testing.assert_allclose(f.difficulty_se, se[n_models:], rtol=1e-6)


def test_the_2pl_standard_errors_are_the_conditional_ones_by_numeric_curvature():
    # documented as each parameter's own information plus its prior, the others held at the mode: without a
    # guessing floor the logistic's observed and Fisher information agree, so 1 / sqrt(-d2 logpost / dx2)
    sim = simulate_responses(6, 9, 8, seed=5, discrimination=np.exp(np.linspace(-0.6, 0.6, 9)))
    f = fit(sim.matrix, engine="map", model="2pl", guessing=False)
    post = Posterior(sim.matrix, model="2pl", guessing=False)
    x = np.concatenate([f.ability, f.difficulty, np.log(f.discrimination)])
    h = 1e-5
    curv = np.array([(post.logp_grad(x + h * e)[1] - post.logp_grad(x - h * e)[1])[k] / (2 * h)
                     for k, e in enumerate(np.eye(post.dim))])  # fmt: skip
    n_m, n_i = sim.matrix.n_models, sim.matrix.n_items
    np.testing.assert_allclose(f.ability_se, 1 / np.sqrt(-curv[:n_m]), rtol=1e-4)
    np.testing.assert_allclose(f.difficulty_se, 1 / np.sqrt(-curv[n_m:n_m + n_i]), rtol=1e-4)
