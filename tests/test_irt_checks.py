"""Response-matrix diagnostics by hand, leave-one-model-out and the BIC comparison."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchfill.irt import compare_models, leave_one_model_out, matrix_checks
from benchfill.irt.checks import _discordant
from benchfill.irt.simulate import simulate_responses
from benchfill.matrix import ResponseMatrix


def _matrix(correct, trials) -> ResponseMatrix:
    c, t = np.array(correct), np.array(trials)
    return ResponseMatrix(tuple(f"m{j}" for j in range(c.shape[0])), tuple(f"i{i}" for i in range(c.shape[1])), c, t)


def test_matrix_checks_by_hand_with_ties():
    # p = A [1 1 0], B [1 0 1], C [0 1 0]. Model rates 2/3, 2/3, 1/3 (A, B tied: no order).
    # Ordered model pairs A>C, B>C over 3 items = 6; only B vs C on item 1 (0 < 1) inverts.
    # Item rates 2/3, 2/3, 1/3 (items 0, 1 tied): pairs 0>2, 1>2 over 3 models = 6; only
    # model B on items 1 vs 2 (0 < 1) inverts; model B's 1 vs 1 on items 0, 2 is a tie, not one.
    m = _matrix([[1, 1, 0], [1, 0, 1], [0, 1, 0]], np.ones((3, 3), int))
    r = matrix_checks(m)
    assert r["model_information"]["value"] == pytest.approx(8 / 9)
    assert r["item_information"]["value"] == pytest.approx(8 / 9)
    assert r["model_inversion_rate"]["value"] == pytest.approx(1 / 6)
    assert r["item_inversion_rate"]["value"] == pytest.approx(1 / 6)
    assert all(v["passed"] and v["threshold"] == 0.3 for v in r.values())


def test_matrix_checks_by_hand_with_a_missing_pair_and_counts():
    # C never tried item 1. p = A [1 1 0], B [1 0 1], C [0 - 0] (C's rows from 0/2 counts).
    # Model rates 2/3, 2/3, 0 -> information (8/9 + 8/9 + 0) / 3 = 16/27.
    # Item rates 2/3, 1/2, 1/3 -> (8/9 + 1 + 8/9) / 3 = 25/27.
    # Model pairs A>C, B>C on the 2 items C saw: no inversion -> 0/4.
    # Item order 0 > 1 > 2: A none of 3, B (items 1 vs 2) 1 of 3, C (0 vs 2 only) 0 of 1 -> 1/7.
    m = _matrix([[1, 1, 0], [1, 0, 1], [0, 0, 0]], [[1, 1, 1], [1, 1, 1], [2, 0, 2]])
    r = matrix_checks(m)
    assert r["model_information"]["value"] == pytest.approx(16 / 27)
    assert r["item_information"]["value"] == pytest.approx(25 / 27)
    assert r["model_inversion_rate"]["value"] == 0.0
    assert r["item_inversion_rate"]["value"] == pytest.approx(1 / 7)


def test_saturated_matrix_fails_the_information_checks():
    m = _matrix(np.ones((4, 5), int) * 3, np.ones((4, 5), int) * 3)
    r = matrix_checks(m)
    assert r["model_information"] == {"value": 0.0, "threshold": 0.3, "passed": False}
    assert not r["item_information"]["passed"]
    # No ordered pairs at all: nothing is inverted.
    assert r["item_inversion_rate"]["value"] == 0.0


def test_inversion_count_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(20):
        order = rng.integers(0, 4, 15) / 4
        values = rng.integers(0, 3, 15) / 2
        d, o = _discordant(order, values)
        brute_d = sum(order[a] > order[b] and values[a] < values[b] for a, b in itertools.permutations(range(15), 2))
        brute_o = sum(order[a] > order[b] for a, b in itertools.permutations(range(15), 2))
        assert (d, o) == (brute_d, brute_o)


def test_inversion_rate_grows_with_label_noise():
    clean = simulate_responses(12, 200, 8, seed=1).matrix
    flipped = clean.correct.copy()
    flipped[::2] = clean.trials[::2] - flipped[::2]  # every other model answers backwards
    noisy = ResponseMatrix(clean.models, clean.item_ids, flipped, clean.trials)
    assert matrix_checks(noisy)["item_inversion_rate"]["value"] > matrix_checks(clean)["item_inversion_rate"]["value"]


def test_leave_one_model_out_is_stable_on_well_spread_models(monkeypatch):
    import benchfill.irt.sampling as sampling

    sim = simulate_responses(12, 100, 16, ability_sd=1.5, seed=4)
    said: list[str] = []
    monkeypatch.setattr(sampling, "PROGRESS_EVERY_S", 0.0)  # a line after each refit (every 15 s at real sizes)
    r = leave_one_model_out(sim.matrix, progress=said.append)
    assert said == [f"refits {j}/12 done" for j in range(1, 12)]  # (minutes of refits were silent)
    assert set(r["per_model"]) == set(sim.matrix.models)
    assert 0.95 <= r["pearson_min"] <= r["pearson_mean"] <= 1.0
    assert 0.9 <= r["spearman_min"] <= r["spearman_mean"] <= 1.0


def test_leave_one_model_out_exposes_a_degenerate_panel():
    # Two informative models and one that answers everything right: dropping either
    # informative model leaves a fit that cannot order the items.
    sim = simulate_responses(2, 60, 16, seed=9)
    c = np.vstack([sim.matrix.correct, np.full((1, 60), 16)])
    t = np.vstack([sim.matrix.trials, np.full((1, 60), 16)])
    r = leave_one_model_out(_matrix(c, t))
    assert r["pearson_min"] < 0.95


def test_leave_one_model_out_leaves_undefined_refits_out_quietly():
    # Without m0 the two items are answered alike, so that refit's difficulties are equal and its correlation
    # undefined: left out of the mean and min (which were NaN) and counted, without scipy's warning.
    import warnings

    m = _matrix([[0, 1], [1, 1], [0, 0]], np.ones((3, 2), dtype=int))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = leave_one_model_out(m)
    assert np.isnan(r["per_model"]["m0"]["pearson"]) and np.isnan(r["per_model"]["m0"]["spearman"])
    assert (r["undefined"], r["refits"]) == (1, 3)
    assert r["pearson_mean"] == pytest.approx(1.0) and r["pearson_min"] == pytest.approx(1.0)
    assert r["spearman_mean"] == pytest.approx(1.0) and r["spearman_min"] == pytest.approx(1.0)


def test_bic_selects_the_generating_model():
    one = simulate_responses(20, 150, 8, seed=2)
    r1 = compare_models(one.matrix)
    assert r1["selected"] == "1pl" and r1["delta_bic"] > 0
    assert r1["n_observations"] == 20 * 150 * 8 and r1["k_2pl"] - r1["k_1pl"] == 150
    # BIC by hand from the reported likelihoods.
    assert r1["bic_1pl"] == pytest.approx(r1["k_1pl"] * np.log(r1["n_observations"]) - 2 * r1["log_likelihood_1pl"])
    a = np.where(np.arange(150) % 2 == 0, 0.3, 3.0)
    two = simulate_responses(20, 150, 8, discrimination=a, ability_sd=1.5, seed=2)
    r2 = compare_models(two.matrix)
    assert r2["selected"] == "2pl" and r2["delta_bic"] < 0


def test_model_inversions_count_the_same_pair_by_pair_and_item_by_item():
    # 10,000 models took minutes pair by pair (10^8 pairs); past PAIR_LOOP_MODELS they are counted item by
    # item from Kendall's tau-b. Both ways on a matrix with ties, a missing cell and partial trials.
    from benchfill.irt.checks import _model_inversions

    rng = np.random.default_rng(4)
    trials = rng.integers(1, 4, (40, 25))
    correct = rng.binomial(trials, 0.5)
    trials[3, 7] = correct[3, 7] = 0
    m = ResponseMatrix(tuple(f"m{j}" for j in range(40)), tuple(f"i{i}" for i in range(25)), correct, trials)
    p = m.success_rate
    seen = ~np.isnan(p)
    rate = np.nanmean(p, axis=1)
    by_pairs = _model_inversions(p, seen, rate, pairs=True)
    assert by_pairs[1] > 0 and by_pairs == _model_inversions(p, seen, rate, pairs=False)
    # transposed, the item side: the same both ways too
    rate_item = np.nanmean(p, axis=0)
    by_pairs = _model_inversions(p.T, seen.T, rate_item, pairs=True)
    assert by_pairs[1] > 0 and by_pairs == _model_inversions(p.T, seen.T, rate_item, pairs=False)


def test_leave_one_model_out_on_a_partial_matrix_leaves_out_what_only_that_model_tried():
    # an item only m0 ran has no difficulty once m0 is left out; fit refuses to place it by the prior, and the
    # whole of `fit --loo` failed on such a matrix (imports report partial matrices as normal)
    sim = simulate_responses(6, 20, 4, seed=2)
    m = sim.matrix
    trials, correct = m.trials.copy(), m.correct.copy()
    trials[1:, 0] = correct[1:, 0] = 0
    partial = ResponseMatrix(m.models, m.item_ids, correct, trials)
    out = leave_one_model_out(partial)
    assert out["pearson_min"] > 0.5 and np.isfinite(out["pearson_mean"])
