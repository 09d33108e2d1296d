"""Target steering: the response model recovers a known rewriter response, shrinks toward no
correction with few children, and asks for what lands on the target."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.search.steering import Steering


def _observe(st: Steering, offset: float, share: float, n: int, noise: float, seed: int = 0, parent=None):
    rng = np.random.default_rng(seed)
    for i in range(n):
        zp = rng.uniform(0.3, 0.7)
        ask = zp + rng.uniform(-0.3, 0.3)
        child = zp + offset + share * (ask - zp) + noise * rng.normal()
        st.observe(zp, ask, child, 0.02, parent or f"p{i % 8}")


def test_the_response_is_recovered_from_many_children():
    st = Steering()
    _observe(st, offset=-0.08, share=0.6, n=400, noise=0.03)
    offset, share, sigma = st.response()
    assert offset == pytest.approx(-0.08, abs=0.01)
    assert share == pytest.approx(0.6, abs=0.05)
    assert sigma == pytest.approx(0.03, abs=0.01)


def test_few_children_barely_steer():
    """With no data the ask is the target; with two children the correction is a fraction of theirs."""
    st = Steering()
    assert st.ask(0.5, 0.45) == 0.5
    st.observe(0.45, 0.5, 0.40, 0.02)  # both landed 0.1 below where "no correction" puts them
    st.observe(0.45, 0.5, 0.40, 0.02)
    offset, share, _ = st.response()
    assert -0.1 < offset < -0.01 and share == pytest.approx(1.0, abs=0.1)


def test_the_ask_lands_on_the_target_under_the_learned_response():
    st = Steering(max_shift=1.0)
    _observe(st, offset=-0.05, share=0.5, n=300, noise=0.01, parent="p")
    target, zp = 0.55, 0.5
    ask = st.ask(target, zp, "p")
    # by hand: ask = z_p + (target - z_p - offset) / share = 0.5 + (0.05 + 0.05) / 0.5 = 0.7
    assert ask == pytest.approx(0.7, abs=0.02)
    assert st.predict(zp, ask, "p") == pytest.approx(target, abs=0.005)


def test_each_parent_gets_its_own_offset_shrunk_toward_the_gaps():
    st = Steering()
    _observe(st, offset=0.0, share=1.0, n=200, noise=0.01)
    for _ in range(4):  # this parent's children all land 0.06 harder (the rewriter misjudges it)
        st.observe(0.5, 0.5, 0.56, 0.01, "odd")
    base = st.parent_offset("")
    own = st.parent_offset("odd")
    # by hand: the residuals are ~0.06 each (clipped at 2 sigma if larger); 4 of them over 4 + 2
    assert own - base == pytest.approx(0.04, abs=0.01)
    assert st.ask(0.5, 0.5, "odd") < st.ask(0.5, 0.5, "p0")
    # where a child of that parent is predicted to land (the posterior selection's prior) moves by as much
    assert st.predict(0.5, 0.45, "odd") - st.predict(0.5, 0.45, "") == pytest.approx(own - base, abs=1e-12)


def test_asks_stay_on_the_prompt_scale_and_near_the_target():
    st = Steering()
    _observe(st, offset=-0.3, share=0.3, n=200, noise=0.01)
    ask = st.ask(0.95, 0.9)
    assert ask <= 1.0 and ask - 0.95 <= st.max_shift + 1e-12
    assert st.summary()["asks"] == 1


def test_the_kept_fit_follows_every_new_child_and_every_change_of_the_prior():
    """The response is fitted once per state: the fit kept between calls is the one a fresh fit gives,
    after each new child and after a caller changes the prior."""
    st = Steering()
    fresh = lambda: Steering(points=list(st.points), parents=list(st.parents), share_sd=st.share_sd).response()  # noqa: E731
    assert st.response() == fresh()
    for n in (1, 2, 30):
        _observe(st, offset=0.05, share=0.5, n=n, noise=0.04, seed=n)
        assert st.response() == fresh()
    before = st.response()
    st.share_sd = 0.5
    assert st.response() == fresh() != before


def _symmetric(st: Steering, d: float, se: float, n: int = 50, parent: str = "") -> None:
    """Children on the "no correction" line, half d above it and half d below, at the same asks: the fit
    stays at (0, 1) exactly, and every residual is +-d."""
    for i in range(n):
        ask = 0.5 + 0.2 * (i / (n - 1) - 0.5)
        for sign in (1, -1):
            st.observe(0.5, ask, ask + sign * d, se, parent)


def test_the_residual_sd_is_what_the_annotation_error_does_not_explain_by_hand():
    # sigma^2 = (nu0 sigma0^2 + sum max(r^2 - se^2, 0)) / (nu0 + n): residuals of 0.05 with an se of 0.03
    st = Steering()
    _symmetric(st, d=0.05, se=0.03)
    offset, share, sigma = st.response()
    assert offset == pytest.approx(0.0, abs=1e-12) and share == pytest.approx(1.0, abs=1e-12)
    n = 100
    assert sigma == pytest.approx(np.sqrt((4 * 0.05**2 + n * (0.05**2 - 0.03**2)) / (4 + n)), rel=1e-9)  # 0.0404


@pytest.mark.parametrize("robust", [None, 1.0, 0.5])
def test_one_wild_child_pulls_the_offset_no_harder_than_one_at_the_huber_threshold(robust):
    # Huber weights: a child 0.5 above the line counts as one c sd above it (c = ``robust``, 2 by default).
    # The others' residuals cancel (and their asks balance, so the share's equation is apart), so by hand, with
    # s2 = sigma^2 + se^2 and the prior's precision 1 / 0.1^2 = 100 on the offset:
    #   offset = w r / (100 / s2 + w + 100), w = (c sqrt(s2) / r) / s2, r = 0.5 - offset (Huber)
    #   offset = (0.5 / s2) / (101 / s2 + 100)                                        (plain: 4.6 times as far)
    st = Steering() if robust is None else Steering(robust=robust)
    c = 2.0 if robust is None else robust
    _symmetric(st, d=0.01, se=0.02)
    st.observe(0.5, 0.5, 1.0, 0.02)
    offset, share, sigma = st.response()
    s2, r = sigma**2 + 0.02**2, 0.5 - offset
    w = c * np.sqrt(s2) / r / s2
    assert offset == pytest.approx(w * 0.5 / (100 / s2 + w + 100), rel=1e-6) and share == pytest.approx(1.0)
    assert offset < (0.5 / s2) / (101 / s2 + 100) / 4 * c / 2


def test_a_parents_own_offset_takes_the_median_of_its_childrens_residuals():
    st = Steering()
    _symmetric(st, d=0.0, se=0.01)
    for r in (0.06, 0.06, 0.06, 0.3):  # one wild child of the parent: the median stays 0.06, the mean 0.12
        st.observe(0.5, 0.5, 0.5 + r, 0.01, "odd")
    base = st.parent_offset("")
    resid_median = 0.06 - base  # the gap's offset moved a little toward these children too
    assert st.parent_offset("odd") - base == pytest.approx(resid_median * 4 / (4 + 2), abs=2e-3)


def test_a_childs_residual_is_left_out_of_its_parents_offset_when_its_se_is_wide():
    # an estimate with an se past three residual sds says little of where the parent's children land
    st = Steering()
    _symmetric(st, d=0.0, se=0.01)
    st.observe(0.5, 0.5, 0.56, 0.01, "odd")
    st.observe(0.5, 0.5, 0.56, 0.01, "odd")
    st.observe(0.5, 0.5, 0.0, 1.0, "odd")
    base = st.parent_offset("")
    assert st.parent_offset("odd") - base == pytest.approx((0.06 - base) * 2 / (2 + 2), abs=2e-3)


def test_the_gate_steers_only_a_response_told_apart_from_no_correction():
    # A rewriter with no lean: the gap's fit sits on (0, 1) exactly, and one parent's two children landed 0.06
    # above it. Ungated, that parent's asks follow its two children (the noise that widened kind's landing);
    # gated at two sds, nothing is told apart from "no correction", so every ask is the target.
    for gate, moved in ((0.0, True), (2.0, False)):
        st = Steering(gate=gate)
        _symmetric(st, d=0.05, se=0.03)
        for _ in range(2):
            st.observe(0.5, 0.5, 0.56, 0.03, "odd")
        assert (st.ask(0.5, 0.5, "odd") != 0.5) is moved
        assert st.ask(0.5, 0.5) == pytest.approx(0.5, abs=2e-3)
    # A rewriter whose children all land 0.1 below the line: told apart, so the gated search steers up.
    st = Steering(gate=2.0)
    for i in range(40):
        ask = 0.4 + 0.2 * i / 39
        st.observe(0.5, ask, ask - 0.1, 0.02)
    assert st.told_apart() and st.ask(0.5, 0.5) > 0.55
    assert st.summary()["mean_shift"] > 0.05


def test_the_gates_sds_are_the_posteriors_by_hand():
    # Symmetric children (every residual +-0.05, se 0.03, below Huber's threshold): the offset's and the share's
    # equations are apart, so sd_offset = (n w + 100)^-1/2 and sd_share = (w sum x^2 + 16)^-1/2 with
    # w = 1 / (sigma^2 + se^2) and the prior's precisions 1 / 0.1^2 and 1 / 0.25^2.
    st = Steering(gate=2.0)
    _symmetric(st, d=0.05, se=0.03)
    offset, share, sigma, sd_offset, sd_share = st._fitted()
    w = 1 / (sigma**2 + 0.03**2)
    x = np.array([0.2 * (i / 49 - 0.5) for i in range(50)] * 2)
    assert sd_offset == pytest.approx((100 * w + 100) ** -0.5, rel=1e-9)
    assert sd_share == pytest.approx((w * (x**2).sum() + 16) ** -0.5, rel=1e-9)
    assert not st.told_apart()
