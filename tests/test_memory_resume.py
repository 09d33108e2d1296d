"""Resume by restoring: a search given back its state after round t goes on as if never stopped.

Against the in-test world of test_search_loop.py: the restored search makes exactly the calls of
the rounds after t (counted by the world), and its result equals the uninterrupted one in every
child, the spend, the memory and the learned response. The state goes through JSON on the way,
as it does through the store.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from test_search_loop import _setup

from benchfill.search import SearchSettings, benchfill_search
from benchfill.search.snapshot import (
    child_to_dict,
    result_from_dict,
    result_to_dict,
    state_from_dict,
    state_to_dict,
)


def _search(world, gap, ann, settings, restore=None, states=None, confirm=None):
    def on_round(_g, state, _best):
        states.append(json.loads(json.dumps(state_to_dict(state))))

    return asyncio.run(benchfill_search(gap, world, ann, settings, seed=3, restore=restore,
                                        on_round=on_round if states is not None else None, confirm=confirm))


def _same(a, b) -> None:
    assert [child_to_dict(c) for c in a.children] == [child_to_dict(c) for c in b.children]
    assert a.chosen.item_id == b.chosen.item_id and a.rounds_used == b.rounds_used and a.stop == b.stop
    assert a.spend == b.spend and a.memory == b.memory and a.steering == b.steering


@pytest.mark.parametrize("protocol", ["fixed", "adaptive"])
def test_a_restored_search_makes_only_the_later_rounds_calls_and_ends_the_same(protocol):
    settings = SearchSettings(rounds=4, parents=2, children=3, tolerance=0.0, indistinct=0.0)
    world, gap, ann = _setup(protocol)
    states: list[dict] = []
    whole = _search(world, gap, ann, settings, states=states)
    assert [s["round"] for s in states] == [1, 2, 3, 4]
    for cut in (1, 2, 3):
        world2, gap2, ann2 = _setup(protocol)
        world2.b.update(world.b)  # the world's truth of the children made before the cut
        state = state_from_dict(states[cut - 1])
        resumed = _search(world2, gap2, ann2, settings, restore=state)
        _same(whole, resumed)
        # Only rounds cut+1.. were asked for: R*C rewrites each, and no rollout of an earlier child.
        assert world2.calls["rewrite"] == (4 - cut) * 2 * 3
        assert world2.calls["rewrite"] == whole.spend.rewriter_calls - states[cut - 1]["spend"]["rewriter_calls"]
        then = states[cut - 1]["spend"]  # the world answers the order screen's spot checks too
        assert world2.calls["rollouts"] == (whole.spend.rollouts + whole.spend.screen_rollouts
                                            - then["rollouts"] - then["screen_rollouts"])


def test_a_state_cut_before_its_stop_test_still_stops_and_confirms_as_before():
    # Early stops on: the restored state is taken before round t's stop test, which it makes again.
    settings = SearchSettings(rounds=6, parents=2, children=3, tolerance=0.03)
    world, gap, ann = _setup("fixed")

    async def confirm(c, band=None, resume=None):
        return await ann.confirm(c.item_id, c.item, f"confirm:{c.item_id}", c.annotation.difficulty,
                                 band=band, resume=resume)

    states: list[dict] = []
    whole = _search(world, gap, ann, settings, states=states, confirm=confirm)
    assert whole.stop == "tolerance" and whole.chosen.confirmation is not None
    world2, gap2, ann2 = _setup("fixed")
    world2.b.update(world.b)

    async def confirm2(c, band=None, resume=None):
        return await ann2.confirm(c.item_id, c.item, f"confirm:{c.item_id}", c.annotation.difficulty,
                                 band=band, resume=resume)

    resumed = _search(world2, gap2, ann2, settings, restore=state_from_dict(states[-1]), confirm=confirm2)
    _same(whole, resumed)
    assert world2.calls["rewrite"] == 0 and world2.calls["judge"] == 0


def test_a_finished_gap_round_trips_through_its_record():
    settings = SearchSettings(rounds=2, parents=2, children=2)
    world, gap, ann = _setup("fixed")
    res = _search(world, gap, ann, settings)
    back = result_from_dict(json.loads(json.dumps(result_to_dict(res))))
    _same(res, back)
    assert back.chosen is back.children[res.children.index(res.chosen)]
