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
        # Each confirmation stops at its stated cap (max_budgets fixed budgets), and a gap confirms at most
        # one child per round's stop test (8), runners-up up to 6 in all (5 more), and 6 + 1 fresh picks
        # at the end: 20 children.
        assert got["confirmation_rollouts_max"] == 3 * 20 * round(ConfirmSettings().max_budgets * 96)
        assert got["benchmark_rollouts"] == 48 * 96
        # the order screen's spot checks: at most 6 steps x 4 trials at both ends of the axis, per child
        assert got["screen_rollouts_max"] == 384 * 6 * 4 * 2
        assert got["rollouts_max"] == 48 * 96 + 384 * 96 + 384 * 48 + got["confirmation_rollouts_max"]
        # a repair turn is a model call: none allowed unless told (the dry run passes the config's)
        assert got["repair_calls_max"] == 0 and got["model_calls_max"] == 2 * 384
        repaired = planned_budget(opts, n_items=48, probe_trials=trials, have_responses=False, max_repairs=(2, 1))
        assert repaired["model_calls_max"] == 2 * 384 + 384 * 3
        assert got["figures"].startswith("upper bounds") and got["annotation"] == annotation
    assert "adaptive" in got["figures"]


def test_no_confirmation_and_the_oracle_plan_no_confirmation_rollouts():
    trials = [8] * 12
    # The baseline confirms its pick only; a search of one round with one child confirms at most that one.
    cap = round(ConfirmSettings().max_budgets * 96)
    assert planned_budget(RunOptions(strategy="baseline"), 10, trials, True)["confirmation_rollouts_max"] == 3 * cap
    tiny = RunOptions(gaps=1, rounds=1, parents=1, children=1)
    assert planned_budget(tiny, 10, trials, True)["confirmation_rollouts_max"] == cap
    assert planned_budget(RunOptions(confirm=False), 10, trials, True)["confirmation_rollouts_max"] == 0
    oracle = planned_budget(RunOptions(strategy="oracle"), 10, trials, True)
    assert oracle["confirmation_rollouts_max"] == 0 and oracle["rollouts_max"] == 0
    assert oracle["annotation"] == "n/a"  # it annotates nothing, as its report says


def test_a_given_matrix_places_the_panel_through_anchor_items_only():
    from benchfill.engine.backend import ANCHOR_ITEMS

    trials = [8] * 12
    opts = RunOptions()
    # No matrix: the panel's rollouts are the matrix, on every item.
    assert planned_budget(opts, 12_032, trials, False)["benchmark_probe_requests"] == 12_032 * 12
    # A matrix without the panel: anchor items only; a matrix holding the panel: none.
    assert planned_budget(opts, 12_032, trials, "matrix")["benchmark_rollouts"] == ANCHOR_ITEMS * 96
    assert planned_budget(opts, 48, trials, "matrix")["benchmark_rollouts"] == 48 * 96
    assert planned_budget(opts, 12_032, trials, True)["benchmark_rollouts"] == 0


def test_anchor_items_spread_over_the_difficulty_axis_and_are_deterministic():
    import numpy as np

    from benchfill.engine.backend import anchor_items
    from benchfill.irt.simulate import simulate_responses

    sim = simulate_responses(n_items=900, n_models=12, trials=4, seed=5)
    matrix = sim.matrix
    items = [{"id": i} for i in matrix.item_ids]
    picked = anchor_items(matrix, items, n=60)
    assert len(picked) == 60 and picked == anchor_items(matrix, items, n=60)
    from benchfill.irt import fit

    f = fit(matrix)
    b = dict(zip(f.item_ids, f.difficulty, strict=True))
    got = np.sort([b[it["id"]] for it in picked])
    # Evenly spaced ranks: the easiest and the hardest item are in, and the deciles match the benchmark's.
    assert got[0] == min(b.values()) and got[-1] == max(b.values())
    assert np.allclose(np.quantile(got, [0.1, 0.5, 0.9]), np.quantile(list(b.values()), [0.1, 0.5, 0.9]), atol=0.15)
    assert anchor_items(matrix, items[:40], n=60) == items[:40]  # small benchmarks: every item
