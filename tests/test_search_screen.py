"""The order screen on the search's children (issue 12, part 6), and the simulated wrong key's slip."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import pytest

from benchfill.search.annotate import Annotation, Annotator
from benchfill.search.loop import (
    Child,
    GapSearch,
    SearchSettings,
    benchfill_search,
    select_closest,
    select_posterior,
)
from benchfill.search.screen import ORDER_FLAG, ScreenSettings, axis_ends, pooled_results, screen_child
from benchfill.search.services import Probe, Verdict
from benchfill.search.steering import Steering

SCREEN = ScreenSettings(cache_dir=False)
ABILITY = [-2.0, -1.0, 0.0, 1.0, 2.0]


def _child(cid: str, correct: list[int], trials: int = 8, z: float = 0.5) -> Child:
    results = [{"probe": f"p{j}", "ability": a, "correct": k, "trials": trials}
               for j, (a, k) in enumerate(zip(ABILITY, correct, strict=True))]
    ann = Annotation(0.0, 0.1, z, 0.02, trials * len(correct), results)
    return Child(cid, "q0", "q0", 1, {"id": cid}, Verdict(True, "ok", "judge"), ann)


def test_the_screen_flags_a_reversal_child_and_not_a_monotone_one():
    reversal = _child("rev", [7, 6, 3, 1, 0])  # strong probes fail what weak ones solve: a wrong key's mark
    monotone = _child("mono", [0, 2, 4, 6, 8])
    r, m = screen_child(reversal, SCREEN), screen_child(monotone, SCREEN)
    assert r["flagged"] and r["o"] <= 0.05 and ORDER_FLAG in reversal.flags
    assert not m["flagged"] and m["o"] == 1.0 and ORDER_FLAG not in monotone.flags
    assert reversal.annotation.order is r and r["probes"] == [f"p{j}" for j in range(5)]


def test_the_screen_orders_by_ability_pools_the_confirmation_and_can_clear_a_flag():
    c = _child("c", [7, 6, 3, 1, 0])
    c.annotation.results.reverse()  # the annotation lists probes by name, not ability: the order comes from ability
    assert screen_child(c, SCREEN)["flagged"]
    # Fresh rollouts that rise steeply outweigh the first look: the pooled trajectory is monotone.
    conf = _child("c", [0, 10, 30, 60, 80], trials=80).annotation
    c.confirmation = conf
    rec = screen_child(c, SCREEN)
    assert rec["pooled_confirmation"] and not rec["flagged"] and ORDER_FLAG not in c.flags
    assert rec["trials"] == [88] * 5 and conf.order is rec
    # A probe asked by neither is left out; one probe alone is not scored.
    assert [p for p, *_ in pooled_results([{"probe": "a", "ability": 1.0, "correct": 0, "trials": 0}])] == []
    single = _child("s", [1, 0, 0, 0, 0])
    single.annotation.results = single.annotation.results[:1]
    assert screen_child(single, SCREEN) is None and ORDER_FLAG not in single.flags


def test_spot_checks_go_to_the_unasked_ends_of_the_probe_axis():
    probes = [Probe(f"p{j}", a, 8) for j, a in enumerate(ABILITY)]
    asked = [{"probe": "p3", "ability": 1.0, "correct": 0, "trials": 4}]
    assert [p.name for p in axis_ends(probes, asked)] == ["p0", "p4"]
    assert [p.name for p in axis_ends(probes, asked, "far")] == ["p0"]
    assert axis_ends(probes, [{"probe": "p0", "ability": -2.0, "correct": 0, "trials": 4},
                              {"probe": "p4", "ability": 2.0, "correct": 0, "trials": 4}]) == []


def test_a_flagged_child_is_not_chosen_while_an_unflagged_one_exists():
    near = _child("a-near", [7, 6, 3, 1, 0], z=0.5)  # right on target, but an order anomaly
    far = _child("b-far", [0, 2, 4, 6, 8], z=0.6)
    for c in (near, far):
        screen_child(c, SCREEN)
    ann = Annotator(None, [Probe("p0", 0.0, 8)], 0.0, -3.0, 3.0)
    assert select_closest([near, far], 0.5) is far
    assert select_posterior([near, far], 0.5, Steering(), ann) is far
    # With no unflagged valid child the flagged one is chosen, openly: its flag travels with it.
    assert select_closest([near], 0.5) is near and ORDER_FLAG in near.flags


def _sim(evaluator="math", pair_sd=3.5, **knobs):
    from benchfill.benchmarks import get_benchmark
    from benchfill.sim import World

    bench = get_benchmark("demo")
    s = bench.spec
    world = World.from_items(bench.items, evaluator=s.evaluator, text_field=s.text_field,
                             answer_field=s.answer_field, seed=3, rewriter="realistic", rewriter_knobs=knobs,
                             pair_sd=pair_sd)
    return bench, world


def _invalid_child(world, bench):
    import random

    from benchfill.sim.roles import make_child

    parent = next(iter(world.items.values()))
    for i in range(200):
        c = make_child(world, dict(parent.fields), parent, 0.5, random.Random(i))
        if not c.valid:
            return c
    raise AssertionError("no invalid child in 200 draws")


def test_the_sims_slip_makes_an_invalid_childs_correctness_fall_with_ability_on_both_paths():
    from benchfill.evaluators import get_evaluator
    from benchfill.sim import roles
    from benchfill.sim.direct import WorldServices

    bench, world = _sim(invalid_base=1.0, invalid_max=1.0)
    child = _invalid_child(world, bench)
    child.difficulty = 0.0  # mid-scale: every probe errs often enough to show the slip's gradient
    probes = sorted(world.abilities, key=world.abilities.get)
    weak, strong = probes[0], probes[-1]
    assert world.p_slip(weak) == pytest.approx(0.5) and world.p_slip(strong) == 0.0
    n = 400
    direct = WorldServices(world, bench.spec, 0)
    item = child.fields
    d = {p: direct.graded(item, p, n, 7) / n for p in (weak, strong)}
    # The server's path: the world's reply texts, graded by the real math evaluator against the stated key.
    ev = get_evaluator("math")
    replies, _ = roles.solve(world, weak, "prompt", "hash-w", child, 11, n)
    s_weak = sum(ev.grade(r, item, bench.spec).correct for r in replies) / n
    replies, _ = roles.solve(world, strong, "prompt", "hash-s", child, 11, n)
    s_strong = sum(ev.grade(r, item, bench.spec).correct for r in replies) / n
    expect_weak = (1 - world.p_correct(weak, child)) * world.p_slip(weak)
    assert d[weak] > 0.25 and s_weak > 0.25 and d[strong] == 0.0 and s_strong == 0.0
    # Both paths draw from the same rule: agreement within sampling error (and with the formula).
    se = np.sqrt(expect_weak * (1 - expect_weak) / n)
    assert abs(d[weak] - expect_weak) < 4 * se and abs(s_weak - expect_weak) < 4 * se
    assert abs(d[weak] - s_weak) < 4 * np.sqrt(2) * se
    # slip=0 keeps the first world's rule: no reply matches a wrong key.
    _, flat = _sim(invalid_base=1.0, invalid_max=1.0, slip=0.0)
    flat_child = _invalid_child(flat, bench)
    assert WorldServices(flat, bench.spec, 0).graded(flat_child.fields, weak, 200, 7) == 0


def _screened_search(pair_sd: float, pair: float):
    """The search on the demo's widest gap, in a world with (probe, item) offsets ``pair_sd``, its annotator
    allowing ``pair`` for them; every child the judge sees with a wrong key gets through it."""
    from benchfill.sim.direct import WorldServices

    bench, world = _sim(judge_recall=0.0, pair_sd=pair_sd)
    services = WorldServices(world, bench.spec, 0)
    probes = [Probe(p, a, 8) for p, a in world.abilities.items()]
    z = {i: world.true_z(i) for i in (it["id"] for it in bench.items)}
    items = {it["id"]: it for it in bench.items}
    ordered = sorted(z.values())
    i = int(np.argmax(np.diff(ordered)))
    gap = GapSearch(0, ordered[i], ordered[i + 1], items, z)
    ann = Annotator(services, probes, 0.0, world.b_min, world.b_max, "adaptive", pair=pair)
    res = asyncio.run(benchfill_search(gap, services, ann, SearchSettings(rounds=4), seed=1))
    judged = [c for c in res.children if c.valid]
    bad = [c for c in judged if not world.is_valid(str(c.item[bench.spec.text_field]))]
    return res, judged, bad, [c for c in judged if c not in bad]


def test_where_probes_agree_with_themselves_the_screen_allows_for_it(tmp_path, monkeypatch):
    """In the world's default, each probe's own offset on an item (pair_sd 3.5), a valid item's answers rise
    along the probe axis less regularly than binomial draws: the binomial null flags many valid children, and
    the null that allows for the run's pair allowance holds them near alpha. (It also flags no wrong key in this
    world: bench/bench_screen.py, docs/profiles.md.)"""
    from benchfill.search.screen import ScreenSettings, order_record, order_score, pooled_results

    monkeypatch.setenv("BENCHFILL_CACHE_DIR", str(tmp_path))
    res, judged, bad, good = _screened_search(3.5, 3.5)
    assert len(good) >= 20 and all(order_record(c)["o"] is not None for c in judged)
    allowed = sum(ORDER_FLAG in c.flags for c in good)
    binomial = 0
    for c in good:
        conf = c.confirmation
        rec = order_score(pooled_results(c.annotation.results, c.annotation.spot,
                                         conf.results if conf is not None else None), ScreenSettings())
        binomial += rec is not None and rec["flagged"]
    assert allowed / len(good) <= 0.1 and binomial >= allowed + 3, (allowed, binomial, len(good))
    assert res.chosen is not None and ORDER_FLAG not in res.chosen.flags


def test_in_the_sim_the_search_flags_wrong_key_children_the_judge_let_through(tmp_path, monkeypatch):
    """Probes that answer independently about the curve (pair_sd 0): the screen flags most wrong keys."""
    monkeypatch.setenv("BENCHFILL_CACHE_DIR", str(tmp_path))  # the calibrations' on-disk cache
    res, judged, bad, good = _screened_search(0.0, 0.0)
    assert len(bad) >= 5 and len(good) >= 8  # (11 good in this draw of the world; 20 before the prompts' rewording)
    assert sum(ORDER_FLAG in c.flags for c in bad) / len(bad) >= 0.5
    assert sum(ORDER_FLAG in c.flags for c in good) / len(good) <= 0.1
    assert all(c.annotation.order is not None for c in judged)
    assert res.chosen is not None and ORDER_FLAG not in res.chosen.flags
    spot = sum(sum(x["trials"] for x in c.annotation.spot) for c in judged)
    assert spot > 0 and res.spend.screen_rollouts == spot  # counted apart from annotation and confirmation
    assert res.spend.rollouts == sum(c.annotation.rollouts for c in res.children if c.annotation)


def test_a_chosen_order_anomaly_is_flagged_in_the_report_the_queue_and_the_review_page(tmp_path, monkeypatch):
    from benchfill.review.server import ReviewServer
    from benchfill.run import RunOptions, run

    monkeypatch.setenv("BENCHFILL_CACHE_DIR", str(tmp_path / "cache"))
    # Every child has a wrong key that weak probes give and the judge never catches: no unflagged
    # valid child exists, so the chosen ones are order anomalies, chosen openly. Such a child places
    # beyond the hardest item here, where the fallback would leave the gap open (test_search_loop.py);
    # the range rule, and the check that sets aside a child that would widen the coverage, are lifted so
    # that this test follows the flag of a chosen anomaly.
    monkeypatch.setattr("benchfill.search.loop.in_range", lambda children: children)
    monkeypatch.setattr("benchfill.search.loop.GapSearch.widens", lambda self, c: False)
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), sim_rewriter="kind", gaps=1, rounds=2,
                      parents=2, children=2, references=8, sim_probes=8, progress=False, sim_pair_sd=0.0,
                      sim_rewriter_knobs={"invalid_base": 1.0, "invalid_max": 1.0, "judge_recall": 0.0,
                                          "slip": 1.0})
    d = run(opts)
    rep = json.loads((d / "report.json").read_text())
    chosen = [g for g in rep["gaps"] if g["chosen_id"]]
    assert chosen and all(ORDER_FLAG in g["flags"] and g["order_consistency"]["o"] <= 0.05 for g in chosen)
    queue = [json.loads(x) for x in (d / "review_queue.jsonl").read_text().splitlines()]
    assert queue and all(ORDER_FLAG in q["flags"] and q["order_consistency"]["flagged"] for q in queue)
    with ReviewServer(d) as srv:
        page = httpx.get(srv.url)
        item = httpx.get(f"http://127.0.0.1:{srv.port}/item/{queue[0]['item_id']}", cookies=page.cookies)
    assert ORDER_FLAG in page.text and ORDER_FLAG in item.text
