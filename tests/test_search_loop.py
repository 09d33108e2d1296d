"""The search loop against a small in-test world with known latent difficulties.

The doubles here answer the three calls the search makes (rewrite, judge,
rollouts) the way the simulated world does: a child's difficulty moves from its
parent's toward the prompt's target, some children are invalid, and probes
answer with IRT probabilities; all randomness is keyed by the call key.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from benchfill.search import (
    Annotator,
    GapSearch,
    Probe,
    SearchSettings,
    Verdict,
    baseline_search,
    benchfill_search,
    derive_seed,
)

B_MIN, B_MAX = -3.0, 3.0


class ToyWorld:
    def __init__(self, b: dict[str, float], alpha=0.6, sigma=0.3, invalid=0.1, seed=0):
        self.b = dict(b)
        self.alpha, self.sigma, self.invalid, self.seed = alpha, sigma, invalid, seed
        self.calls = {"rewrite": 0, "judge": 0, "rollouts": 0}

    async def rewrite(self, parent, target_z, references, key):
        self.calls["rewrite"] += 1
        rng = np.random.default_rng(derive_seed(self.seed, "rw", key))
        cid = key.split(":", 1)[1]
        b_parent = self.b[parent["id"]]
        b_target = B_MIN + target_z * (B_MAX - B_MIN)
        self.b[cid] = b_parent + self.alpha * (b_target - b_parent) + self.sigma * rng.normal()
        return {"id": cid, "problem": f"child {cid}", "answer": "1", "_bad": bool(rng.random() < self.invalid)}

    async def judge(self, child, key):
        self.calls["judge"] += 1
        return Verdict(not child["_bad"], "wrong answer" if child["_bad"] else "ok", "toy-judge")

    async def rollouts(self, item_id, item, probe, n, key):
        self.calls["rollouts"] += n
        rng = np.random.default_rng(derive_seed(self.seed, "ro", key))
        theta = PROBES[probe]
        p = 1 / (1 + math.exp(-(theta - self.b[item_id])))
        return int(rng.binomial(n, p))

    def true_difficulty(self, item_id):
        return self.b.get(item_id)


PROBES = {f"p{j}": a for j, a in enumerate(np.linspace(-3, 3, 13))}


def _setup(protocol="fixed", seed=0):
    rng = np.random.default_rng(7)
    # A benchmark with a hole between z=0.3 and z=0.7.
    zs = np.concatenate([rng.uniform(0.0, 0.3, 10), rng.uniform(0.7, 1.0, 10)])
    ids = [f"q{i:02d}" for i in range(zs.size)]
    world = ToyWorld({i: B_MIN + z * (B_MAX - B_MIN) for i, z in zip(ids, zs, strict=True)}, seed=seed)
    items = {i: {"id": i, "problem": f"question {i}", "answer": "1"} for i in ids}
    lo, hi = max(z for z in zs if z < 0.5), min(z for z in zs if z > 0.5)
    gap = GapSearch(0, float(lo), float(hi), items, dict(zip(ids, map(float, zs), strict=True)))
    probes = [Probe(n, float(a), 16) for n, a in PROBES.items()]
    ann = Annotator(world, probes, chance=0.0, b_min=B_MIN, b_max=B_MAX, protocol=protocol)
    return world, gap, ann


def _true_z(world, item_id):
    return (world.b[item_id] - B_MIN) / (B_MAX - B_MIN)


def test_search_moves_toward_the_target_and_selects_the_closest_valid_child():
    """The paper's protocol: no steering, the child with the least annotated deviation."""
    world, gap, ann = _setup()
    settings = SearchSettings(rounds=4, steering=False, selection="closest")
    res = asyncio.run(benchfill_search(gap, world, ann, settings, seed=1))
    assert res.chosen is not None and res.chosen.valid
    dev = abs(res.chosen.annotation.z - gap.target_z)
    assert dev == min(c.deviation(gap.target_z) for c in res.children if c.valid)
    # The gap was 0.4 wide; the chosen child must sit well inside it, truly too.
    assert dev < 0.05
    assert abs(_true_z(world, res.chosen.item_id) - gap.target_z) < 0.08
    assert all(c.ask == gap.target_z for c in res.children)  # never steered
    assert res.spend.rewriter_calls == world.calls["rewrite"] == 16 * res.rounds_used
    assert res.spend.rollouts == world.calls["rollouts"]
    # Invalid children never reach annotation.
    assert all(c.annotation is None for c in res.children if c.verdict and not c.verdict.valid)


