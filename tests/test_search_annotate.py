"""Adaptive annotation against a small world with known difficulties: where it spends, when it stops.

The world answers rollouts with 1PL probabilities from a keyed generator, so every
run is reproducible; the truth lets the tests compare TRUE deviations, not annotated ones.
"""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import numpy as np
import pytest

from benchfill.irt import item_information
from benchfill.search import (
    AdaptiveSettings,
    Annotator,
    ConfirmSettings,
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


def _gap_search(protocol: str, seed: int, settings: SearchSettings | None = None):
    rng = np.random.default_rng(100 + seed)
    zs = np.concatenate([rng.uniform(0.0, 0.3, 10), rng.uniform(0.7, 1.0, 10)])
    ids = [f"q{i:02d}" for i in range(zs.size)]
    world = World({i: B_MIN + z * (B_MAX - B_MIN) for i, z in zip(ids, zs, strict=True)}, seed)
    lo, hi = float(zs[zs < 0.5].max()), float(zs[zs > 0.5].min())
    gap = GapSearch(0, lo, hi, {i: {"id": i} for i in ids}, dict(zip(ids, map(float, zs), strict=True)))
    ann = _annotator(world, protocol)
    res = asyncio.run(benchfill_search(gap, world, ann, settings or SearchSettings(), seed=seed))
    annotated = [c for c in res.children if c.annotation is not None]
    true_dev = abs((world.b[res.chosen.item_id] - B_MIN) / (B_MAX - B_MIN) - res.target_z)
    per_child = sum(c.annotation.rollouts for c in annotated) / len(annotated)
    return SimpleNamespace(per_child=per_child, per_gap=res.spend.rollouts, true_dev=true_dev, res=res, ann=ann)


def test_adaptive_spends_three_times_fewer_rollouts_per_gap_at_comparable_true_deviation():
    # The annotation protocols alone, under the paper's search (no steering, least annotated deviation).
    paper = SearchSettings(steering=False, selection="closest")
    fixed = [_gap_search("fixed", s, paper) for s in range(10)]
    adaptive = [_gap_search("adaptive", s, paper) for s in range(10)]
    assert np.mean([r.per_child for r in fixed]) == 13 * 8
    assert np.mean([r.per_child for r in fixed]) / np.mean([r.per_child for r in adaptive]) >= 3.0
    # Per gap (what a run pays), not only per child: adaptive searches may run more rounds.
    assert np.mean([r.per_gap for r in fixed]) / np.mean([r.per_gap for r in adaptive]) >= 3.0
    # The truth, not the annotation: the selected items land as close to the target.
    assert np.mean([r.true_dev for r in adaptive]) <= np.mean([r.true_dev for r in fixed]) + 0.005


def test_adaptive_search_stops_when_the_best_child_is_indistinguishable_from_the_target():
    runs = [_gap_search("adaptive", s) for s in range(10)]
    stopped = [r for r in runs if r.res.stop == "indistinct"]
    assert stopped  # the rule fires on this world, and only as stated:
    for r in stopped:
        best = r.res.chosen
        assert SearchSettings().tolerance < best.deviation(r.res.target_z) <= r.ann.resolution(best.annotation)
        assert r.res.rounds_used < SearchSettings().rounds
    # Switched off, the same searches follow the paper's rule (tolerance or all rounds), never sooner.
    for s, r in enumerate(runs):
        off = _gap_search("adaptive", s, SearchSettings(indistinct=0.0))
        assert off.res.stop in ("tolerance", "rounds") and off.res.rounds_used >= r.res.rounds_used


def test_indistinct_stop_needs_a_standard_error_small_against_the_gap():
    """A weak panel cannot place a child inside the gap: the rule must not end the search there."""
    runs = [_gap_search("adaptive", s) for s in range(10)]
    for r in runs:
        if r.res.stop == "indistinct":
            width = r.res.right - r.res.left
            assert r.ann.resolution(r.res.chosen.annotation) <= SearchSettings().indistinct_max_se * width
            assert r.res.left < r.res.chosen.annotation.z < r.res.right  # never stops on an item outside the gap
    # With a cap no annotation can meet, the adaptive search falls back to the paper's rule.
    for s in range(4):
        r = _gap_search("adaptive", s, SearchSettings(indistinct_max_se=1e-9))
        assert r.res.stop in ("tolerance", "rounds")


def test_the_fixed_protocol_keeps_the_papers_stopping_rule():
    for s in range(6):
        r = _gap_search("fixed", s, SearchSettings(tolerance=0.0, rounds=3))
        assert r.res.stop == "rounds" and r.res.rounds_used == 3
    # The same settings with adaptive annotation do stop early on some of these gaps.
    assert any(_gap_search("adaptive", s, SearchSettings(tolerance=0.0, rounds=3)).res.stop == "indistinct"
               for s in range(6))


def test_confirmation_removes_the_winners_curse():
    """16 children at the same true z (0.02 off the target); the one annotated closest is chosen.
    Its annotated deviation is biased low by the choice; fresh rollouts are not."""
    world = World({})
    ann = _annotator(world, "fixed")
    true_z = 0.52
    ann_dev, conf_dev, ann_err, conf_err = [], [], [], []
    for rep in range(20):
        anns = []
        for i in range(16):
            cid = f"c{rep}-{i}"
            world.b[cid] = B_MIN + true_z * (B_MAX - B_MIN)
            anns.append((asyncio.run(ann.annotate(cid, {}, f"k:{cid}")), cid))
        a, cid = min(anns, key=lambda x: abs(x[0].z - 0.5))
        c = asyncio.run(ann.confirm(cid, {}, f"confirm:{cid}", a.difficulty))
        assert c.stop == "precise" and c.z_se <= ann.confirmation.z_se
        assert c.rollouts <= ann.confirmation.cap(ann.fixed_budget)
        ann_dev.append(abs(a.z - 0.5))
        conf_dev.append(abs(c.z - 0.5))
        ann_err.append(abs(a.z - true_z))
        conf_err.append(abs(c.z - true_z))
    assert np.mean(ann_dev) < 0.02 - 0.01  # the curse: the chosen one looks closer than it is
    assert abs(np.mean(conf_dev) - 0.02) < 0.005  # confirmed: the true deviation on average
    assert np.mean(conf_err) < 0.75 * np.mean(ann_err)  # and each item's value is closer to the truth


def test_confirmation_uses_only_fresh_rollouts_on_informative_probes():
    world = World({"c": 0.3})
    ann = _annotator(world, "fixed")
    a = asyncio.run(ann.annotate("c", {}, "k"))
    world.asked.clear()
    c = asyncio.run(ann.confirm("c", {}, "confirm:c", a.difficulty))
    assert sum(n for _, _, n in world.asked) == c.rollouts == sum(r["trials"] for r in c.results)
    # The rollouts went to the probes nearest the item (abilities within ~1 logit of b = 0.3).
    assert all(abs(ABILITY[r["probe"]] - 0.3) <= 1.0 for r in c.results)
    # A tight cap is honoured and reported.
    ann.confirmation = ConfirmSettings(z_se=0.0, max_budgets=0.5)
    capped = asyncio.run(ann.confirm("c", {}, "confirm2:c", a.difficulty))
    assert capped.stop == "cap" and capped.rollouts == round(0.5 * ann.fixed_budget)


def test_a_confirmation_stops_once_its_answers_rule_out_the_band_and_resumes_exactly():
    """An item at b = 0.3 (z 0.55) confirmed against a gap far below it, [0.30, 0.40]: its answers rule
    the gap out after a few batches (stop "outside"), for a fraction of a full confirmation. Resumed,
    it goes on to the precision target exactly as an uninterrupted confirmation does (same requests)."""
    world = World({"c": 0.3})
    ann = _annotator(world, "fixed")
    full = asyncio.run(ann.confirm("c", {}, "confirm:c", 0.0))
    assert full.stop == "precise"
    cut = asyncio.run(ann.confirm("c", {}, "confirm:c", 0.0, band=(0.30, 0.40)))
    assert cut.stop == "outside" and ann.confirmation.outside_min <= cut.rollouts < full.rollouts / 2
    assert cut.z > 0.40  # its estimate is past the band it ruled out
    world.asked.clear()
    resumed = asyncio.run(ann.confirm("c", {}, "confirm:c", 0.0, resume=cut))
    assert (resumed.z, resumed.rollouts, resumed.results, resumed.stop) == (full.z, full.rollouts, full.results,
                                                                            full.stop)
    assert sum(n for _, _, n in world.asked) == full.rollouts - cut.rollouts  # only the rest was asked
    assert cut.stop == "outside"  # the confirmation resumed from is left as it was
    # A band around the item never cuts it short; without enough answers, neither does a band far off.
    assert asyncio.run(ann.confirm("c", {}, "confirm:c", 0.0, band=(0.50, 0.60))).rollouts == full.rollouts
    ann.confirmation = ConfirmSettings(outside_min=10_000)
    assert asyncio.run(ann.confirm("c", {}, "confirm:c", 0.0, band=(0.30, 0.40))).stop == "precise"


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


def test_backend_confirm_labels_its_rollouts_and_leaves_the_shared_phase_alone():
    from benchfill.engine.backend import Backend, TrafficServices
    from benchfill.search.loop import Child, GapResult
    from benchfill.search.services import Spend

    world = World({"c": 0.2})

    class Client:  # the rollout client's surface TrafficServices uses; answers from the toy world
        phases: list[str] = []

        async def rollouts(self, items, trials, seed, probes, phase):
            self.phases.append(phase)
            n = await world.rollouts(items[0]["id"], items[0], probes[0], trials, str(seed))
            return [SimpleNamespace(correct=n, trials=trials, cached=False)]  # as probes.Rollout

    services = TrafficServices(None, None, None, Client(), seed=0)
    backend = Backend("sim", SimpleNamespace(seed=0), None, None, None, None)
    backend.services = services
    backend.annotator = _annotator(services, "adaptive")
    ann = asyncio.run(backend.annotator.fixed("c", {}, "k"))
    child = Child("c", "q", "q", 1, {"id": "c"}, Verdict(True), ann)
    result = GapResult(0, 0.4, 0.6, 0.5, "benchfill", [child], child, 1, Spend(rollouts=ann.rollouts))
    asyncio.run(backend.confirm(result))
    assert services.phase == "annotate"
    assert Client.phases.count("annotate") == len(ann.results) and set(Client.phases[len(ann.results):]) == {"confirm"}
    assert result.spend.rollouts == ann.rollouts + child.confirmation.rollouts
    assert abs(child.confirmation.difficulty - 0.2) < 3 * child.confirmation.se


def test_each_item_is_placed_with_its_own_guessing_floor():
    """BenchFill Sec. 4.1, fn. 4: online calibration takes the guessing floor of the original fit, which is per
    item (1 / its options). Four- and ten-option items of one true difficulty, answered by the 3PL with their
    own floor at the expected counts (no sampling noise), confirmed at the annotator's precision."""

    class Guessing:
        def __init__(self):
            self.b = {"four": 0.5, "ten": 0.5}

        async def rollouts(self, item_id, item, probe, n, key):
            g = 1 / len(item["options"])
            return round(n * (g + (1 - g) / (1 + math.exp(-(ABILITY[probe] - self.b[item_id])))))

    items = {"four": {"options": list("ABCD")}, "ten": {"options": list("ABCDEFGHIJ")}}
    probes = [Probe(n, a, 32) for n, a in ABILITY.items()]

    def placed(chance_of):
        ann = Annotator(Guessing(), probes, chance=0.1, b_min=B_MIN, b_max=B_MAX, protocol="fixed", chance_of=chance_of)
        return {i: asyncio.run(ann.annotate(i, it, f"k:{i}")) for i, it in items.items()}

    own = placed(lambda it: 1 / len(it["options"]))
    for a in own.values():
        assert abs(a.difficulty - 0.5) < 0.1
    assert own["four"].chance == 0.25 and own["ten"].chance == 0.1
    median = placed(None)  # one floor for all (0.1, the ten-option items'): the four-option item sits too easy
    assert abs(median["ten"].difficulty - 0.5) < 0.1 and median["four"].difficulty < 0.5 - 0.3


def test_anchor_link_recovers_how_placements_through_the_probes_map_onto_the_record():
    # Originals truly at b, recorded at 0.4 + 0.8 b (a fit's scale, shrunk and shifted); the probes answer
    # them at their true abilities, 64 trials each. Placed through the probes, an original lands near b: the
    # link maps it back onto the record, as it will a child.
    from benchfill.search.annotate import anchor_link

    rng = np.random.default_rng(3)
    b_true = rng.uniform(-2.5, 2.5, 120)
    theta = np.array(list(ABILITY.values()))
    trials = np.full((theta.size, b_true.size), 64)
    correct = rng.binomial(trials, 1 / (1 + np.exp(-(theta[:, None] - b_true[None, :]))))
    ids = tuple(f"q{i}" for i in range(b_true.size))
    matrix = SimpleNamespace(models=tuple(ABILITY), item_ids=ids, correct=correct, trials=trials)
    fit = SimpleNamespace(item_ids=ids, difficulty=0.4 + 0.8 * b_true, difficulty_se=np.full(b_true.size, 0.05),
                          chance=np.zeros(b_true.size))
    ann = Annotator(None, [Probe(n, a, 8) for n, a in ABILITY.items()], 0.0, B_MIN, B_MAX, "fixed")
    (offset, slope), info = anchor_link(ann, matrix, fit)
    assert info["items"] >= 100 and abs(slope - 0.8) < 0.04 and abs(offset - 0.4) < 0.06, (offset, slope, info)
    linked = Annotator(None, ann.probes, 0.0, B_MIN, B_MAX, "fixed", link=(offset, slope))
    assert linked.to_z(1.0) == pytest.approx((offset + slope - B_MIN) / (B_MAX - B_MIN))
    assert linked.from_z(linked.to_z(1.7)) == pytest.approx(1.7)
    # too few anchors the probes answered: the identity, and why
    few = SimpleNamespace(models=matrix.models, item_ids=ids[:5], correct=correct[:, :5], trials=trials[:, :5])
    assert anchor_link(ann, few, fit) == ((0.0, 1.0), {"items": 5, "why": "fewer than 10 anchor items placed with an se under 1"})


class OffsetWorld(World):
    """The toy world with each (probe, item) pair's own offset on the logit, drawn once from its key (the
    simulated world's ``pair_sd``): a probe's rollouts on an item agree with themselves beyond the curve."""

    def __init__(self, b: dict[str, float], pair_sd: float, seed: int = 0):
        super().__init__(b, seed)
        self.pair_sd = pair_sd

    def offset(self, item_id: str, probe: str) -> float:
        return self.pair_sd * float(np.random.default_rng(derive_seed(self.seed, "pair", item_id, probe)).normal())

    async def rollouts(self, item_id, item, probe, n, key):
        self.asked.append((item_id, probe, n))
        rng = np.random.default_rng(derive_seed(self.seed, "ro", key))
        x = ABILITY[probe] - self.b[item_id] - self.offset(item_id, probe)
        return int(rng.binomial(n, 1 / (1 + math.exp(-x))))


def test_confirming_through_fresh_probes_asks_only_probes_that_did_not_annotate():
    world = OffsetWorld({"c": 0.3}, pair_sd=2.0)
    ann = _annotator(world, "adaptive")
    a = asyncio.run(ann.annotate("c", {}, "k", target_z=0.5))
    assert 2 <= len(a.probe_names) < len(ABILITY) - 3
    same = asyncio.run(ann.confirm("c", {}, "confirm:c", a.difficulty, annotated=a.probe_names))
    assert set(same.probe_names) & set(a.probe_names)  # no allowance: the most informative, annotators or not
    ann.pair = 2.0
    assert ann.confirm_pool(a.probe_names) == ann.probes  # off by default (what-if: ConfirmSettings.fresh_probes)
    ann.confirmation = ConfirmSettings(fresh_probes=True)
    fresh = asyncio.run(ann.confirm("c", {}, "confirm:c", a.difficulty, annotated=a.probe_names))
    assert fresh.probe_names and not set(fresh.probe_names) & set(a.probe_names)
    # A resumed confirmation keeps to the same probes (it goes on as the uninterrupted one would)
    cut = asyncio.run(ann.confirm("c", {}, "confirm:c", a.difficulty, band=(0.0, 0.05), annotated=a.probe_names))
    assert cut.stop == "outside"
    resumed = asyncio.run(ann.confirm("c", {}, "confirm:c", a.difficulty, resume=cut, annotated=a.probe_names))
    assert (resumed.z, resumed.results) == (fresh.z, fresh.results)
    # With fewer than ``fresh_min`` probes left, or no allowance for offsets, any probe of the panel
    assert len(ann.confirm_pool(a.probe_names)) == len(ABILITY) - len(a.probe_names)
    ann.confirmation = ConfirmSettings(fresh_probes=True, fresh_min=len(ABILITY) - len(a.probe_names) + 1)
    assert ann.confirm_pool(a.probe_names) == ann.probes
    ann.confirmation, ann.pair = ConfirmSettings(fresh_probes=True), 0.0
    assert ann.confirm_pool(a.probe_names) == ann.probes


def test_a_confirmation_through_fresh_probes_does_not_share_the_annotations_offsets():
    """Children at known b, each annotated (adaptive, about 4 of the 13 probes) and confirmed twice: through any
    probe (the annotators among them) and through the others only. Offsets of sd 2 logits dominate the
    placements' errors: through any probe the confirmation's error keeps part of the annotation's (about 0.3
    here, where it spreads over every probe), through fresh ones none (seeds 3 and 4 with 200 children:
    0.34 and 0.29 against -0.02 and -0.04)."""
    rng = np.random.default_rng(3)
    b = {f"c{i}": float(x) for i, x in enumerate(rng.uniform(-1.0, 1.0, 150))}
    world = OffsetWorld(b, pair_sd=2.0, seed=3)
    ann = _annotator(world, "adaptive")
    ann.pair = 2.0
    errs = []
    for cid, true_b in b.items():
        a = asyncio.run(ann.annotate(cid, {}, f"k:{cid}", target_z=(true_b - B_MIN) / (B_MAX - B_MIN)))
        ann.confirmation = ConfirmSettings()
        same = asyncio.run(ann.confirm(cid, {}, f"confirm:{cid}", a.difficulty, annotated=a.probe_names))
        ann.confirmation = ConfirmSettings(fresh_probes=True)
        fresh = asyncio.run(ann.confirm(cid, {}, f"confirm:{cid}", a.difficulty, annotated=a.probe_names))
        if all(math.isfinite(x.difficulty) for x in (a, same, fresh)):
            errs.append([x.difficulty - true_b for x in (a, same, fresh)])
    e = np.array(errs)
    assert len(e) >= 140
    corr_same = np.corrcoef(e[:, 0], e[:, 1])[0, 1]
    corr_fresh = np.corrcoef(e[:, 0], e[:, 2])[0, 1]
    # (with 150 children a correlation's se is about 0.08)
    assert corr_same > 0.15 and abs(corr_fresh) < 0.15 and corr_fresh < corr_same - 0.15, (corr_same, corr_fresh)
