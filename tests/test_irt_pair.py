"""The (model, item) offsets from the IRT curve (benchfill/irt/pair.py): their sd recovered from repeated
answers, by hand at the extremes, and what the annotator makes of them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchfill.irt.pair import MAX_SD, pair_sd, raw_pair_sd
from benchfill.matrix import ResponseMatrix
from benchfill.search.annotate import Annotator
from benchfill.search.services import Probe


def _matrix(sd: float, seed: int, models: int = 12, items: int = 120, trials: int = 8,
            slope_sd: float = 0.0) -> ResponseMatrix:
    rng = np.random.default_rng(seed)
    theta, b = np.linspace(-2, 2, models), rng.normal(0, 1, items)
    a = np.exp(slope_sd * rng.standard_normal(items))
    eta = a[None, :] * (theta[:, None] - b[None, :]) + sd * rng.standard_normal((models, items))
    n = np.full((models, items), trials)
    return ResponseMatrix(tuple(f"m{j}" for j in range(models)), tuple(f"q{i}" for i in range(items)),
                          rng.binomial(n, 1 / (1 + np.exp(-eta))), n, np.zeros(items), "drawn")


@pytest.mark.parametrize("sd", [0.0, 1.5, 3.0])
def test_the_offsets_sd_is_recovered_from_a_panels_repeated_answers(sd):
    est = []
    for seed in range(2):
        m = _matrix(sd, seed)
        est.append(pair_sd(m, list(m.models), seed=seed)[0])
    assert abs(np.mean(est) - sd) < 0.25 + 0.1 * sd, est


def test_an_items_own_slope_is_not_taken_for_offsets():
    """Slopes of sd 0.5 about 1 (the misfit allowance's part) with no offsets: about 0, where the 1PL's
    curve would read the slopes' lean as offsets."""
    est = [pair_sd(_matrix(0.0, seed, slope_sd=0.5), [f"m{j}" for j in range(12)], seed=seed)[0] for seed in range(2)]
    assert max(est) < 0.2, est


def test_by_hand_at_the_extremes():
    x, g = np.zeros(200), np.zeros(200)
    n = np.full(200, 10.0)
    # every pair all right or all wrong, half each, at a curve of 50%: no finite offset explains it less
    assert raw_pair_sd(x, g, np.tile([0.0, 10.0], 100), n) == pytest.approx(MAX_SD, abs=0.01)
    # five of ten in every pair: less spread than the binomial's own, the offsets' sd at its floor
    assert raw_pair_sd(x, g, np.full(200, 5.0), n) == pytest.approx(0.0, abs=0.01)
    # too few repeated cells: nothing said, and why
    m = _matrix(1.0, 0, models=3, items=5)
    sd, info = pair_sd(m, list(m.models))
    assert sd == 0.0 and info["cells"] == 15 and "fewer than" in info["note"]
    # one-trial answers carry nothing about the offsets: they are not counted
    one = _matrix(1.0, 0, trials=1)
    assert pair_sd(one, list(one.models))[1]["cells"] == 0


def test_the_placement_carries_the_offsets_as_only_more_probes_lower_them():
    # by hand: s = 2, two probes sharing the information equally: 4 (0.25 + 0.25) = 2 logits^2; one probe: 4
    probes = [Probe("lo", -0.5, 8), Probe("hi", 0.5, 8)]
    plain = Annotator(None, probes, 0.0, -3.0, 3.0, "fixed")
    with_pair = Annotator(None, probes, 0.0, -3.0, 3.0, "fixed", pair=2.0)
    for trials in ({"lo": 8, "hi": 8}, {"lo": 800, "hi": 800}):
        s0, a0, m0 = plain._parts(0.0, trials)
        s1, a1, m1 = with_pair._parts(0.0, trials)
        # two probes symmetric about b = 0 share the information equally, at any number of rollouts
        assert (s1, a1) == (s0, a0) and m1 - m0 == pytest.approx(2.0)
    s, _, m = with_pair._parts(0.0, {"lo": 800, "hi": 0})
    assert m == pytest.approx(4.0) and s < 0.01  # one probe's rollouts leave its offset whole
    assert math.isfinite(with_pair._parts(0.0, {"lo": 8, "hi": 8})[2])


def test_a_placed_items_stated_se_carries_the_offsets_beside_its_slopes():
    """The placement of an item (``_estimate``), with the misfit allowance on as runs have it: its own fixed
    part grows by s^2 sum w_j^2 (here two probes symmetric about the item: 2 logits^2 at s = 2)."""
    probes = [Probe("lo", -0.5, 8), Probe("hi", 0.5, 8)]
    correct, trials = {"lo": 32, "hi": 32}, {"lo": 64, "hi": 64}
    span = 6.0
    own = {}
    for pair in (0.0, 2.0):
        ann = Annotator(None, probes, 0.0, -3.0, 3.0, "fixed", misfit=0.5, pair=pair)._estimate(correct, trials)
        own[pair] = (ann.misfit_z_se * span) ** 2
    assert own[2.0] - own[0.0] == pytest.approx(2.0, rel=0.02)