def test_the_default_search_asks_for_the_target_and_learns_the_response_all_the_same():
    # Steering is off by default (s55): every ask is the target, and the response is learned for the report.
    world, gap, ann = _setup()
    res = asyncio.run(benchfill_search(gap, world, ann, SearchSettings(rounds=4), seed=1))
    assert res.chosen is not None and res.chosen.valid
    assert not res.steering["steered"] and res.steering["points"] > 0 and res.steering["mean_shift"] == 0.0
    assert all(c.ask == gap.target_z for c in res.children)


def test_a_steered_search_asks_past_the_target_and_lands_inside_the_gap():
    world, gap, ann = _setup()
    res = asyncio.run(benchfill_search(gap, world, ann, SearchSettings(rounds=4, steering=True), seed=1))
    assert res.chosen is not None and res.chosen.valid
    assert abs(res.chosen.annotation.z - gap.target_z) < 0.05
    assert abs(_true_z(world, res.chosen.item_id) - gap.target_z) < 0.08
    # This toy rewriter moves 0.6 of the way from the parent, so once children are annotated the
    # search asks past the target (on the far side from the parent) instead of at it.
    assert res.steering["steered"] and res.steering["points"] > 0
    later = [c for c in res.children if c.round > 1]
    assert later and any(abs(c.ask - gap.target_z) > 0.01 for c in later)


def test_a_gated_search_asks_for_the_target_until_the_response_is_told_apart():
    # The same search with its steering gated out of reach (a response never told apart by 1e9 sds) asks for the
    # target itself every time, and the search's response carries the gate and Huber's threshold it was given.
    world, gap, ann = _setup()
    res = asyncio.run(benchfill_search(gap, world, ann, SearchSettings(rounds=4, steering=True, steer_gate=1e9,
                                                                      steer_robust=1.0), seed=1))
    assert res.steering["steered"] and res.steering["points"] > 0
    assert all(c.ask == gap.target_z for c in res.children) and res.steering["mean_shift"] == 0.0
    seen = []
    asyncio.run(benchfill_search(gap, world, ann, SearchSettings(rounds=1, steering=True, steer_gate=2.0,
                                                                 steer_robust=1.0), seed=1,
                                 on_round=lambda g, state, best: seen.append(state.response)))
    assert seen and (seen[0].gate, seen[0].robust) == (2.0, 1.0)


def test_a_child_a_probe_refuses_as_too_long_is_set_aside_and_the_search_goes_on():
    from benchfill.errors import PromptRefused

    class Wordy(ToyWorld):  # every third child is longer than one probe's context
        async def rollouts(self, item_id, item, probe, n, key):
            if item_id.endswith(("0", "3", "6")) and item_id not in self.b_original and probe == "p6":
                raise PromptRefused(f"item {item_id}'s prompt is longer than the probe takes")
            return await super().rollouts(item_id, item, probe, n, key)

    world, gap, ann = _setup()
    wordy = Wordy(world.b, seed=world.seed)
    wordy.b_original = set(world.b)
    ann.services = wordy
    res = asyncio.run(benchfill_search(gap, wordy, ann, SearchSettings(rounds=2), seed=1))
    refused = [c for c in res.children if "probe_refused" in c.flags]
    assert refused and all(not c.valid and c.annotation is None for c in refused)
    assert res.chosen is not None and "probe_refused" not in res.chosen.flags


def test_a_refusal_in_a_spot_check_or_a_confirmation_sets_the_child_aside_and_its_rollouts_are_counted():
    # the order screen's spot checks and the confirmations ask probes the annotation may not have: a
    # refusal there stopped the run as before, and the rollouts of a set-aside child went uncounted
    from benchfill.errors import PromptRefused

    class Wordy(ToyWorld):  # probes refuse children, but only in a spot check or a confirmation
        async def rollouts(self, item_id, item, probe, n, key):
            spot = ":spot" in key and item_id.endswith("1") and probe in ("p0", "p12")
            # every confirmation through the middle probes: which children are confirmed is the search's
            # choice, and a test that refused only some of them (ids ending in 0) saw none when it changed
            confirming = ":confirm" in key and probe in ("p6", "p7", "p8")
            if item_id.startswith("bf-") and (spot or confirming):
                self.refused.add("spot" if spot else "confirm")
                raise PromptRefused(f"item {item_id}'s prompt is longer than the probe takes")
            self.asked += n  # counted as sent: a sibling of a refused call is still in flight when it is refused
            await asyncio.sleep(0.002)
            return await super().rollouts(item_id, item, probe, n, key)

    world, gap, _ = _setup()
    wordy = Wordy(world.b, seed=world.seed)
    wordy.refused, wordy.asked = set(), 0
    ann = Annotator(wordy, [Probe(n, float(a), 16) for n, a in PROBES.items()], chance=0.0, b_min=B_MIN,
                    b_max=B_MAX, protocol="adaptive")

    async def confirm(c, band=None, resume=None):
        a = resume or c.annotation
        return await ann.confirm(c.item_id, c.item, f"s1:{c.item_id}:confirm", a.difficulty, band=band, resume=resume)

    res = asyncio.run(benchfill_search(gap, wordy, ann, SearchSettings(rounds=3), seed=1, confirm=confirm))
    assert wordy.refused == {"spot", "confirm"}, wordy.refused  # both phases refused at least once
    refused = [c for c in res.children if "probe_refused" in c.flags]
    assert refused and all(not c.valid and c.confirmation is None for c in refused)
    assert res.chosen is None or "probe_refused" not in res.chosen.flags
    assert res.spend.rollouts + res.spend.screen_rollouts == wordy.calls["rollouts"] == wordy.asked


