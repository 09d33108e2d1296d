"""Adaptive annotation against a small world with known difficulties: where it spends, when it stops.

The world answers rollouts with 1PL probabilities from a keyed generator, so every
run is reproducible; the truth lets the tests compare TRUE deviations, not annotated ones.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np

from benchfill.irt import item_information
from benchfill.search import (
    AdaptiveSettings,
    Annotator,
    GapSearch,
    Probe,
    SearchSettings,
    Verdict,
    benchfill_search,
    derive_seed,
)

B_MIN, B_MAX = -3.0, 3.0
ABILITY = {f"p{j:02d}": float(a) for j, a in enumerate(np.linspace(-3, 3, 13))}


class World:
    """Children move from the parent toward the target with noise; probes answer by 1PL."""

    def __init__(self, b: dict[str, float], seed: int = 0):
        self.b, self.seed, self.asked = dict(b), seed, []

    async def rewrite(self, parent, target_z, references, key):
        rng = np.random.default_rng(derive_seed(self.seed, "rw", key))
        cid = key.split(":", 1)[1]
        bp = self.b[parent["id"]]
        self.b[cid] = bp + 0.6 * (B_MIN + target_z * (B_MAX - B_MIN) - bp) + 0.3 * rng.normal()
        return {"id": cid, "bad": bool(rng.random() < 0.1)}

    async def judge(self, child, key):
        return Verdict(not child["bad"], "", "toy")

    async def rollouts(self, item_id, item, probe, n, key):
        self.asked.append((item_id, probe, n))
        rng = np.random.default_rng(derive_seed(self.seed, "ro", key))
        return int(rng.binomial(n, 1 / (1 + math.exp(-(ABILITY[probe] - self.b[item_id])))))


def _annotator(world, protocol):
    probes = [Probe(n, a, 8) for n, a in ABILITY.items()]
    return Annotator(world, probes, chance=0.0, b_min=B_MIN, b_max=B_MAX, protocol=protocol)


def _gap_search(protocol: str, seed: int):
    rng = np.random.default_rng(100 + seed)
    zs = np.concatenate([rng.uniform(0.0, 0.3, 10), rng.uniform(0.7, 1.0, 10)])
    ids = [f"q{i:02d}" for i in range(zs.size)]
    world = World({i: B_MIN + z * (B_MAX - B_MIN) for i, z in zip(ids, zs, strict=True)}, seed)
    lo, hi = float(zs[zs < 0.5].max()), float(zs[zs > 0.5].min())
    gap = GapSearch(0, lo, hi, {i: {"id": i} for i in ids}, dict(zip(ids, map(float, zs), strict=True)))
    res = asyncio.run(benchfill_search(gap, world, _annotator(world, protocol), SearchSettings(), seed=seed))
    annotated = [c for c in res.children if c.annotation is not None]
    true_dev = abs((world.b[res.chosen.item_id] - B_MIN) / (B_MAX - B_MIN) - res.target_z)
    return sum(c.annotation.rollouts for c in annotated) / len(annotated), true_dev


def test_adaptive_spends_three_times_fewer_rollouts_per_child_at_comparable_true_deviation():
    fixed = [_gap_search("fixed", s) for s in range(10)]
    adaptive = [_gap_search("adaptive", s) for s in range(10)]
    per_child_fixed = np.mean([r for r, _ in fixed])
    per_child_adaptive = np.mean([r for r, _ in adaptive])
    assert per_child_fixed == 13 * 8
    assert per_child_fixed / per_child_adaptive >= 3.0
    # The truth, not the annotation: the selected items land as close to the target.
    assert np.mean([d for _, d in adaptive]) <= np.mean([d for _, d in fixed]) + 0.01


def test_first_batch_goes_to_the_probes_most_informative_at_the_target():
    world = World({"c": 0.0})
    ann = _annotator(world, "adaptive")
    b_target = 0.1  # off the probe grid, so no two probes tie
    asyncio.run(ann.annotate("c", {}, "k", target_z=(b_target - B_MIN) / (B_MAX - B_MIN), margin=0.1))
    first = {p for _, p, _ in world.asked[:2]}
    info = item_information(b_target, np.array(list(ABILITY.values())))
    best_two = {list(ABILITY)[j] for j in np.argsort(-info, kind="stable")[:2]}
    assert first == best_two and all(n == 4 for _, _, n in world.asked[:2])


def test_children_at_the_target_are_refined_to_the_fixed_protocols_precision():
    world = World({"c": 0.0})  # z = 0.5, the target
    ann = _annotator(world, "adaptive")
    ann.adaptive = AdaptiveSettings(contend=math.inf)  # every child within the margin is a contender
    runs = [asyncio.run(ann.annotate("c", {}, f"k{i}", target_z=0.5, margin=0.2)) for i in range(20)]
    precise = [a for a in runs if a.stop == "precise"]
    assert len(precise) >= 18
    for a in precise:
        info_fixed = sum(8 * item_information(a.difficulty, np.array([p.ability]))[0] for p in ann.probes)
        assert a.z_se <= 1 / math.sqrt(info_fixed) / (B_MAX - B_MIN) + 1e-12
        assert a.rollouts < ann.fixed_budget  # informative probes get there with fewer rollouts
    errs = [a.difficulty / a.se for a in runs]
    assert abs(np.mean(errs)) < 1.0 and np.sqrt(np.mean(np.square(errs))) < 2.0


def test_a_child_every_probe_solves_stops_far_without_a_finite_estimate():
    world = World({"c": -30.0})
    ann = _annotator(world, "adaptive")
    a = asyncio.run(ann.annotate("c", {}, "k", target_z=0.5, margin=0.05))
    assert a.stop == "far" and a.rollouts <= 16
    assert "no_finite_mle" in a.flags and math.isfinite(a.difficulty)


def test_a_non_contender_is_only_screened_and_the_budget_is_never_exceeded():
    world = World({"c": 0.9})  # z = 0.65: 0.15 off the target, beyond a 0.02 margin but not by much
    ann = _annotator(world, "adaptive")
    a = asyncio.run(ann.annotate("c", {}, "k", target_z=0.5, margin=0.02))
    assert a.stop in ("screened", "far") and a.rollouts <= 32
    for i, b in enumerate(np.linspace(-2.5, 2.5, 11)):
        world.b[f"x{i}"] = float(b)
        got = asyncio.run(ann.annotate(f"x{i}", {}, f"k{i}", target_z=0.5, margin=0.0))
        assert got.rollouts <= ann.fixed_budget


def test_without_a_margin_nothing_is_far():
    world = World({"c": 2.5})
    ann = _annotator(world, "adaptive")
    a = asyncio.run(ann.annotate("c", {}, "k", target_z=0.5))  # margin = inf: every child could win
    assert a.stop in ("precise", "screened", "budget") and a.stop != "far"
    assert abs(a.difficulty - 2.5) < 3 * a.se
