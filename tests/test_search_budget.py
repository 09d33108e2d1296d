"""``--dry-run`` figures are upper bounds, worked out by hand, for both annotation protocols."""

from __future__ import annotations

from benchfill.run import RunOptions, planned_budget
from benchfill.search import ConfirmSettings


def test_planned_budget_is_an_upper_bound_stated_as_such():
    trials = [8] * 12  # the sim panel: 96 rollouts per child under the fixed protocol
    for annotation in ("fixed", "adaptive"):
        opts = RunOptions(gaps=3, rounds=8, parents=4, children=4, annotation=annotation)
        got = planned_budget(opts, n_items=48, probe_trials=trials, have_responses=False)
        assert got["rewriter_calls"] == got["judge_calls"] == 3 * 8 * 4 * 4 == 384
        # Adaptive annotation never asks a child more than the fixed budget: same bound per child.
        assert got["annotation_rollouts_max"] == 384 * 96
        # Confirmation stops at its stated cap: max_budgets fixed budgets per selected item.
        assert got["confirmation_rollouts_max"] == 3 * round(ConfirmSettings().max_budgets * 96)
        assert got["benchmark_rollouts"] == 48 * 96
        assert got["rollouts_max"] == 48 * 96 + 384 * 96 + got["confirmation_rollouts_max"]
        assert got["figures"].startswith("upper bounds") and got["annotation"] == annotation
    assert "adaptive" in got["figures"]


def test_no_confirmation_and_the_oracle_plan_no_confirmation_rollouts():
    trials = [8] * 12
    assert planned_budget(RunOptions(confirm=False), 10, trials, True)["confirmation_rollouts_max"] == 0
    oracle = planned_budget(RunOptions(strategy="oracle"), 10, trials, True)
    assert oracle["confirmation_rollouts_max"] == 0 and oracle["rollouts_max"] == 0