def test_search_stops_early_at_the_tolerance():
    world, gap, ann = _setup()
    res = asyncio.run(benchfill_search(gap, world, ann, SearchSettings(rounds=8, tolerance=0.2), seed=1))
    assert res.rounds_used == 1  # any valid child inside the gap is within 0.2 of its midpoint


def test_search_is_deterministic_whatever_the_completion_order():
    _, gap, ann = _setup()
    a = asyncio.run(benchfill_search(gap, ann.services, ann, SearchSettings(rounds=2), seed=3))

    class Shuffled(ToyWorld):  # same answers, completion order scrambled by random sleeps
        async def rollouts(self, *args):
            await asyncio.sleep(np.random.random() * 0.002)
            return await super().rollouts(*args)

    w2, gap2, _ = _setup()
    w2.__class__ = Shuffled
    ann2 = Annotator(w2, ann.probes, 0.0, B_MIN, B_MAX, "fixed")
    b = asyncio.run(benchfill_search(gap2, w2, ann2, SearchSettings(rounds=2), seed=3))
    assert [c.item_id for c in a.children] == [c.item_id for c in b.children]
    assert a.chosen.item_id == b.chosen.item_id
    assert a.memory == b.memory


def test_parents_come_from_memory_nearest_the_target_after_round_one():
    world, gap, ann = _setup()
    seen = []

    async def spy(parent, target_z, references, key):
        seen.append((key, parent["id"], [r.z for r in references]))
        return await ToyWorld.rewrite(world, parent, target_z, references, key)

    world.rewrite = spy
    asyncio.run(benchfill_search(gap, world, ann, SearchSettings(rounds=2, tolerance=0.0), seed=2))
    round2 = [p for k, p, _ in seen if "-r2-" in k]
    assert any(p.startswith("bf-g0-r1-") for p in round2)  # round-1 children became parents
    refs = seen[0][2]
    assert sum(z < gap.target_z for z in refs) == sum(z >= gap.target_z for z in refs)


def test_baseline_spends_the_matched_budget_without_references():
    world, gap, ann = _setup()
    refs_seen = []

    async def spy(parent, target_z, references, key):
        refs_seen.append(len(references))
        return await ToyWorld.rewrite(world, parent, target_z, references, key)

    world.rewrite = spy
    res = asyncio.run(baseline_search(gap, world, ann, SearchSettings(), rounds_matched=2, seed=1))
    assert res.spend.rewriter_calls == 2 * 16 and set(refs_seen) == {0}
    assert len({c.parent_id for c in res.children}) == 4
    assert res.chosen is not None


def test_a_narrower_first_round_asks_fewer_parents_once_and_the_baseline_matches_it():
    world, gap, ann = _setup()
    settings = SearchSettings(rounds=3, first_parents=2, tolerance=0.0, indistinct=0.0)
    res = asyncio.run(benchfill_search(gap, world, ann, settings, seed=1))
    by_round = [sum(c.round == t for c in res.children) for t in (1, 2, 3)]
    assert res.rounds_used == 3 and by_round == [2 * 4, 4 * 4, 4 * 4]
    # the budget-matched baseline makes as many children: (2 + 4 + 4) * 4 = 40, ten per parent
    base = asyncio.run(baseline_search(gap, world, ann, settings, rounds_matched=3, seed=1))
    assert base.spend.rewriter_calls == res.spend.rewriter_calls == 40
    assert sorted(sum(c.parent_id == p for c in base.children) for p in {c.parent_id for c in base.children}) == [10] * 4


