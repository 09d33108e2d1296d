"""Online calibration of one new item: recovery, standard errors, edge cases (its speed: bench/bench_fit.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from benchfill.irt import item_information, online_calibrate

THETA = np.linspace(-2.0, 2.5, 12)


def test_mle_matches_a_brute_force_maximiser_with_guessing():
    c = np.array([0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 8])
    k = np.full(12, 8)
    est = online_calibrate(c, k, THETA, chance=0.25)

    def negll(b):
        p = 0.25 + 0.75 / (1 + np.exp(b - THETA))
        return -np.sum(c * np.log(p) + (k - c) * np.log(1 - p))

    ref = minimize_scalar(negll, bounds=(-10, 10), method="bounded", options={"xatol": 1e-10})
    assert est.flags == () and est.finite_mle
    assert est.difficulty == pytest.approx(ref.x, abs=1e-6)
    h = 1e-4
    info = (negll(ref.x + h) - 2 * negll(ref.x) + negll(ref.x - h)) / h**2
    assert est.se == pytest.approx(1 / np.sqrt(info), rel=1e-4)
    assert est.log_likelihood == pytest.approx(-ref.fun)


def test_one_probe_half_right_sits_at_its_ability_by_hand():
    est = online_calibrate([4], [8], [0.7])
    assert est.difficulty == pytest.approx(0.7, abs=1e-10)
    assert est.se == pytest.approx(1 / np.sqrt(8 * 0.25))  # information K/4 at p = 1/2


def test_recovers_difficulty_and_se_is_calibrated():
    rng = np.random.default_rng(0)
    b_true = rng.normal(0, 1, 400)
    k = np.full(12, 16)
    hits = 0
    errs = []
    for b in b_true:
        c = rng.binomial(k, 0.1 + 0.9 / (1 + np.exp(b - THETA)))
        est = online_calibrate(c, k, THETA, chance=0.1)
        if est.finite_mle:
            hits += abs(est.difficulty - b) <= 1.645 * est.se
            errs.append(est.difficulty - b)
    assert len(errs) >= 390
    assert abs(np.mean(errs)) < 0.1 and np.std(errs) < 0.45
    assert 0.85 <= hits / len(errs) <= 0.95


@pytest.mark.parametrize(("c", "reason", "side"), [(8, "all_correct", -1), (0, "all_wrong", 1)])
def test_no_finite_mle_is_bounded_and_flagged(c, reason, side):
    est = online_calibrate(np.full(12, c), np.full(12, 8), THETA, prior_mean=0.3, prior_sd=3.0)
    assert est.flags == ("no_finite_mle", reason) and not est.finite_mle
    assert np.isfinite(est.difficulty) and np.isfinite(est.se)
    # Beyond the probes on the right side, but held by the weak prior.
    edge = THETA.min() if side < 0 else THETA.max()
    assert side * (est.difficulty - edge) > 0
    assert abs(est.difficulty - 0.3) < 12


def test_below_chance_and_no_trials():
    est = online_calibrate([1, 0, 0], [8, 8, 8], [0.0, 1.0, 2.0], chance=0.25)
    assert est.flags == ("no_finite_mle", "at_or_below_chance")
    empty = online_calibrate([0, 0], [0, 0], [0.0, 1.0], prior_mean=0.5, prior_sd=2.0)
    assert empty.flags == ("no_finite_mle", "no_trials")
    assert empty.difficulty == pytest.approx(0.5) and empty.se == pytest.approx(2.0)


def test_bad_counts_are_rejected():
    with pytest.raises(ValueError, match="correct <= trials"):
        online_calibrate([9], [8], [0.0])
    with pytest.raises(ValueError, match="one entry per probe"):
        online_calibrate([1, 2], [8], [0.0])


@pytest.mark.parametrize("kw, field", [({"chance": 1.5}, "chance"), ({"chance": -0.2}, "chance"),
                                       ({"chance": 1.0}, "chance"), ({"prior_sd": 0}, "prior_sd"),
                                       ({"prior_sd": float("inf")}, "prior_sd"),
                                       ({"prior_mean": float("nan")}, "prior_mean")])
def test_a_floor_or_prior_that_is_no_probability_or_spread_is_refused_by_name(kw, field):
    # chance 1.5 gave difficulty -3.79 with se 0.0 and no flag; prior_sd 0 a ZeroDivisionError
    from benchfill.errors import DataError

    with pytest.raises(DataError, match=f"^{field}: "):
        online_calibrate([3], [3], [0.1], **kw)


def test_item_information_by_hand():
    np.testing.assert_allclose(item_information(0.0, [0.0]), [0.25])
    s = 1 / (1 + np.exp(-1.0))
    np.testing.assert_allclose(item_information(0.0, [1.0]), [s * (1 - s)])
    # With a floor g the information is ((1-g) s(1-s))^2 / (p (1-p)), smaller than without.
    g, p = 0.25, 0.25 + 0.75 * 0.5
    np.testing.assert_allclose(item_information(0.0, [0.0], 0.25), [(0.75 * 0.25) ** 2 / (p * (1 - p))])
    assert item_information(0.0, [0.0], g)[0] < 0.25


def test_an_item_hundreds_of_logits_away_gives_zero_information_without_nan_or_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exp overflow once made p NaN (inf * 0) with a RuntimeWarning
        np.testing.assert_array_equal(item_information(1000.0, THETA), np.zeros(THETA.size))
        np.testing.assert_array_equal(item_information(-1000.0, THETA, 0.25), np.zeros(THETA.size))


def test_an_all_correct_item_sits_at_the_penalised_maximum_with_its_se():
    # no finite MLE: the estimate is the maximum of log-likelihood + the N(mean, sd^2) prior's log density
    theta, c, k, mean, sd = np.array([-1.0, 0.0, 1.0]), np.full(3, 8), np.full(3, 8), 0.3, 3.0
    est = online_calibrate(c, k, theta, prior_mean=mean, prior_sd=sd)

    def neg(b):
        p = 1 / (1 + np.exp(b - theta))
        return -np.sum(c * np.log(p) + (k - c) * np.log1p(-p)) + 0.5 * ((b - mean) / sd) ** 2

    ref = minimize_scalar(neg, bounds=(-20, 10), method="bounded", options={"xatol": 1e-10})
    assert est.difficulty == pytest.approx(ref.x, abs=1e-6)
    h = 1e-4
    info = (neg(ref.x + h) - 2 * neg(ref.x) + neg(ref.x - h)) / h**2
    assert est.se == pytest.approx(1 / np.sqrt(info), rel=1e-3)


def test_exactly_at_chance_is_below_chance_not_diverged():
    est = online_calibrate([2, 2, 2], [8, 8, 8], [0.0, 1.0, 2.0], chance=0.25)
    assert est.flags == ("no_finite_mle", "at_or_below_chance")
