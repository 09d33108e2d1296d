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