@pytest.mark.parametrize("protocol", ["fixed", "adaptive"])
def test_annotation_recovers_a_known_difficulty(protocol):
    world, _, ann = _setup(protocol)
    ann.probes = [Probe(p.name, p.ability, 64) for p in ann.probes]
    errs = []
    for i, b in enumerate(np.linspace(-1.5, 1.5, 7)):
        world.b[f"x{i}"] = float(b)
        a = asyncio.run(ann.annotate(f"x{i}", {}, f"k{i}", target_z=(b - B_MIN) / 6))
        assert a.se < 0.6
        errs.append((a.difficulty - b) / a.se)
    assert np.sqrt(np.mean(np.square(errs))) < 2.0


def test_adaptive_annotation_stops_early_on_a_child_far_from_the_target():
    world, _, ann = _setup("adaptive")
    world.b["far"] = 2.5  # z ~ 0.92 while the target is 0.5
    a = asyncio.run(ann.annotate("far", {}, "kf", target_z=0.5, margin=0.05))
    assert a.stop == "far" and a.rollouts < ann.fixed_budget / 4


def test_a_child_every_probe_solves_is_flagged_not_infinite():
    world, _, ann = _setup("fixed")
    world.b["easy"] = -40.0
    a = asyncio.run(ann.annotate("easy", {}, "ke"))
    assert "no_finite_mle" in a.flags and math.isfinite(a.difficulty)
    assert "outside_range" in a.flags and a.z < 0


def test_the_fallback_choice_never_takes_a_child_beyond_the_benchmark_range():
    # No child landed inside a gap at the top end of the axis; the nearest overshot past the hardest item.
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, _final
    from benchfill.search.selection import in_range, select_closest

    gap = GapSearch(0, 0.90, 1.00, {}, {})

    def child(cid, z, confirmed=None):
        c = Child(cid, "q0", "q0", 1, {"id": cid}, Verdict(True, "ok", "judge"), Annotation(0.0, 0.1, z, 0.02, 8))
        if confirmed is not None:
            c.confirmation = Annotation(0.0, 0.1, confirmed, 0.01, 64)
        return c

    beyond = child("a-beyond", 1.04)  # 0.09 from the target 0.95, but beyond z = 1 it would open a gap
    recheck = child("b-recheck", 0.96, confirmed=1.08)  # annotated near the target, confirmed beyond
    below = child("c-below", 0.84)  # 0.11 from the target: outside the gap, on the range
    assert select_closest([beyond, recheck, below], gap.target_z) is recheck  # the rule alone
    assert in_range([beyond, recheck, below]) == [below]
    assert _final([beyond, recheck, below], gap, select_closest) is below
    # Nothing on the range: the gap stays unfilled rather than take an item that widens the coverage.
    assert _final([beyond, recheck], gap, select_closest) is None
    # A child confirmed inside the gap is chosen whatever else there is.
    inside = child("d-inside", 0.80, confirmed=0.93)
    assert _final([beyond, below, inside], gap, select_closest) is inside


def test_a_child_confirmed_in_an_end_gap_but_likely_beyond_the_end_is_not_taken():
    # A dense benchmark (every 0.005) whose top end gap [0.985, 1] is 0.0075 wide either side of its target:
    # a child confirmed on the target with a placement se of 0.015 lies beyond the hardest item about a
    # third of the time, where it opens a gap wider than the top-3's others; in expectation it widens
    # the top-3 sum. One confirmed nearer the inner side does not, and is taken instead.
    from benchfill.coverage import expected_top_k_change
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, _final
    from benchfill.search.selection import select_closest

    zs = [v for v in np.round(np.linspace(0, 1, 201), 6) if v < 0.986 or v > 0.999]
    z = {f"q{i}": float(v) for i, v in enumerate(zs)}

    def child(cid, confirmed):
        c = Child(cid, "q0", "q0", 1, {"id": cid}, Verdict(True, "ok", "judge"), Annotation(0.0, 0.1, confirmed, 0.02, 8))
        c.confirmation = Annotation(0.0, 0.1, confirmed, 0.015, 200)
        return c

    edge, inward = child("a-edge", 0.9925), child("b-inward", 0.988)
    assert expected_top_k_change(zs, 0.9925, 0.015, 3) > 0 > expected_top_k_change(zs, 0.988, 0.015, 3)
    gap = GapSearch(0, 0.985, 1.0, {}, z, top_k=3)
    assert gap.widens(edge) and not gap.widens(inward)
    assert _final([edge, inward], gap, select_closest) is inward
    assert _final([edge], gap, select_closest) is None  # nor as the fallback: the gap stays open
    # Without the check (top_k 0) the child on the target is taken, as before it.
    assert _final([edge, inward], GapSearch(0, 0.985, 1.0, {}, z, top_k=0), select_closest) is edge
    # A precise confirmation of the same z is not expected to widen it.
    precise = child("c-precise", 0.9925)
    precise.confirmation = Annotation(0.0, 0.1, 0.9925, 0.002, 2000)
    assert not gap.widens(precise) and _final([edge, precise], gap, select_closest) is precise


