"""Profile-guided subsets (benchfill.measure.profiles_subset): selection rules, NDR and tau-b by hand."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.matrix import ResponseMatrix
from benchfill.measure.profiles import profile
from benchfill.measure.profiles_subset import _allocate, evaluate_subsets, kendall_tau_b, ndr, select_subset


def test_ndr_by_hand():
    # full scores along the axis .1 .3 .6: |gaps| sum to .2 + .3 = .5.
    # subset scores .2 .1 .7: gaps -.1 and .6; only the positive part counts: .6 / .5 = 1.2
    assert ndr([0.2, 0.1, 0.7], [0.1, 0.3, 0.6]) == pytest.approx(1.2)
    assert ndr([0.1, 0.3, 0.6], [0.1, 0.3, 0.6]) == pytest.approx(1.0)


def test_kendall_tau_b_by_hand():
    # pairs of (a, b): (1,1) (2,3) (3,2) (4,4): 5 concordant, 1 discordant, no ties -> (5 - 1) / 6
    assert kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)


def test_allocation_is_equal_then_capped():
    assert _allocate(9, [10, 10, 10]) == [3, 3, 3]
    assert _allocate(9, [1, 10, 10]) == [1, 4, 4]
    assert sum(_allocate(7, [2, 2, 2])) == 6  # never more than the strata hold


def _world(seed=0, n_models=8, n_items=300, trials=10, bad=30):
    rng = np.random.default_rng(seed)
    ability = np.linspace(-2, 2, n_models)
    b = rng.uniform(-2.5, 2.5, n_items)
    p = 1 / (1 + np.exp(-(ability[:, None] - b[None, :]) * 1.5))
    p[:, :bad] = p[::-1, :bad]  # the first `bad` items run backwards: strong models fail them
    k = rng.binomial(trials, p)
    models = tuple(f"m{j}" for j in range(n_models))
    return ResponseMatrix(models, tuple(f"q{i}" for i in range(n_items)), k, np.full_like(k, trials))


def test_selection_screens_out_flagged_items_and_spreads_positions():
    m = _world()
    bp = profile(m, order=m.models, cache_dir=False, draws=199)
    chosen = select_subset(bp, 40, seed=1)
    assert len(set(chosen)) == 40
    assert not any(bp[i].flagged or bp[i].flat for i in chosen)
    # one stratum per interval between adjacent models: 7 strata, each gets a share
    strata = {min(int(bp[i].position * 7), 6) for i in chosen}
    assert len(strata) >= 6
    assert sum(bp[f"q{i}"].flagged for i in range(30)) >= 25  # the reversed items are screened out


def test_profile_guided_subsets_separate_models_better_than_random():
    m = _world(seed=2)
    bp = profile(m, order=m.models, cache_dir=False, draws=199)
    r = evaluate_subsets(bp, m, 40, repeats=10, seed=0)
    assert r.ndr_profile[0] > r.ndr_random[0]
    assert r.tau_profile[0] >= r.tau_random[0]
