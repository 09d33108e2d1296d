"""Simulated probes: success rate follows g + (1-g) sigmoid(theta - b), graded by the REAL evaluators."""

from __future__ import annotations

import asyncio
import json
import math

import openai
import pytest

from benchfill.errors import ConfigError
from benchfill.evaluators import get_evaluator
from benchfill.sim import SimServer, World


def load(shared_data, name: str, limit: int | None = None) -> list[dict]:
    with open(shared_data / name / "items.jsonl") as fh:
        items = [json.loads(line) for line in fh]
    return items[:limit] if limit else items


def prompt(text: str, options: list[str] | None = None) -> list[dict]:
    body = f"<problem>\n{text}\n</problem>"
    if options:
        body += "\n<options>\n" + "\n".join(f"{chr(65 + k)}. {o}" for k, o in enumerate(options)) + "\n</options>"
    return [{"role": "user", "content": body}]


async def sample(srv: SimServer, model: str, messages: list[dict], n: int, seeds: range) -> list[str]:
    return (await sample_many(srv, model, [messages], n, seeds))[0]


async def sample_many(srv: SimServer, model: str, prompts: list[list[dict]], n: int, seeds: range) -> list[list[str]]:
    """Replies per prompt (all seeds' choices in order), requested concurrently."""
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0) as c:
        replies = await asyncio.gather(*(c.chat.completions.create(model=model, messages=m, n=n, seed=s)
                                         for m in prompts for s in seeds))
    k = len(seeds)
    return [[ch.message.content for r in replies[i * k:(i + 1) * k] for ch in r.choices] for i in range(len(prompts))]


def test_math_success_rate_matches_formula_under_the_real_grader(shared_data):
    items = load(shared_data, "aime24")
    world = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", seed=3)
    grader = get_evaluator("math")
    item = items[4]
    with SimServer(world) as srv:
        for probe in ("sim-probe-04", "sim-probe-09"):
            before = srv.stats["models"].get(probe, {}).get("correct", 0)
            replies = asyncio.run(sample(srv, probe, prompt(item["problem"]), 50, range(6)))
            graded = sum(grader.grade(r, item).correct for r in replies)
            # The grader agrees with the world on every reply...
            assert graded == srv.stats["models"][probe]["correct"] - before
            # ...and the rate matches the formula within 4 binomial standard deviations.
            p = world.p_correct(probe, world.lookup(item["id"]))
            a = world.discrimination(world.lookup(item["id"]))  # the item's own, drawn from its text
            assert a != 1.0 and a == world.discrimination(world.lookup(item["id"]))
            # the pair's own offset, N(0, 5^2) by default (World.pair_sd), drawn once from its keys
            e = world.pair_offset(probe, world.lookup(item["id"]))
            assert e != 0.0 and e == world.pair_offset(probe, world.lookup(item["id"])) and world.pair_sd == 5.0
            # each pair's curve is steeper, so that the offsets average to the latent one (World.pair_steepness)
            k = world.pair_steepness()
            assert k == pytest.approx(3.2890, abs=1e-4)  # by hand: sqrt(1 + pi 25 / 8) = sqrt(10.8175)
            x = k * a * (world.abilities[probe] - world.true_difficulty(item["id"])) + e
            assert p == pytest.approx(1 / (1 + math.exp(-x)))
            sd = math.sqrt(p * (1 - p) / len(replies))
            assert abs(graded / len(replies) - p) <= 4 * sd + 1e-9


def test_the_offsets_average_to_the_latent_curve_unless_added_to_it():
    """The latent curve was fitted to real answers, which already average over what each model knows of each
    item: with the offsets about it ("average", the default) the world's answers average to it again; added to it
    ("added", the world before s48) they flatten it, pulling a sure answer toward a coin's toss. 600 items x 12
    probes, each pair's probability set against the latent curve's where that is near 0 or 1."""
    items = [{"id": f"q{i}", "problem": f"What is {i} + {i % 7}?", "answer": str(i + i % 7)} for i in range(600)]
    gaps = {}
    for curve in ("average", "added"):
        world = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", seed=2,
                                 pair_curve=curve)
        rows = []
        for it in items:
            sim = world.lookup(it["id"])
            for probe in world.probes:
                x = world.discrimination(sim) * (world.abilities[probe] - sim.difficulty)
                rows.append((1 / (1 + math.exp(-x)), world.p_correct(probe, sim)))
        # pairs the latent curve puts at 0.9 or above, and at 0.1 or below: the mean probability there
        sure = [p for q, p in rows if q >= 0.9]
        never = [p for q, p in rows if q <= 0.1]
        assert len(sure) > 300 and len(never) > 300
        gaps[curve] = (sum(q for q, _ in rows if q >= 0.9) / len(sure) - sum(sure) / len(sure),
                       sum(never) / len(never) - sum(q for q, _ in rows if q <= 0.1) / len(never))
    # about the curve: within what 300+ pairs of sd ~0.35 allow (se ~0.02; seed 2 gives -0.014 at both ends);
    # added: pulled 0.13 toward the middle at both ends
    assert all(abs(g) < 0.05 for g in gaps["average"]), gaps
    assert all(g > 0.1 for g in gaps["added"]), gaps
    with pytest.raises(ConfigError, match="pair_curve 'flat' unknown"):
        World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", pair_curve="flat")