def test_a_cut_short_fallback_completed_at_the_last_is_judged_before_it_is_taken():
    # Out of fresh confirmations, the search falls back to a child confirmed earlier but cut short; completed,
    # it lands on the target of a narrow end gap with a se that puts it beyond the end too often: not taken.
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, _confirmed_final
    from benchfill.search.selection import select_closest
    from benchfill.search.services import Spend

    class Memory:
        def update(self, *args):
            pass

    zs = [v for v in np.round(np.linspace(0, 1, 201), 6) if v < 0.986 or v > 0.999]
    gap = GapSearch(0, 0.985, 1.0, {}, {f"q{i}": float(v) for i, v in enumerate(zs)}, top_k=3)
    landed = {"a": 1.05, "b": 0.9925}

    async def confirm(c, band=None, resume=None):
        return Annotation(0.0, 0.1, landed[c.item_id], 0.015, 200, stop="precise")

    def child(cid, z):
        return Child(cid, "q0", "q0", 1, {"id": cid}, Verdict(True, "ok", "judge"), Annotation(0.0, 0.1, z, 0.05, 8))

    a, c, b = child("a", 0.9925), child("c", 0.991), child("b", 0.98)
    b.confirmation = Annotation(0.0, 0.1, 0.9845, 0.04, 32, stop="outside")  # cut short below the gap
    chosen = asyncio.run(_confirmed_final([a, c, b], gap, select_closest, confirm, Spend(), Memory(), cap=0))
    assert a.confirmation.z == 1.05 and c.confirmation is None  # a confirmed beyond the range; c never confirmed
    assert b.confirmation.stop == "precise" and b.confirmation.z == 0.9925 and gap.widens(b)
    assert chosen is None


def test_the_search_confirms_its_fallback_pick_and_sets_aside_one_confirmed_beyond_the_range():
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, _confirmed_final
    from benchfill.search.selection import select_closest
    from benchfill.search.services import Spend

    class Memory:  # the search's memory takes each confirmed z; nothing here reads it back
        def update(self, *args):
            pass

    gap = GapSearch(0, 0.90, 1.00, {}, {})
    truth = {"a": 1.08, "b": 0.85, "c": 1.10, "d": 1.12}

    async def confirm(c, band=None, resume=None):
        return Annotation(0.0, 0.1, truth[c.item_id], 0.01, 64)

    def child(cid, z):
        return Child(cid, "q0", "q0", 1, {"id": cid}, Verdict(True, "ok", "judge"), Annotation(0.0, 0.1, z, 0.05, 8))

    # a: annotated inside the gap (an early stop), confirmed beyond the hardest item; b: below the gap.
    a, b = child("a", 0.93), child("b", 0.84)
    spend = Spend()
    chosen = asyncio.run(_confirmed_final([a, b], gap, select_closest, confirm, spend, Memory(), cap=3))
    assert chosen is b and a.confirmation.z == 1.08 and b.confirmation.z == 0.85 and spend.rollouts == 128
    # Out of confirmations with the pick unconfirmed: only a confirmed child may be taken, and none is left.
    c, d = child("c", 0.93), child("d", 0.86)
    assert asyncio.run(_confirmed_final([c, d], gap, select_closest, confirm, Spend(), Memory(), cap=0)) is None
    assert c.confirmation is not None and d.confirmation is None


def test_confirmations_cut_short_outside_the_gap_and_a_chosen_one_is_completed():
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, _confirmed_final
    from benchfill.search.services import Spend

    class Memory:
        def __init__(self):
            self.z = {}

        def update(self, item_id, z, *args):
            self.z[item_id] = z

    gap = GapSearch(0, 0.40, 0.50, {}, {})
    truth = {"a": 0.38, "b": 0.56}
    calls = []

    async def confirm(c, band=None, resume=None):  # a cut short at 32 rollouts, completed at 200
        calls.append((c.item_id, band, resume is not None))
        if band is not None and not band[0] < truth[c.item_id] < band[1]:
            return Annotation(0.0, 0.1, truth[c.item_id] - 0.005, 0.04, 32, stop="outside")
        return Annotation(0.0, 0.1, truth[c.item_id], 0.02, 200, stop="precise")

    def child(cid, z):
        return Child(cid, "q0", "q0", 1, {"id": cid}, Verdict(True, "ok", "judge"), Annotation(0.0, 0.1, z, 0.05, 8))

    def nearest(children, target):  # as the posterior rule does, the confirmed z where there is one
        return min(children, key=lambda c: abs((c.confirmation or c.annotation).z - target), default=None)

    a, b = child("a", 0.44), child("b", 0.47)
    spend, memory = Spend(), Memory()
    chosen = asyncio.run(_confirmed_final([a, b], gap, nearest, confirm, spend, memory, cap=3))
    # Both were confirmed against the gap and cut short outside it; the nearer one (a) is chosen and its
    # confirmation completed, so its figure is as precise as any other chosen item's.
    assert calls == [("a", (0.40, 0.50), False), ("b", (0.40, 0.50), False), ("a", None, True)]
    assert chosen is a and a.confirmation.stop == "precise" and a.confirmation.z == 0.38
    assert b.confirmation.stop == "outside" and spend.rollouts == 32 + 32 + (200 - 32)
    assert memory.z == {"a": 0.38, "b": 0.555}


