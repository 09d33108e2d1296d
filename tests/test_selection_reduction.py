"""The "reduction" selection: a child scored by the expected top-k gap sum it leaves, worked by hand."""

from __future__ import annotations

import asyncio
import math

import pytest
from scipy.stats import norm

from benchfill.search import (
    Annotation,
    Annotator,
    GapSearch,
    Probe,
    SearchSettings,
    Verdict,
    benchfill_search,
)
from benchfill.search.loop import Child
from benchfill.search.selection import _expected_in_gap, chooser
from benchfill.search.steering import Steering

# One gap of 0.6 between items at 0.4 and 1.0, and a spacing of 0.4 below it: with k = 1 the top-1 sum is
# 0.6 now, and an item at x in the gap leaves max(0.4, x - 0.4, 1 - x): 0.4 anywhere on [0.6, 0.8].
AXIS = [0.0, 0.4, 1.0]
GAP = (0.4, 1.0)


def test_the_expected_sum_is_flat_in_the_middle_and_pays_only_for_the_tails_worked_by_hand():
    # exact: the flat middle is the oracle's figure, its edge too
    assert _expected_in_gap(AXIS, 1, GAP, 0.62, 0.0) == pytest.approx(0.4)
    assert _expected_in_gap(AXIS, 1, GAP, 0.9, 0.0) == pytest.approx(0.5)  # the larger piece, 0.5
    # outside the gap but on the axis: this gap stays open, whatever other spacing it splits
    assert _expected_in_gap(AXIS, 1, GAP, 0.3, 0.0) == pytest.approx(0.6)
    # ... and with k = 2 the spacing it splits would count if it could: 0.6 + 0.2 = 0.8; it stays 0.6 + 0.4
    assert _expected_in_gap(AXIS, 2, GAP, 0.2, 0.0) == pytest.approx(1.0)
    # x ~ N(0.7, 0.06): 0.4 plus the two tails past 0.6 and 0.8, each sd * (phi(h) - h * sf(h)), h = 0.1 / 0.06
    h = 0.1 / 0.06
    want = 0.4 + 2 * 0.06 * (norm.pdf(h) - h * norm.sf(h))
    assert _expected_in_gap(AXIS, 1, GAP, 0.7, 0.06) == pytest.approx(want, abs=1e-5)
    # beyond the end the axis widens: with k = 2, an item exactly at 1.3 adds a spacing of 0.3 to the top 2
    assert _expected_in_gap(AXIS, 2, GAP, 1.3, 0.0) == pytest.approx(0.6 + 0.4)
    assert _expected_in_gap(AXIS, 2, GAP, 1.5, 0.0) == pytest.approx(0.6 + 0.5)


def _annotator() -> Annotator:
    class Nothing:
        async def rollouts(self, *a):  # never asked: the selection reads estimates only
            raise AssertionError

    return Annotator(Nothing(), [Probe("p", 0.0, 8)], chance=0.0, b_min=-3.0, b_max=3.0)


def _child(cid: str, z: float, z_se: float) -> Child:
    return Child(cid, "p", "p", 1, {"id": cid}, Verdict(True, "", "toy"), Annotation(0.0, 0.1, z, z_se, 96))


def test_a_precise_child_in_the_flat_middle_beats_an_imprecise_one_on_the_target():
    """The target is 0.7. Squared deviation takes the child annotated on it (z se 0.06, shrunk toward the
    target by the response's prior, sd 0.05: posterior sd 0.038, loss 0.0015) over one at 0.62 to a z se
    of 0.001 (loss 0.0064). The top-1 sum is 0.4 anywhere on [0.6, 0.8], so 0.62 scores the oracle's 0.4
    exactly, and the one on the target 0.4 plus its tails (0.0768 * (phi(2.6) - 2.6 sf(2.6)), about 1e-4)."""
    ann = _annotator()
    near, on = _child("a", 0.62, 0.001), _child("b", 0.7, 0.06)
    gap = GapSearch(0, *GAP, {}, {"x0": 0.0, "x1": 0.4, "x2": 1.0}, top_k=1)
    assert chooser("posterior", Steering(), ann)([near, on], 0.7) is on
    assert chooser("reduction", Steering(), ann, gap.scored)([near, on], 0.7) is near
    # Without a k to score by, "reduction" is "posterior".
    assert chooser("reduction", Steering(), ann, GapSearch(0, *GAP, {}, {}, top_k=0).scored)([near, on], 0.7) is on
    # Where both sit in the flat middle exactly, the nearer the target wins the tie.
    assert chooser("reduction", Steering(), ann, gap.scored)([near, _child("c", 0.71, 0.001)], 0.7).item_id == "c"


def test_the_scored_axis_splits_the_runs_other_gaps_at_their_targets():
    z = {"a": 0.0, "b": 0.1, "c": 0.5, "d": 0.6, "e": 1.0}  # spacings 0.1, 0.4, 0.1, 0.4
    gap = GapSearch(0, 0.1, 0.5, {}, z, top_k=2)
    axis, k, left, right = gap.scored
    assert (k, left, right) == (2, 0.1, 0.5)
    assert sorted(axis) == pytest.approx([0.0, 0.1, 0.5, 0.6, 0.8, 1.0])  # the other top-2 gap at its midpoint
    # With the other filled, an item at 0.3 leaves the top 2 at 0.2 + 0.2, the oracle's figure.
    assert _expected_in_gap(axis, k, (left, right), 0.3, 0.0) == pytest.approx(0.4)


def test_a_search_with_the_reduction_rule_fills_its_gap():
    from test_search_loop import _setup, _true_z

    world, gap, ann = _setup()
    gap.top_k = 1
    res = asyncio.run(benchfill_search(gap, world, ann, SearchSettings(rounds=4, selection="reduction"), seed=1))
    assert res.chosen is not None and res.chosen.valid
    assert gap.left < res.chosen.annotation.z < gap.right
    assert abs(_true_z(world, res.chosen.item_id) - gap.target_z) < 0.1
    assert not math.isnan(res.chosen.annotation.z)


def test_a_run_takes_the_reduction_rule_and_names_the_rules_it_knows():
    from benchfill.errors import ConfigError
    from benchfill.run import RunOptions

    RunOptions(selection="reduction").check()  # accepted
    with pytest.raises(ConfigError, match="^selection: unknown rule 'nearest' .*posterior, reduction, closest"):
        RunOptions(selection="nearest").check()
    with pytest.raises(ConfigError, match="posterior, reduction, closest"):
        chooser("nearest", Steering(), _annotator())


def test_the_posterior_rule_makes_an_imprecise_child_pay_for_its_variance():
    # both annotated on the target (posterior mean = the target): only their variances differ. With the
    # variance term left out of the loss they tie, and the id ("a", the imprecise one) would decide.
    ann = _annotator()
    loose, tight = _child("a", 0.7, 0.2), _child("b", 0.7, 0.01)
    assert chooser("posterior", Steering(), ann)([loose, tight], 0.7) is tight
