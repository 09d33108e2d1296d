"""Item profiles along the model axis (benchfill.measure.profiles, trajectory): hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchfill.matrix import ResponseMatrix
from benchfill.measure.profiles import endpoint_evidence, profile, reference_function
from benchfill.measure.trajectory import answer_entropy, crossings, isotonic_fit, model_axis

MODELS = ("m1", "m2", "m3", "m4", "m5")  # the axis, weakest first: positions 0, .25, .5, .75, 1
T = 4
# Eight hand-made items, correct counts out of T = 4 along the axis.
HAND = {
    "A": [0, 1, 2, 3, 4],  # c = 0 .25 .5 .75 1: already monotone, fit = c, D = 0
    "B": [0, 0, 4, 4, 4],  # a sharp step between m2 and m3
    "C": [0, 0, 0, 0, 4],  # only the strongest model solves it
    "D": [2, 2, 2, 2, 2],  # flat at .5: no transition
    "E": [4, 4, 4, 4, 0],  # the strongest model fails: pooled to a flat .8, a large D
    "F": [0, 2, 1, 3, 4],  # one local reversal (m2 > m3)
    "G": [1, 3, 3, 3, 3],  # rises early from .25 to .75
    "H": [4, 0, 4, 0, 4],  # zig-zag
}


def hand_matrix() -> ResponseMatrix:
    k = np.array(list(HAND.values())).T  # models x items
    return ResponseMatrix(MODELS, tuple(HAND), k, np.full_like(k, T))


@pytest.fixture(scope="module")
def hand_profile():
    return profile(hand_matrix(), order=MODELS, cache_dir=False, draws=199)


def test_isotonic_fit_pools_violators():
    f = isotonic_fit(np.array([HAND["F"], HAND["E"], HAND["H"]]), T)
    # F: (.5, .25) pool to .375; E: all five pool to 16/20 = .8; H: (1,0),(1,0) pool to .5 each.
    np.testing.assert_allclose(f[0], [0, .375, .375, .75, 1])
    np.testing.assert_allclose(f[1], [.8] * 5)
    np.testing.assert_allclose(f[2], [.5, .5, .5, .5, 1])


def test_isotonic_fit_long_axis_matches_short_axis_code():
    # Above 16 models the compiled PAVA is used; both paths and scipy must agree on the same rows.
    rng = np.random.default_rng(3)
    t = rng.integers(1, 6, size=(50, 20))
    k = rng.binomial(t, 0.5)
    from benchfill.measure import trajectory

    long = isotonic_fit(k, t)
    old = trajectory.VECTORISED_MAX_MODELS
    try:
        trajectory.VECTORISED_MAX_MODELS = 100  # force the min-max form on the same rows
        short = isotonic_fit(k, t)
    finally:
        trajectory.VECTORISED_MAX_MODELS = old
    np.testing.assert_allclose(long, short, atol=1e-12)
    assert np.all(np.diff(long, axis=1) >= -1e-12)
    from scipy.optimize import isotonic_regression

    ref = np.array([isotonic_regression(k[r] / t[r], weights=t[r]).x for r in range(len(k))])
    np.testing.assert_allclose(long, ref, atol=1e-12)


def test_positions_and_widths_by_hand(hand_profile):
    bp = hand_profile
    # (x, w) worked out on the piecewise-linear fit through positions 0, .25, .5, .75, 1:
    expected = {
        "A": (0.5, 0.75 - 0.25),  # levels .25/.5/.75 are hit exactly at m2, m3, m4
        # B: fit 0 0 1 1 1; level L is reached between m2 (.25, 0) and m3 (.5, 1) at .25 + .25 L
        "B": (0.25 + 0.25 * 0.5, 0.25 * 0.75 - 0.25 * 0.25),  # 0.375, 0.125
        "C": (0.75 + 0.25 * 0.5, 0.125),  # same shape between m4 and m5: 0.875
        # F: fit 0 .375 .375 .75 1. Q.25: between m1 (0) and m2 (.375): .25 * (.25/.375) = 1/6;
        # Q.5: between m3 (.375) and m4 (.75): .5 + .25 * (.125/.375) = 7/12; Q.75: at m4 = .75
        "F": (7 / 12, 0.75 - 1 / 6),
        # G: fit .25 .75 .75 .75 .75, gain .5; levels .375/.5/.625 between m1 and m2:
        # .25 * (.125/.5) = .0625, .125, .1875
        "G": (0.125, 0.1875 - 0.0625),
        # H: fit .5 .5 .5 .5 1, gain .5; levels .625/.75/.875 between m4 and m5: .8125 .875 .9375
        "H": (0.875, 0.125),
    }
    for item, (x, w) in expected.items():
        p = bp[item]
        assert not p.flat
        assert p.position == pytest.approx(x), item
        assert p.width == pytest.approx(w), item


def test_flat_items_get_the_reference_function(hand_profile):
    bp = hand_profile
    # Rising items as (mean correctness a, position x), sorted by a, with anchors (0, 1), (1, 0):
    # (0,1) C(.2,.875) A(.5,.5) F(.5,7/12) B(.6,.375) H(.6,.875) G(.65,.125) (1,0).
    # Non-increasing fit: A, F, B, H pool to (.5 + 7/12 + .375 + .875) / 4 = 7/12; the rest stay.
    # D: a = .5 -> h = 7/12. E: a = (1+1+1+1+0)/5 = .8, between (.65, .125) and (1, 0):
    # .125 - .125 * (.8 - .65) / .35 = 0.0714286.
    assert bp["D"].flat and bp["E"].flat
    assert bp["D"].position == pytest.approx(7 / 12)
    assert bp["E"].position == pytest.approx(0.125 - 0.125 * 0.15 / 0.35)
    assert bp["D"].width == 1.0 and bp["E"].width == 1.0
    assert bp["D"].validity == 0.0 and bp["E"].validity == 0.0
    s = bp.summary()
    assert s["flat_share"] == pytest.approx(2 / 8)
    assert s["position"]["n"] == 6  # flat items stay out of the transition summaries
    assert s["position"]["mean"] == pytest.approx(np.mean([.5, .375, .875, 7 / 12, .125, .875]))


def test_reference_function_pools_tied_mean_correctness_before_the_fit():
    # Rising items (a, x): (.4, .5), (.5, .9), (.5, .1), with anchors (0, 1) and (1, 0). The two items at
    # a = .5 pool to x = .5 (weight 2); 1, .5, .5, 0 is already non-increasing, so h(.45) = .5 whichever
    # of the tied items comes first. Fitted in row order instead, (.5, .9) before (.5, .1) pools .5 with
    # .9 and gives h(.45) = .55.
    for xs in ([.5, .9, .1], [.5, .1, .9]):
        h = reference_function(np.array([.4, .5, .5]), np.array(xs))
        assert h(np.array([.45, .5, .7, 0.0])) == pytest.approx([.5, .5, .5 - .5 * .2 / .5, 1.0])
    # without ties nothing changes: 1, .9, .7, .2, 0 is non-increasing and read as it is
    h = reference_function(np.array([.2, .5, .8]), np.array([.9, .7, .2]))
    assert h(np.array([.35, .65])) == pytest.approx([.8, .45])


def test_flat_positions_do_not_depend_on_the_row_order():
    # one response per model: mean correctness is a multiple of 1/6, so many rising items tie
    rng = np.random.default_rng(5)
    models = tuple(f"m{j}" for j in range(6))
    k = (rng.random((6, 300)) < np.linspace(.2, .8, 6)[:, None]).astype(int)
    ids = tuple(f"q{i}" for i in range(300))
    flip = np.arange(300)[::-1]
    one = profile(ResponseMatrix(models, ids, k, np.ones_like(k)), order=models, cache_dir=False, draws=19)
    two = profile(ResponseMatrix(models, tuple(ids[i] for i in flip), k[:, flip], np.ones_like(k)),
                  order=models, cache_dir=False, draws=19)
    flat = [p.item_id for p in one.items if p.flat]
    assert len(flat) >= 5
    assert [two[i].position for i in flat] == pytest.approx([one[i].position for i in flat], abs=1e-12)


def test_lr_statistic_by_hand(hand_profile):
    bp = hand_profile
    # D = 2 sum_i [k_i log(c_i / f_i) + (T - k_i) log((1 - c_i) / (1 - f_i))], 0 log 0 = 0.
    d = {
        "A": 0.0, "B": 0.0, "C": 0.0, "D": 0.0, "G": 0.0,
        # E: four models at c = 1 against .8 (4 log 1.25 each), one at c = 0 against .8 (4 log 5)
        "E": 2 * (16 * math.log(1.25) + 4 * math.log(5)),
        # F: m2 (2 of 4, f .375): 2 log(.5/.375) + 2 log(.5/.625); m3 (1 of 4): log(.25/.375) + 3 log(.75/.625)
        "F": 2 * (2 * math.log(4 / 3) + 2 * math.log(0.8) + math.log(2 / 3) + 3 * math.log(1.2)),
        # H: four pooled models, each 4 log 2 away from .5
        "H": 2 * 16 * math.log(2),
    }
    for item, value in d.items():
        assert bp[item].statistic == pytest.approx(value, abs=1e-9), item
    # the two clear reversals are flagged, the monotone items are not (o = 1 when D = 0)
    assert bp["E"].flagged and bp["H"].flagged
    for item in "ABCDG":
        assert bp[item].order_consistency == 1.0 and not bp[item].flagged
    # both sit at the smallest possible o = 1/(B + 1); the larger D ranks first
    assert bp["E"].order_consistency == bp["H"].order_consistency == pytest.approx(1 / 200)
    assert [p.item_id for p in bp.flagged()][:2] == ["H", "E"]


def test_endpoint_evidence_by_hand():
    # theta_1 ~ Beta(1, 2) (0 of 1), theta_n ~ Beta(2, 1) (1 of 1):
    # Pr = int_0^1 2x * (2x - x^2) dx = 4/3 - 1/2 = 5/6
    assert endpoint_evidence(0, 1, 1, 1) == pytest.approx(5 / 6)
    assert endpoint_evidence(3, 10, 3, 10) == pytest.approx(0.5)
    # against a numerical integral for unequal budgets
    from scipy import integrate, stats

    a, b = stats.beta(1 + 2, 1 + 8), stats.beta(1 + 5, 1 + 1)
    num = integrate.quad(lambda y: a.pdf(y) * b.sf(y), 0, 1)[0]
    assert endpoint_evidence(2, 10, 5, 6) == pytest.approx(num, abs=1e-8)


def test_validity_is_gain_times_endpoint_evidence(hand_profile):
    p = hand_profile["G"]  # gain .5; endpoints 1 of 4 and 3 of 4
    assert p.gain == pytest.approx(0.5)
    assert p.validity == pytest.approx(0.5 * float(endpoint_evidence(1, 4, 3, 4)))
    assert p.concentration is None


def test_entropy_and_concentration_with_answer_states():
    m = hand_matrix()
    answers = {}
    for j, model in enumerate(MODELS):  # item A: the strongest models all give the same answer
        k = HAND["A"][j]
        answers[(model, "A")] = {"right": k, "wrong1": T - k}
        answers[(model, "B")] = {"x": 1, "y": 1, "z": 1, "w": 1}  # four states, uniform
    bp = profile(m, order=MODELS, answers=answers, n_states={"A": 4}, cache_dir=False, draws=99)
    e = bp["A"].entropy
    # m1: all 4 "wrong1" -> 0; m2: (1, 3) over M = 4 -> H = -(.25 ln .25 + .75 ln .75) / ln 4
    assert e[0] == 0.0
    assert e[1] == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) / math.log(4))
    # top ceil(5/4) = 2 models: m4 (3, 1) and m5 (4, 0): concentration 1 - (e4 + 0) / 2
    assert bp["A"].concentration == pytest.approx(1 - e[3] / 2)
    assert bp["A"].validity == pytest.approx(1.0 * bp["A"].gamma * bp["A"].concentration)
    assert bp["B"].entropy[2] == pytest.approx(1.0)  # uniform over the four states seen
    assert bp["C"].entropy is not None and all(math.isnan(v) for v in bp["C"].entropy)
    assert answer_entropy({"a": 5}, 10) == 0.0


def test_answers_the_matrix_does_not_know_or_that_outnumber_trials_are_refused():
    from benchfill.errors import DataError

    m = hand_matrix()
    with pytest.raises(DataError, match=r"none of its 1 \(model, item\) pairs .* model 'X', item 'A'"):
        profile(m, order=MODELS, answers={("X", "A"): {"a": 1}}, cache_dir=False, draws=19)
    with pytest.raises(DataError, match="5 answers for model 'm1', item 'A', which has 4 trials"):
        profile(m, order=MODELS, answers={("m1", "A"): {"a": 3, "b": 2}}, cache_dir=False, draws=19)


def test_crossings_ignore_rows_without_a_rise():
    out = crossings(np.array([[0.3, 0.3, 0.3], [0, 0.5, 1]]), np.array([0, 0.5, 1]), (0.5,))
    assert math.isnan(out[0, 0]) and out[1, 0] == pytest.approx(0.5)


def test_model_axis_orders_by_performance_or_ability():
    k = np.array([[5, 5], [1, 1], [9, 9]])
    m = ResponseMatrix(("mid", "weak", "strong"), ("i1", "i2"), k, np.full_like(k, 10))
    assert model_axis(m).models == ("weak", "mid", "strong")
    from benchfill.irt.fit import IrtFit

    fit = IrtFit("1pl", "map", ("mid", "weak", "strong"), ("i1", "i2"), np.array([3.0, 1.0, 2.0]),
                 np.zeros(3), np.zeros(2), np.zeros(2), np.zeros(2))
    assert model_axis(m, fit=fit).models == ("weak", "strong", "mid")
    assert model_axis(m).positions.tolist() == [0.0, 0.5, 1.0]


def test_untried_pairs_are_dropped_from_the_item_trajectory():
    # m3 never tried item "b": its trajectory has four points, positions 0, .25, .75, 1.
    k = np.array([[0, 0], [1, 1], [2, 0], [3, 3], [4, 4]])
    t = np.array([[4, 4], [4, 4], [4, 0], [4, 4], [4, 4]])
    bp = profile(ResponseMatrix(MODELS, ("a", "b"), k, t), order=MODELS, cache_dir=False, draws=99)
    b = bp["b"]
    assert math.isnan(b.correctness[2]) and math.isnan(b.fitted[2]) and b.trials[2] == 0
    # fit 0 .25 . .75 1: the midpoint .5 lies halfway between m2 (.25) and m4 (.75) -> x = .5
    assert b.position == pytest.approx(0.5)
    assert b.statistic == 0.0


def test_items_tried_by_fewer_than_two_models_are_listed_not_profiled():
    k = np.array([[0, 1], [1, 0], [2, 0]])
    t = np.array([[2, 2], [2, 0], [2, 0]])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bp = profile(ResponseMatrix(("a", "b", "c"), ("ok", "lone"), k, t), cache_dir=False, draws=99)
    assert [p.item_id for p in bp.items] == ["ok"] and bp.unprofiled == ("lone",)
    assert bp.summary()["unprofiled"] == 1


def test_isotonic_fit_without_numba_gives_the_same_fit():
    """numba is an optional extra; without it long axes fall back to scipy row by row."""
    import numpy as np

    from benchfill.measure.trajectory import _scipy_rows, isotonic_fit

    rng = np.random.default_rng(3)
    t = rng.integers(1, 11, size=(50, 30)).astype(float)
    k = rng.binomial(t.astype(int), rng.uniform(0, 1, size=t.shape)).astype(float)
    assert np.allclose(_scipy_rows(k, t), isotonic_fit(k, t))


def test_the_library_refuses_the_settings_the_command_line_refuses():
    # profile() once took alpha 2 (every item flagged), draws 0 (nothing could be flagged) and a text seed
    from benchfill.errors import ConfigError

    m = ResponseMatrix(("a", "b", "c"), ("x", "y"), np.array([[0, 1], [1, 1], [2, 2]]), np.full((3, 2), 2))
    for kw, said in (({"alpha": 2}, r"^alpha must be in \(0, 1\), got 2$"), ({"alpha": -1}, "alpha must be"),
                     ({"draws": 0}, r"^draws must be a whole number in 19\.\.9999, got 0$"),
                     ({"draws": -5}, "draws must be"), ({"draws": 99.5}, "draws must be"),
                     ({"seed": "x"}, r"^seed must be a non-negative whole number, got 'x'$")):
        with pytest.raises(ConfigError, match=said):
            profile(m, cache_dir=False, **kw)


def test_a_panel_that_cannot_reach_alpha_is_said_to_have_no_power():
    from benchfill.measure.order_test import order_consistency

    # five models, one trial each: the most reversed answers, [1 1 1 0 0] or any other split, reach o 0.135 at best
    k = np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 0, 0, 0, 0]]).T
    one = ResponseMatrix(MODELS, ("r", "s", "t"), k, np.ones_like(k))
    bp = profile(one, order=MODELS, cache_dir=False, draws=199)
    best = min(order_consistency([1] * s + [0] * (5 - s), [1] * 5, draws=199, cache_dir=False).p_value
               for s in range(1, 5))  # fmt: skip
    assert bp.powerless == 3 and bp.least_o == pytest.approx(best) and best > 0.05
    assert bp.summary()["powerless"] == 3 and not bp.flagged()
    # four trials each: the test can flag (item E of the hand matrix is)
    hand = profile(hand_matrix(), order=MODELS, cache_dir=False, draws=199)
    assert hand.powerless == 0 and math.isnan(hand.least_o) and hand["E"].flagged


def test_concentration_reads_the_strongest_quarter_not_the_weakest():
    # docs/profiles.md: concentration from the strongest ceil(n/4) models; the weak end of this item spreads
    # its answers over three states, the strong end over two, so the two ends differ
    m = hand_matrix()
    answers = {}
    for j, model in enumerate(MODELS):
        k = HAND["A"][j]
        answers[(model, "A")] = {"right": k, "w1": T - k} if j != 1 else {"right": 1, "w1": 1, "w2": 2}
    bp = profile(m, order=MODELS, answers=answers, n_states={"A": 4}, cache_dir=False, draws=99)
    e = bp["A"].entropy
    assert e[1] != pytest.approx(e[3])
    assert bp["A"].concentration == pytest.approx(1 - (e[3] + e[4]) / 2)


def test_an_item_at_exactly_alpha_is_flagged_and_the_weighted_means_weigh_by_validity(hand_profile):
    p = hand_profile["E"]
    assert p.flagged and p.order_consistency <= hand_profile.alpha
    # o <= alpha, the boundary included: at 19 draws the least o is 1/20 = alpha
    at = profile(hand_matrix(), order=MODELS, cache_dir=False, draws=19, alpha=0.05)
    assert any(x.order_consistency == pytest.approx(0.05) for x in at.items)
    assert all(x.flagged == (x.order_consistency <= 0.05) for x in at.items)
    s = hand_profile.summary()
    rising = [x for x in hand_profile.items if not x.flat]
    x = np.array([q.position for q in rising])
    v = np.array([q.validity for q in rising])
    assert s["position_weighted_mean"] == pytest.approx(float(np.sum(x * v) / np.sum(v)))
    assert s["position_weighted_mean"] != pytest.approx(float(np.mean(x)))
