"""Coverage metrics against values worked out by hand (Appendix C.4 definitions)."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.coverage import (
    Target,
    ddm,
    diagnose,
    expected_uniform_max_gap,
    gaps,
    max_gap,
    parse_target,
    prob_max_gap_exceeds_uniform,
    resolution,
    spacings,
    top_k_gap_sum,
    uniform_max_gap_cdf,
)
from benchfill.errors import BenchfillError

# z sorted: 0.1 0.4 0.4 0.9; grid u = .125 .375 .625 .875
# |z - u| = .025 .025 .225 .025 -> DDM = 0.3 / 4 = 0.075
# spacings with 0 and 1: 0.1 0.3 0.0 0.5 0.1
Z = [0.4, 0.1, 0.9, 0.4]
IDS = ["b", "a", "d", "c"]


def test_ddm_by_hand_with_ties():
    assert ddm(Z) == pytest.approx(0.075)


def test_spacings_and_max_gap_by_hand():
    assert spacings(Z) == pytest.approx([0.1, 0.3, 0.0, 0.5, 0.1])
    assert max_gap(Z) == pytest.approx(0.5)
    assert top_k_gap_sum(Z, 1) == pytest.approx(0.5)
    assert top_k_gap_sum(Z, 2) == pytest.approx(0.8)
    assert top_k_gap_sum(Z, 3) == pytest.approx(0.9)  # tie of two 0.1 gaps: either counts 0.1
    assert top_k_gap_sum(Z, 5) == pytest.approx(1.0)  # all n + 1 gaps cover the axis
    assert top_k_gap_sum(Z, 50) == pytest.approx(1.0)


def test_gap_list_end_points_and_items():
    g = gaps(Z, k=4, item_ids=IDS)
    assert [v for x in g for v in (x.left, x.right)] == pytest.approx([0.4, 0.9, 0.1, 0.4, 0.0, 0.1, 0.9, 1.0])
    assert [x.width for x in g] == pytest.approx([0.5, 0.3, 0.1, 0.1])
    # The 0.4 tie: "b" comes first in input order, "c" bounds the widest gap.
    assert (g[0].left_item, g[0].right_item) == ("c", "d")
    assert (g[1].left_item, g[1].right_item) == ("a", "b")
    assert (g[2].left_item, g[2].right_item) == (None, "a")  # the 0 end point
    assert (g[3].left_item, g[3].right_item) == ("d", None)  # the 1 end point


def test_single_item():
    assert ddm([0.3]) == pytest.approx(0.2)  # grid is the single point 0.5
    assert max_gap([0.3]) == pytest.approx(0.7)
    assert top_k_gap_sum([0.3], 5) == pytest.approx(1.0)
    assert [v for g in gaps([0.3], k=5) for v in (g.left, g.right)] == pytest.approx([0.3, 1.0, 0.0, 0.3])


def test_all_items_at_one_difficulty():
    z = [0.5] * 4
    assert ddm(z) == pytest.approx(0.25)  # (.375 + .125 + .125 + .375) / 4
    assert max_gap(z) == pytest.approx(0.5)
    assert top_k_gap_sum(z, 5) == pytest.approx(1.0)
    assert sorted(spacings(z)) == pytest.approx([0, 0, 0, 0.5, 0.5])


def test_perfect_grid_has_zero_ddm_and_even_gaps():
    z = (np.arange(1, 11) - 0.5) / 10
    assert ddm(z) == pytest.approx(0.0, abs=1e-12)
    assert max_gap(z) == pytest.approx(0.1)
    assert top_k_gap_sum(z, 5) == pytest.approx(0.5)  # five of the nine 0.1 interior gaps
    assert top_k_gap_sum(z, 11) == pytest.approx(1.0)  # nine 0.1 gaps + two 0.05 end gaps


def test_out_of_range_item_widens_axis_instead_of_negative_gap():
    s = spacings([-0.2, 0.5])
    assert np.all(s >= 0) and s.sum() == pytest.approx(1.2)


def test_beta_target_grid_is_beta_quantiles():
    grid = parse_target("beta:2,2").grid(2)
    cdf = 3 * grid**2 - 2 * grid**3  # Beta(2,2) CDF by hand
    assert cdf == pytest.approx([0.25, 0.75], abs=1e-9)
    assert ddm(grid, "beta:2,2") == pytest.approx(0.0, abs=1e-9)
    assert ddm([0.5], "beta:2,2") == pytest.approx(0.0, abs=1e-12)
    assert ddm(Z, "beta:1,1") == pytest.approx(ddm(Z))


def test_target_file_of_quantiles(tmp_path):
    f = tmp_path / "q.txt"
    f.write_text("0.2, 0.2\n0.2\n")
    t = parse_target(str(f))
    assert ddm([0.1, 0.5], t) == pytest.approx((0.1 + 0.3) / 2)
    bad = tmp_path / "bad.txt"
    bad.write_text("0.1\n1.5\n")
    with pytest.raises(BenchfillError, match="bad.txt"):
        parse_target(str(bad))
    with pytest.raises(BenchfillError, match="beta"):
        parse_target("beta:1")
    with pytest.raises(BenchfillError, match="nope"):
        parse_target("nope")


def test_target_file_values_are_quantiles_at_the_grid_levels(tmp_path):
    # The uniform's own quantiles at (i - 1/2)/5: read as a sample (np.quantile) they made a target on
    # [0.1, 0.9], 0.1 from the uniform at the ends; as quantiles at those levels they are the uniform.
    f = tmp_path / "grid5.txt"
    f.write_text("\n".join(f"{(i - 0.5) / 5:.17g}" for i in range(1, 6)))
    t = parse_target(str(f))
    for n in (1, 5, 7, 164):
        assert t.grid(n) == pytest.approx((np.arange(1, n + 1) - 0.5) / n, abs=1e-12), n
    z = np.random.default_rng(0).uniform(size=40)
    assert ddm(z, t) == pytest.approx(ddm(z))
    from benchfill.plots import _target_cdf  # the plot's dashed target line: the same target

    x = np.linspace(0, 1, 11)
    assert _target_cdf(t, x) == pytest.approx(x, abs=1e-3)
    # A Beta(2,2) written as its quantiles at 200 levels reads back as that Beta, to within its interpolation.
    b = tmp_path / "beta.txt"
    b.write_text(" ".join(f"{x:.17g}" for x in parse_target("beta:2,2").grid(200)))
    assert parse_target(str(b)).grid(200) == pytest.approx(parse_target("beta:2,2").grid(200), abs=1e-12)
    assert parse_target(str(b)).grid(37) == pytest.approx(parse_target("beta:2,2").grid(37), abs=2e-3)
    # Beyond the outermost levels the end segments go on, kept within [0, 1]; one value is all the mass there.
    two = tmp_path / "two.txt"
    two.write_text("0.1 0.9")  # levels 1/4 and 3/4: slope 1.6, so 0.1 - 0.4 < 0 at level 0
    assert Target("file:two", (), np.array([0.1, 0.9])).quantile(np.array([0.0, 0.25, 0.5, 1.0])) == \
        pytest.approx([0.0, 0.1, 0.5, 1.0])
    assert parse_target(str(two)).grid(4) == pytest.approx([0.0, 0.3, 0.7, 1.0])
    one = tmp_path / "one.txt"
    one.write_text("0.3")
    assert parse_target(str(one)).grid(3) == pytest.approx([0.3, 0.3, 0.3])


def test_expected_uniform_max_gap_exact():
    assert expected_uniform_max_gap(1) == pytest.approx(0.75)  # E max(U, 1-U)
    assert expected_uniform_max_gap(2) == pytest.approx(11 / 18)  # H_3 / 3


def test_uniform_max_gap_cdf_by_hand_and_against_sampling():
    # n = 2: P(M > x) = 3(1-x)^2 - 3(1-2x)_+^2 + (1-3x)_+^2, so P(M <= .5) = .25 and P(M <= .4) = 1 - .96 - ...
    x = 0.4
    assert uniform_max_gap_cdf(x, 2)[0] == pytest.approx(1 - (3 * (1 - x) ** 2 - 3 * (1 - 2 * x) ** 2))
    assert prob_max_gap_exceeds_uniform(0.5, 2) == pytest.approx(0.25)
    # one point: its larger side is at least 1/2; no point: the one gap is the whole axis
    assert list(uniform_max_gap_cdf([0.49, 0.5, 0.75, 1.0], 1)) == pytest.approx([0.0, 0.0, 0.5, 1.0])
    assert list(uniform_max_gap_cdf([0.99, 1.0], 0)) == [0.0, 1.0]
    # humaneval's 162 free points at its max gap: 0.9446 (mpmath, 50 digits: 0.94458051717...)
    assert uniform_max_gap_cdf(0.047995, 162)[0] == pytest.approx(0.9445805171771763, abs=1e-12)
    # the mean of the distribution, by integrating 1 - F, is the exact H_(n+1)/(n+1)
    survival = 1 - uniform_max_gap_cdf(np.linspace(0, 1, 20001), 40)
    mean = np.sum(survival[1:] + survival[:-1]) / 2 / 20000  # trapezoids
    assert mean == pytest.approx(expected_uniform_max_gap(40), abs=1e-6)
    # deep in the lower tail the alternating terms reach 1e11: the decimal sum, still a probability
    tail = uniform_max_gap_cdf(0.0005, 12000)[0]
    assert 0 < tail < 1e-12
    # against sampling: 8 free points, spacings as normalized exponentials, 200,000 sets (se 0.0011)
    e = np.random.default_rng(1).exponential(size=(200_000, 9))
    assert np.mean(e.max(1) / e.sum(1) <= 0.3) == pytest.approx(uniform_max_gap_cdf(0.3, 8)[0], abs=0.004)


def test_diagnose_on_plain_z():
    rep = diagnose(Z, k=2, item_ids=IDS)
    d = rep.to_dict()
    assert d["n_items"] == 4 and d["k"] == 2
    assert d["ddm"] == pytest.approx(0.075)
    assert d["max_gap"] == pytest.approx(0.5)
    assert d["top_k_sum"] == pytest.approx(0.8)
    assert [g["width"] for g in d["gaps"]] == pytest.approx([0.5, 0.3])
    assert d["gaps"][0]["left_item"] == "c"
    assert d["uniform"]["ratio"] == pytest.approx(0.5 / expected_uniform_max_gap(4))
    assert d["uniform"]["p_method"] == "exact"
    assert d["uniform"]["p_observed_exceeds"] == pytest.approx(uniform_max_gap_cdf(0.5, d["uniform"]["free_points"])[0])
    assert d["posterior"] is None


def test_diagnose_with_posterior_draws():
    rng = np.random.default_rng(0)
    base = np.array([0.0, 0.1, 0.2, 0.9, 1.0])
    draws = np.clip(base + rng.normal(0, 0.02, size=(200, 5)), 0, 1)
    rep = diagnose(base, draws=draws)
    post = rep.posterior
    per_draw_gap = np.array([max_gap(r) for r in draws])
    assert post["max_gap"]["mean"] == pytest.approx(per_draw_gap.mean())
    assert post["max_gap"]["q05"] <= post["max_gap"]["mean"] <= post["max_gap"]["q95"]
    assert post["ddm"]["sd"] > 0
    assert post["ddm"]["n_draws"] == 200
    # A 0.7-wide hole with 5 items is far beyond uniform sampling.
    assert rep.uniform["p_observed_exceeds"] > 0.9
    with pytest.raises(BenchfillError, match="shape"):
        diagnose(base, draws=draws[:, :3])


def test_diagnose_accepts_a_fit():
    from benchfill.irt.fit import IrtFit

    b = np.array([-1.0, 0.0, 3.0])
    fit = IrtFit(
        model="1pl", engine="map", models=("m1", "m2"), item_ids=("x", "y", "w"),
        ability=np.zeros(2), ability_se=np.ones(2), difficulty=b, difficulty_se=np.ones(3),
        chance=np.zeros(3),
    )
    rep = diagnose(fit, k=1)
    assert rep.n_models == 2
    assert rep.gaps[0].left_item == "y" and rep.gaps[0].right_item == "w"
    assert rep.max_gap == pytest.approx(0.75)  # z = 0, .25, 1


def test_empty_and_bad_input_raise_user_errors():
    with pytest.raises(BenchfillError):
        ddm([])
    with pytest.raises(BenchfillError):
        max_gap([0.1, float("nan")])
    with pytest.raises(BenchfillError):
        top_k_gap_sum(Z, 0)
    assert isinstance(parse_target(None), Target)


def test_one_more_item_gives_the_top_k_sum_that_inserting_it_does():
    # the vectorized single insertion against the direct sum, ties, end points and out-of-range items included
    from benchfill.coverage import top_k_with_one

    rng = np.random.default_rng(0)
    for _ in range(200):
        z = rng.uniform(-0.1, 1.1, size=int(rng.integers(1, 30)))
        if rng.random() < 0.3:
            z = np.round(z, 1)  # ties, and items exactly at 0 and 1
        k = int(rng.integers(1, 6))
        xs = np.concatenate([rng.uniform(-0.5, 1.5, 40), z[:5], [0.0, 1.0]])
        direct = [top_k_gap_sum(np.append(z, x), k) for x in xs]
        assert top_k_with_one(z, xs, k) == pytest.approx(direct, abs=1e-12)


def test_expected_top_k_change_worked_by_hand():
    from math import sqrt

    from scipy.stats import norm

    from benchfill.coverage import expected_top_k_change

    # Items at 0 and 1, k = 1 (the sum is 1); a new item x ~ N(1, 0.1^2). Below 1 it splits the gap and the
    # largest piece is x; above 1 it opens a gap x - 1 < 1. E = 0.5 (1 - 0.1 sqrt(2/pi)) + 0.5.
    assert expected_top_k_change([0, 1], 1.0, 0.1, 1) == pytest.approx(-0.05 * sqrt(2 / np.pi), abs=1e-6)
    # Items at 0, 0.9, 0.95, 1, k = 2 (spacings 0.9, 0.05, 0.05: the sum is 0.95); x ~ N(1, 0.1^2).
    # Beyond 1.05 the new gap x - 1 displaces a 0.05: + E[(x - 1.05)+]. Below 0.9 it splits the 0.9 gap
    # into x and 0.9 - x: - min(0.05, 0.9 - x). Between, it splits a 0.05 gap and changes nothing.
    s = 0.1

    def call(strike):  # E[(x - strike)+]
        d = (1.0 - strike) / s
        return (1.0 - strike) * norm.cdf(d) + s * norm.pdf(d)

    def put(strike):  # E[(strike - x)+]
        d = (strike - 1.0) / s
        return (strike - 1.0) * norm.cdf(d) + s * norm.pdf(d)

    by_hand = call(1.05) - (put(0.9) - put(0.85))
    assert by_hand == pytest.approx(0.01438, abs=1e-5)  # more harm beyond the end than good below it
    assert expected_top_k_change([0, 0.9, 0.95, 1], 1.0, s, 2) == pytest.approx(by_hand, abs=1e-6)
    # se 0: the item exactly there. At 0.45 the 0.9 gap becomes two of 0.45 (sum 0.9); at 1.2 a 0.2 gap opens.
    assert expected_top_k_change([0, 0.9, 0.95, 1], 0.45, 0.0, 2) == pytest.approx(-0.05)
    assert expected_top_k_change([0, 0.9, 0.95, 1], 1.2, 0.0, 2) == pytest.approx(0.15)


def test_the_uniform_baseline_is_calibrated_on_normalized_uniform_benchmarks():
    """Benchmarks whose items truly are uniform, normalized as a fit normalizes them (extremes on 0 and 1):
    P(observed max gap > uniform) must average 0.5. Against n free points it averaged 0.63 at n = 10."""
    rng = np.random.default_rng(5)
    ps, ratios = [], []
    for _ in range(200):
        z = rng.random(10)
        z = (z - z.min()) / np.ptp(z)
        u = diagnose(z).uniform
        ps.append(u["p_observed_exceeds"])
        ratios.append(u["ratio"])
        assert u["free_points"] == 8 and u["expected_max_gap"] == pytest.approx(expected_uniform_max_gap(8))
    assert np.mean(ps) == pytest.approx(0.5, abs=0.05)  # sd of the mean of 200 uniform p-values: 0.02
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.05)


def test_posterior_draws_normalized_per_draw_meet_the_normalized_baseline():
    rng = np.random.default_rng(1)
    raw = rng.normal(size=(50, 6))
    draws = (raw - raw.min(axis=1, keepdims=True)) / np.ptp(raw, axis=1, keepdims=True)  # as IrtFit.z_draws
    u = diagnose(draws[0], draws=draws).uniform
    assert u["free_points"] == 4 and u["expected_max_gap"] == pytest.approx(expected_uniform_max_gap(4))
    assert "min-max normalized" in u["baseline"]
    free = diagnose([0.2, 0.5, 0.6]).uniform  # z that do not reach the ends: three free points
    assert free["free_points"] == 3 and "fixed ends" in free["baseline"]


def test_a_library_callers_diagnose_carries_what_the_fit_cannot_see(shared_data):
    # the CLI printed these and a library caller's report had none: its gap figures came back with no word that
    # humaneval's spread (sd 1.63) makes them small, or that four of its five largest gaps lie beyond its models
    import benchfill
    from benchfill.coverage import CONFIRM_SE, WIDE
    from benchfill.run import RunOptions

    assert CONFIRM_SE == RunOptions.confirm_se
    fit = benchfill.fit(benchfill.read_responses(shared_data / "humaneval" / "responses.csv"))
    notes = benchfill.diagnose(fit, k=5).to_dict()["notes"]
    assert notes["difficulty_sd"] == pytest.approx(1.63, abs=0.01) and notes["difficulty_sd"] > WIDE
    assert notes["wide_spread"].startswith("the difficulties spread wider (sd 1.63) than their N(0, 1) prior")
    lo, hi = notes["beyond_models"]["ability_z"]
    assert 0 < lo < hi < 1 and len(notes["beyond_models"]["gaps"]) == 4
    assert notes["narrower_than_confirmation"]["confirm_se"] == CONFIRM_SE
    # an array of z is no fit: nothing to say of its spread or its models
    assert benchfill.diagnose(fit.z, k=5).to_dict()["notes"] == {}


def test_diagnose_given_logit_difficulties_for_z_says_so(caplog):
    # fit.difficulty beside fit.z: a DDM of 1.26 with 133 of 164 items out of range, and no word
    import logging

    from benchfill.coverage import diagnose as diag

    b = np.linspace(-3.0, 3.0, 40)
    with caplog.at_level(logging.WARNING, "benchfill.coverage"):
        diag(b, k=3)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("diagnose: 33 of the 40 values lie outside [0, 1]")  # 7 inside: k = 20..26
    caplog.clear()
    with caplog.at_level(logging.WARNING, "benchfill.coverage"):
        diag(np.linspace(0.0, 1.0, 40), k=3)
    assert not caplog.records


def test_diagnose_says_where_items_tie_on_few_difficulties():
    from benchfill.irt import fit
    from benchfill.irt.simulate import simulate_responses

    # 12 models x 100 items, one trial: at most 13 scores per item, so the 100 items tie on 13 levels at most
    coarse = fit(simulate_responses(12, 100, 1, difficulty_sd=1.15, difficulty_shape="uniform", seed=3).matrix)
    res = diagnose(coarse).notes["resolution"]
    assert res["levels"] == len(set(np.round(coarse.z, 9))) <= 13
    assert f"these 100 items on only {res['levels']} distinct difficulties" in res["said"]
    # 40 models x 50 trials: 2,001 scores, the 30 items told apart (or a pair tied by chance)
    fine = fit(simulate_responses(40, 30, 50, difficulty_sd=1.15, difficulty_shape="uniform", seed=3).matrix)
    assert len(set(np.round(fine.z, 9))) >= 28 and "resolution" not in diagnose(fine).notes
    # 24 of 30 distinct is 80%: said from 23 down

    class Tied:
        def __init__(self, z):
            self.z = z

    def tied(distinct: int) -> Tied:
        even = np.linspace(0, 1, distinct)
        return Tied(np.r_[even, np.full(30 - distinct, even[5])])

    assert resolution(tied(24), 30) is None and resolution(tied(23), 30)["levels"] == 23
    with pytest.raises(ValueError, match="difficulty_shape"):
        simulate_responses(2, 2, 1, difficulty_shape="flat")