def test_a_candidate_confirmed_in_the_outer_half_of_the_gap_has_its_runners_up_confirmed():
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, _final, _settled
    from benchfill.search.selection import chooser
    from benchfill.search.services import Spend
    from benchfill.search.steering import Steering

    class Memory:  # the search's memory takes each confirmed z; nothing here reads it back
        def update(self, *args):
            pass

    _, _, ann = _setup("adaptive")
    choose = chooser("posterior", Steering(), ann)
    gap = GapSearch(0, 0.30, 0.70, {}, {})  # target 0.5, half-width 0.2; the inner half: within 0.1 of it
    truth = {"a": 0.65, "b": 0.46, "c": 0.54, "d": 0.75}

    bands = {}

    async def confirm(c, band=None, resume=None):
        bands[c.item_id] = band
        return Annotation(0.0, 0.1, truth[c.item_id], 0.01, 64)

    def children():  # annotated: a on the target, then b, c, d farther off (the order runners-up go in)
        return [Child(cid, "q0", "q0", 1, {"id": cid}, Verdict(True, "ok", "judge"), Annotation(0.0, 0.1, z, 0.03, 8))
                for cid, z in (("a", 0.50), ("b", 0.53), ("c", 0.56), ("d", 0.58))]

    def settle(kids, **kw):
        spend = Spend()
        stop = asyncio.run(_settled(kids[0], kids, gap, choose, confirm, spend, Memory(), SearchSettings(**kw)))
        return stop, [c.item_id for c in kids if c.confirmation is not None], spend.rollouts

    # a lands inside but 0.15 from the target: b is confirmed next, lands within 0.1, and the search stops there
    kids = children()
    assert settle(kids) == (True, ["a", "b"], 128)
    assert _final(kids, gap, choose).item_id == "b"
    # a is confirmed against the gap; b against where it could beat a: nearer the target than a's 0.15
    assert bands["a"] == (0.30, 0.70) and bands["b"] == pytest.approx((0.35, 0.65))
    # accept_within=1 is the earlier rule: any candidate confirmed inside the gap ends the search at once
    kids = children()
    assert settle(kids, accept_within=1.0) == (True, ["a"], 64)
    assert _final(kids, gap, choose).item_id == "a"
    # at most `confirmations` children of the gap are confirmed, whether or not one lands near the target
    truth["b"] = 0.68
    kids = children()
    assert settle(kids, confirmations=2) == (True, ["a", "b"], 128)
    assert _final(kids, gap, choose).item_id == "a"  # b landed farther off than a
    # a candidate confirmed outside the gap does not stop the search, and its runners-up wait
    truth["a"] = 0.72
    kids = children()
    assert settle(kids) == (False, ["a"], 64)


def test_a_gap_that_ran_out_of_rounds_confirms_runners_up_until_one_lands_in_its_inner_half():
    # After the last round the rule of a stop holds too: the first child confirmed inside the gap, at its
    # edge, does not end the confirming while a runner-up may land nearer the target.
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, _chosen_at_end
    from benchfill.search.selection import chooser
    from benchfill.search.services import Spend
    from benchfill.search.steering import Steering

    class Memory:
        def update(self, *args):
            pass

    _, _, ann = _setup("adaptive")
    choose = chooser("posterior", Steering(), ann)
    gap = GapSearch(0, 0.30, 0.70, {}, {})  # target 0.5; the inner half lies within 0.1 of it
    truth = {"a": 0.31, "b": 0.75, "c": 0.57, "d": 0.45}

    async def confirm(c, band=None, resume=None):
        return Annotation(0.0, 0.1, truth[c.item_id], 0.01, 64)

    def end(**kw):
        kids = [Child(cid, "q0", "q0", 1, {"id": cid}, Verdict(True, "ok", "judge"), Annotation(0.0, 0.1, z, 0.03, 8))
                for cid, z in (("a", 0.50), ("b", 0.53), ("c", 0.56), ("d", 0.58))]
        spend = Spend()
        chosen = asyncio.run(_chosen_at_end(kids, gap, choose, confirm, spend, Memory(), SearchSettings(**kw)))
        return chosen.item_id, [c.item_id for c in kids if c.confirmation is not None], spend.rollouts

    # a lands inside at the edge (0.31), b outside, c in the inner half: c is chosen, d never confirmed
    assert end() == ("c", ["a", "b", "c"], 192)
    # the rule before: a, confirmed inside, ended the confirming and was chosen
    assert end(settle_at_end=False) == ("a", ["a"], 64)
    # within ``confirmations`` only: with two, c is never reached and a stays the choice
    assert end(confirmations=2) == ("a", ["a", "b"], 128)


