"""The chance an item lies inside a gap whose edges are estimates too (``coverage.inside_chance``).

Values worked by hand where the integral has a closed form, and by simulation where it has none.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchfill.coverage import inside_chance


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def test_exact_edges_give_the_normal_interval_chance():
    # the item at 0.52, se 0.05, in (0.45, 0.60): Phi(1.6) - Phi(-1.4) = 0.945201 - 0.080757
    assert inside_chance(0.52, 0.05, 0.45, 0.60) == pytest.approx(_phi(1.6) - _phi(-1.4), abs=1e-6)
    assert inside_chance(0.52, 0.05, 0.45, 0.60) == pytest.approx(0.864444, abs=1e-5)
    assert inside_chance(0.5, 0.0, 0.45, 0.6) == 1.0 and inside_chance(0.7, 0.0, 0.45, 0.6) == 0.0


def test_an_exact_item_between_uncertain_edges_is_the_product_of_two_normal_chances():
    # the item exactly at 0.5; edges at 0.4 and 0.6, each se 0.1: both must fall on their side, Phi(1)^2
    assert inside_chance(0.5, 0.0, 0.4, 0.6, 0.1, 0.1) == pytest.approx(_phi(1.0) ** 2, abs=1e-12)
    assert _phi(1.0) ** 2 == pytest.approx(0.707861, abs=1e-6)
    # one edge exact: that edge's factor is 1 where the item lies on its side
    assert inside_chance(0.5, 0.0, 0.4, 0.6, 0.0, 0.05) == pytest.approx(_phi(2.0), abs=1e-12)


def test_uncertain_item_and_edges_match_a_simulation():
    rng = np.random.default_rng(7)
    n = 400_000
    for z, se, left, right, lse, rse in [(0.52, 0.04, 0.45, 0.6, 0.03, 0.05), (0.40, 0.08, 0.45, 0.6, 0.02, 0.0),
                                         (0.9, 0.02, 0.85, 1.0, 0.04, 0.0)]:
        x = rng.normal(z, se, n)
        inside = (rng.normal(left, lse, n) < x) & (x < rng.normal(right, rse, n))
        # the simulation's own se is at most 0.0008 here
        assert inside_chance(z, se, left, right, lse, rse) == pytest.approx(inside.mean(), abs=0.003), (z, se)
    # the edges' error lowers the chance of an item placed well inside, never to below that of exact edges
    # where the item lies far from both
    assert inside_chance(0.52, 0.04, 0.45, 0.6, 0.03, 0.03) < inside_chance(0.52, 0.04, 0.45, 0.6)


def test_extreme_spreads_keep_their_limits():
    # an item se far below the edges' is an exact item (a window of +-12 se had fallen below float resolution: 0)
    exact = _phi(0.1 / 0.03) ** 2
    for se in (1e-300, 1e-15, 1e-13):
        assert inside_chance(0.5, se, 0.4, 0.6, 0.03, 0.03) == pytest.approx(exact, abs=1e-9)
    # an item se far above the gap and its edges': the density at the gap times the gap's expected width where it
    # is open, E[(R - L)+] = m Phi(m / s) + s phi(m / s) for R - L ~ N(m, s^2), over se sqrt(2 pi)
    # (quad's wide subintervals had stepped over the edges' spread: 16-39% low)
    for z, se, left, right, edge_se in ((0.5, 30.0, 0.4, 0.6, 0.04), (0.5, 3.0, 0.49, 0.51, 0.005),
                                        (0.5, 4.0, 0.49, 0.51, 0.01)):
        m, s = right - left, edge_se * math.sqrt(2)
        open_width = m * _phi(m / s) + s * math.exp(-0.5 * (m / s) ** 2) / math.sqrt(2 * math.pi)
        assert inside_chance(z, se, left, right, edge_se, edge_se) == pytest.approx(
            open_width / (se * math.sqrt(2 * math.pi)), rel=2e-3)


def test_an_item_on_an_exact_edge_is_half_inside_whatever_its_spread():
    # next to an exact edge the item's own spread decides, however small: half of it lies on each side (the
    # shortcut for a tiny se had taken the edge as a step: 0 at it, 0.54 a hair inside)
    far = 1 - _phi(-0.1)  # P(the right edge, se 1, lies above 0.4): 0.5398
    for se in (1e-9, 2e-9, 1e-6):
        assert inside_chance(0.4, se, 0.4, 0.5, 0.0, 1.0) == pytest.approx(0.5 * far, abs=1e-6)


def test_break_points_an_ulp_apart_say_nothing(recwarn):
    value = inside_chance(0.43, 0.01, 0.4, 0.5, 0.02, 0.02)  # left + 8 se and right + 3 se one ulp apart
    assert 0.0 < value < 1.0 and not [w for w in recwarn if "integr" in str(w.message).lower()]