def test_the_commands_offer_the_worlds_offsets_and_curves():
    """The CLI keeps the world's pair_sd and pair_curve as literals, so that building its parser imports no
    numpy (the world's module does); they must stay the world's: `run`, `sim serve` and RunOptions alike."""
    from benchfill.cli import build_parser
    from benchfill.run import RunOptions
    from benchfill.sim.world import PAIR_CURVE, PAIR_CURVES, PAIR_SD

    parser = build_parser()
    run = parser.parse_args(["run", "--benchmark", "demo"])
    serve = parser.parse_args(["sim", "serve"])
    assert run.sim_pair_sd == serve.pair_sd == RunOptions.sim_pair_sd == PAIR_SD
    assert run.sim_pair_curve == serve.pair_curve == RunOptions.sim_pair_curve == PAIR_CURVE
    for argv, dest in ((["run", "--benchmark", "demo"], "sim_pair_curve"), (["sim", "serve"], "pair_curve")):
        for curve in PAIR_CURVES:
            assert getattr(parser.parse_args([*argv, f"--{dest.replace('_', '-')}", curve]), dest) == curve
        with pytest.raises(SystemExit):
            parser.parse_args([*argv, f"--{dest.replace('_', '-')}", "flat"])


def test_multiple_choice_floor_and_grading(shared_data):
    items = load(shared_data, "mmlu-pro", 120)
    world = World.from_items(items, evaluator="multiple_choice", text_field="question", answer_field="answer",
                             seed=1, n_probes=3)
    grader = get_evaluator("multiple_choice")
    probe = "sim-probe-01"  # the weakest probe: the 1/10 guessing floor matters
    with SimServer(world) as srv:
        expected, graded, total = 0.0, 0, 0
        per_item = asyncio.run(sample_many(srv, probe, [prompt(it["question"], it["options"]) for it in items],
                                           8, range(1)))
        for it, replies in zip(items, per_item, strict=True):
            graded += sum(grader.grade(r, it).correct for r in replies)
            expected += 8 * world.p_correct(probe, world.lookup(it["id"]))
            total += 8
        assert graded == srv.stats["models"][probe]["correct"]
    sd = math.sqrt(expected * (1 - expected / total))
    assert abs(graded - expected) <= 4 * sd
    assert world.lookup(items[0]["id"]).chance == pytest.approx(1 / len(items[0]["options"]))


def test_code_answers_pass_or_fail_the_real_tests(shared_data):
    items = load(shared_data, "humaneval", 6)
    world = World.from_items(items, evaluator="code", text_field="prompt", answer_field="canonical_solution",
                             seed=2, n_probes=12)
    grader = get_evaluator("code")
    probe = "sim-probe-07"
    with SimServer(world) as srv:
        per_item = asyncio.run(sample_many(srv, probe, [prompt(it["prompt"]) for it in items], 3, range(1)))
        pairs = [(r, it) for it, replies in zip(items, per_item, strict=True) for r in replies]
        correct = srv.stats["models"][probe]["correct"]
    grades = grader.grade_pairs(pairs)
    assert sum(g.correct for g in grades) == correct
    assert 0 < correct < len(pairs)  # both kinds of answer were exercised


def test_item_discrimination_spreads_as_set_and_is_the_items_own(shared_data):
    """log a ~ N(0, sd^2) over items, drawn from each item's text: the same item has the same a in every
    world of that seed; sd 0 is the 1PL the annotator fits (a = 1 everywhere)."""
    from benchfill.run import RunOptions
    from benchfill.sim.world import DISCRIMINATION_SD

    assert RunOptions.__dataclass_fields__["sim_discrimination"].default == DISCRIMINATION_SD
    items = load(shared_data, "mmlu-pro", 400)
    kw = dict(evaluator="multiple_choice", text_field="question", answer_field="answer", seed=2, n_probes=3)
    world, again = World.from_items(items, **kw), World.from_items(items, **kw)
    assert world.discrimination_sd == DISCRIMINATION_SD
    log_a = [math.log(world.discrimination(world.lookup(it["id"]))) for it in items]
    assert log_a == [math.log(again.discrimination(again.lookup(it["id"]))) for it in items]
    mean = sum(log_a) / len(log_a)
    sd = math.sqrt(sum((x - mean) ** 2 for x in log_a) / (len(log_a) - 1))
    assert abs(mean) < 4 * DISCRIMINATION_SD / math.sqrt(len(log_a))  # 4 standard errors
    assert abs(sd / DISCRIMINATION_SD - 1) < 4 / math.sqrt(2 * (len(log_a) - 1))
    flat = World.from_items(items, **kw, discrimination_sd=0.0)
    assert {flat.discrimination(flat.lookup(it["id"])) for it in items} == {1.0}
    with pytest.raises(ConfigError, match="discrimination_sd must lie in"):
        World.from_items(items, **kw, discrimination_sd=-0.1)