def test_the_search_sets_aside_children_that_would_widen_the_coverage_and_flags_them():
    # A benchmark every 0.005 z but for its top end gap [0.985, 1]; every confirmation places a child at its
    # true z with a placement se of 0.015, wider than that gap's half-width. Children confirmed near the
    # target then likely lie beyond the hardest item: they are set aside, flagged, and never chosen.
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import _inside

    zs = [float(v) for v in np.round(np.linspace(0, 1, 201), 6) if v < 0.986 or v > 0.999]
    ids = [f"q{i:03d}" for i in range(len(zs))]
    world = ToyWorld({i: B_MIN + z * (B_MAX - B_MIN) for i, z in zip(ids, zs, strict=True)}, sigma=0.05, invalid=0.0)
    items = {i: {"id": i, "problem": f"question {i}", "answer": "1"} for i in ids}
    probes = [Probe(n, float(a), 16) for n, a in PROBES.items()]

    async def confirm(c, band=None, resume=None):
        z = _true_z(world, c.item_id)
        return Annotation(B_MIN + z * (B_MAX - B_MIN), 0.09, z, 0.015, 100, stop="precise")

    def search(top_k):
        world.b = {i: B_MIN + z * (B_MAX - B_MIN) for i, z in zip(ids, zs, strict=True)}
        ann = Annotator(world, probes, chance=0.0, b_min=B_MIN, b_max=B_MAX, protocol="adaptive")
        gap = GapSearch(0, 0.985, 1.0, items, dict(zip(ids, zs, strict=True)), top_k=top_k)
        return gap, asyncio.run(benchfill_search(gap, world, ann, SearchSettings(rounds=3), seed=2, confirm=confirm))

    gap, res = search(3)
    flagged = [c for c in res.children if "widens_coverage" in c.flags]
    assert flagged and all(gap.widens(c) and c is not res.chosen for c in flagged)
    assert res.chosen is None or not gap.widens(res.chosen)
    assert not any(_inside(c, gap) for c in flagged)  # none of them counts as having filled the gap
    # Without the check, the same search takes a child that widens it.
    gap0, res0 = search(0)
    assert not any("widens_coverage" in c.flags for c in res0.children)
    assert res0.chosen is not None and gap.widens(res0.chosen)


def test_the_inner_stop_confirms_a_child_annotated_well_inside_the_gap_and_ends_there():
    # A what-if (bench_search.py --stop-inner): with tolerance and the indistinct stop off, the search
    # runs every round unless stop_inner lets it end on a child annotated within that share of the
    # half-width of the target, and even then only once the child is confirmed inside the gap.
    def search(stop_inner, with_confirm=True):
        world, gap, ann = _setup("adaptive")

        async def confirm(c, band=None, resume=None):
            return await ann.confirm(c.item_id, c.item, f"confirm:{c.item_id}", c.annotation.difficulty,
                                     band=band, resume=resume)

        settings = SearchSettings(rounds=4, tolerance=0.0, indistinct=0.0, stop_inner=stop_inner)
        return gap, asyncio.run(benchfill_search(gap, world, ann, settings, seed=4,
                                                 confirm=confirm if with_confirm else None))

    gap, off = search(0.0)
    assert off.stop == "rounds" and off.rounds_used == 4
    gap, on = search(0.5)
    half = (gap.right - gap.left) / 2
    assert on.stop == "inner" and on.rounds_used < 4 and on.spend.rollouts < off.spend.rollouts
    assert abs(on.chosen.annotation.z - gap.target_z) <= 0.5 * half
    assert gap.left <= on.chosen.confirmation.z <= gap.right
    # Without a confirmer it never stops on an annotation alone.
    gap, unconfirmed = search(0.5, with_confirm=False)
    assert unconfirmed.stop == "rounds" and unconfirmed.rounds_used == 4


def test_give_up_ends_a_gap_none_of_whose_children_is_annotated_inside_it():
    # A what-if (bench_search.py --give-up): every child here comes out 6 logits harder than the toy
    # rewriter meant, far beyond the gap, so after round 2 the search gives up instead of running on. (At 4
    # logits one child of round 2 was annotated just inside the gap's hard edge, 0.765 against 0.776, once
    # ties between children answered alike went to the id: the rule then rightly ran on.)
    def search(give_up, drift):
        world, gap, ann = _setup("adaptive")
        rewrite = world.rewrite

        async def drifting(parent, target_z, references, key):
            child = await rewrite(parent, target_z, references, key)
            world.b[child["id"]] += drift
            return child

        world.rewrite = drifting
        settings = SearchSettings(rounds=4, tolerance=0.0, indistinct=0.0, give_up=give_up)
        return gap, asyncio.run(benchfill_search(gap, world, ann, settings, seed=5))

    gap, off = search(0, 6.0)
    assert off.stop == "rounds" and off.rounds_used == 4
    gap, gave_up = search(2, 6.0)
    assert gave_up.stop == "given_up" and gave_up.rounds_used == 2 and gave_up.spend.rollouts < off.spend.rollouts
    assert not any(c.valid and gap.left < c.annotation.z < gap.right for c in gave_up.children)
    # A gap with a child annotated inside it runs on.
    gap, kept = search(1, 0.0)
    assert any(c.valid and gap.left < c.annotation.z < gap.right for c in kept.children)
    assert kept.stop == "rounds" and kept.rounds_used == 4


def test_round_width_follows_the_chance_that_a_child_lands_inside_the_gap():
    # By hand: no points yet, so the response is "no correction" (offset 0, share 1) with the prior's
    # residual sd 0.05: a child asked for 0.5 lands at N(0.5, 0.05^2), inside [0.45, 0.55] with chance
    # 2 Phi(1) - 1 = 0.6827; no child made yet, so the valid share is Laplace's 1/2: 0.3413 a child.
    # At Q = 0.9: (1 - 0.3413)^n <= 0.1 first at n = 6 (5.52), so 4 + 2 over the parents closest first.
    from benchfill.search.loop import round_width
    from benchfill.search.memory import MemoryEntry
    from benchfill.search.steering import Steering

    gap = GapSearch(0, 0.45, 0.55, {}, {})
    parents = [MemoryEntry(f"q{i}", 0.5, "original", f"q{i}") for i in range(4)]
    asks = [0.5] * 4
    assert round_width(gap, parents, asks, Steering(), [], SearchSettings(width=0.9)) == [4, 2, 0, 0]
    assert round_width(gap, parents, asks, Steering(), [], SearchSettings(width=0.3)) == [1, 0, 0, 0]
    # (1 - 0.3413)^n <= 0.001 needs 17 children: more than R * C = 16, so the round keeps its full width.
    assert round_width(gap, parents, asks, Steering(), [], SearchSettings(width=0.999)) == [4, 4, 4, 4]
    # A parent whose children the response puts far outside the gap is not asked: the likelier ones are.
    far = [0.9, 0.5, 0.5, 0.5]
    assert round_width(gap, parents, far, Steering(), [], SearchSettings(width=0.9)) == [0, 4, 2, 0]


def test_an_adaptive_round_width_narrows_for_a_precise_rewriter_and_the_baseline_matches_it():
    def search(sigma):
        world, gap, ann = _setup("adaptive")
        world.sigma, world.invalid = sigma, 0.0
        settings = SearchSettings(rounds=3, tolerance=0.0, indistinct=0.0, width=0.9)
        return world, gap, ann, settings, asyncio.run(benchfill_search(gap, world, ann, settings, seed=2))

    world, gap, ann, settings, precise = search(0.02)
    by_round = [sum(c.round == t for c in precise.children) for t in (1, 2, 3)]
    assert by_round[0] == 16 and max(by_round[1:]) < 16, by_round
    assert precise.spend.rewriter_calls == sum(by_round)
    # the baseline, given the children benchfill asked for, makes exactly as many
    base = asyncio.run(baseline_search(gap, world, ann, settings, rounds_matched=3, seed=2,
                                       children_matched=precise.spend.rewriter_calls))
    assert base.spend.rewriter_calls == precise.spend.rewriter_calls
    # a rewriter whose children scatter (two logits, a third of this wide gap) is asked for more
    *_, scattered = search(2.0)
    wide = [sum(c.round == t for c in scattered.children) for t in (1, 2, 3)]
    assert wide[0] == 16 and min(wide[1:]) > max(by_round[1:]), (wide, by_round)
