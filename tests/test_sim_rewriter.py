"""Simulated rewriter and judge through real litellm: the kind rewriter moves difficulty toward the
target with its share, invalid children at the configured rate, the judge's recall and false-positive rate, and a
children registry that survives a server restart."""

from __future__ import annotations

import asyncio
import json
import math
import random

import httpx
import litellm
import numpy as np
import pytest

from benchfill import prompts
from benchfill.evaluators import get_evaluator
from benchfill.sim import SimServer, World


@pytest.fixture(scope="module")
def items(shared_data):
    return [json.loads(line) for line in open(shared_data / "aime24" / "items.jsonl")]


def make_world(items, **knobs) -> World:
    return World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", seed=4, **knobs)


def rewriter_prompt(parent: dict, target_z: float) -> str:
    fields = {k: parent[k] for k in ("id", "problem", "answer")}
    return (f"Rewrite the parent item toward the target difficulty.\n<parent>{json.dumps(fields)}</parent>\n"
            f"<target_difficulty>{10 * target_z:.1f}</target_difficulty>\n"
            f'<reference difficulty="2.0">A simpler item.</reference>\n<reference difficulty="8.0">A harder one.</reference>')


def child_of(reply: str) -> dict | None:
    """The child as benchfill reads it (the world writes in a real model's habits: fences, LaTeX left single)."""
    try:
        return prompts.parse_child(reply)
    except prompts.MalformedReply:
        return None


async def rewrite_all(srv: SimServer, jobs: list[tuple[dict, float, int]]) -> list[str]:
    async def one(parent, z, seed):
        r = await litellm.acompletion(model="openai/sim-rewriter", api_base=srv.base_url, api_key="sk-test",
                                      messages=[{"role": "user", "content": rewriter_prompt(parent, z)}],
                                      seed=seed, temperature=1.0, num_retries=0)
        return r.choices[0].message.content

    return await asyncio.gather(*(one(*job) for job in jobs))


async def judge_all(srv: SimServer, children: list[dict], n: int) -> list[list[str]]:
    async def one(child):
        r = await litellm.acompletion(model="openai/sim-judge", api_base=srv.base_url, api_key="sk-test",
                                      messages=[{"role": "user", "content": f"Judge.\n<item>{json.dumps(child)}</item>"}],
                                      n=n, seed=1, num_retries=0)
        return [ch.message.content for ch in r.choices]

    return await asyncio.gather(*(one(c) for c in children))


def test_kind_rewriter_moves_difficulty_toward_target_with_its_share(items):
    world = make_world(items, rewriter="kind", rewriter_knobs={"share": 0.6, "noise": 0.35, "invalid_base": 0.2})
    rng = random.Random(0)
    jobs = [(rng.choice(items), rng.uniform(0, 1), k) for k in range(240)]
    with SimServer(world) as srv:
        replies = asyncio.run(rewrite_all(srv, jobs))
    children = [child_of(r) for r in replies]
    assert all(c is not None for c in children)
    z_parent = np.array([world.true_z(p["id"]) for p, _, _ in jobs])
    z_target = np.array([z for _, z, _ in jobs])
    z_child = np.array([world.true_z(c["problem"]) for c in children])
    x, y = z_target - z_parent, z_child - z_parent
    slope, intercept = np.polyfit(x, y, 1)
    assert slope == pytest.approx(0.6, abs=0.06)
    assert abs(intercept) < 0.03
    sigma_z = 0.35 / (world.b_max - world.b_min)
    assert np.std(y - slope * x - intercept) == pytest.approx(sigma_z, rel=0.25)
    # Children read as rewrites: new text, new id, a parent link, and they are registered as generated.
    c0, (p0, _, _) = children[0], jobs[0]
    assert c0["problem"] != p0["problem"] and c0["id"].startswith(p0["id"] + "-sim")
    assert world.lookup(c0["problem"]).parent == p0["id"] and world.lookup(c0["id"]).origin == "generated"
    invalid = [not world.is_valid(c["problem"]) for c in children]
    assert abs(np.mean(invalid) - 0.2) <= 4 * math.sqrt(0.2 * 0.8 / len(children))


def test_invalid_child_states_a_wrong_answer_that_correct_probes_miss(items):
    world = make_world(items[:6], rewriter_knobs={"invalid_base": 1.0})
    with SimServer(world) as srv:
        child = child_of(asyncio.run(rewrite_all(srv, [(items[0], 0.5, 1)]))[0])
    truth = world.lookup(child["problem"])
    assert not truth.valid and truth.stated == child["answer"] != truth.answer
    grader = get_evaluator("math")
    correct_reply = f"Working it out.\nTherefore the final answer is \\boxed{{{truth.answer}}}."
    assert not grader.grade(correct_reply, child).correct


def test_judge_recall_and_false_positive_rate(items):
    world = make_world(items, rewriter_knobs={"invalid_base": 0.5, "invalid_slope": 0.0, "judge_recall": 0.8, "judge_fpr": 0.1})
    with SimServer(world) as srv:
        children = [child_of(r) for r in asyncio.run(rewrite_all(srv, [(it, 0.5, s) for it in items
                                                                         for s in range(3)]))]
        verdicts = asyncio.run(judge_all(srv, children, n=10))
    caught, flagged, n_bad, n_good = 0, 0, 0, 0
    for child, replies in zip(children, verdicts, strict=True):
        read = [prompts.parse_verdict(r) for r in replies]  # as benchfill reads them, drafts in <think> set aside
        says_invalid = sum(not valid for valid, _ in read)
        assert all(reason for _, reason in read)
        if world.is_valid(child["problem"]):
            flagged, n_good = flagged + says_invalid, n_good + len(replies)
        else:
            caught, n_bad = caught + says_invalid, n_bad + len(replies)
    assert n_bad > 100 and n_good > 100
    assert abs(caught / n_bad - 0.8) <= 4 * math.sqrt(0.8 * 0.2 / n_bad)
    assert abs(flagged / n_good - 0.1) <= 4 * math.sqrt(0.1 * 0.9 / n_good)


def test_malformed_rewriter_replies_then_the_same_child(items):
    world = make_world(items[:5], rewriter_malformed_rate=0.4)
    jobs = [(items[0], 0.9, 7)] * 40
    with SimServer(world) as srv:
        replies = asyncio.run(rewrite_all(srv, jobs))
        assert srv.stats["models"]["sim-rewriter"]["malformed_children"] == sum("</child>" not in r for r in replies)
    good = {json.dumps(child_of(r), sort_keys=True) for r in replies if "</child>" in r}
    assert len(good) == 1  # a retried request yields the very same child
    assert 0 < sum("</child>" not in r for r in replies) < 40


def test_children_registry_survives_a_restart(items, tmp_path):
    state = tmp_path / "sim_state.jsonl"
    first = make_world(items, state_path=state)
    with SimServer(first) as srv:
        child = child_of(asyncio.run(rewrite_all(srv, [(items[2], 0.8, 3)]))[0])
    b = first.true_difficulty(child["problem"])
    again = make_world(items, state_path=state)  # a fresh process would build exactly this
    assert again.true_difficulty(child["id"]) == b and again.lookup(child["problem"]).stated == child["answer"]
    with SimServer(again) as srv:
        truth = httpx.post(srv.base_url.removesuffix("/v1") + "/sim/truth", json={"item": child}).json()
        r = litellm.completion(model="openai/sim-probe-12", api_base=srv.base_url, api_key="sk-test",
                               messages=[{"role": "user", "content": f"<problem>{child['problem']}</problem>"}])
        assert srv.stats["unknown_problems"] == 0
    assert truth["known"] and truth["difficulty"] == pytest.approx(b) and truth["parent"] == items[2]["id"]
    assert "\\boxed{" in r.choices[0].message.content
    assert len(state.read_text().splitlines()) == 1


def test_the_products_own_templates_and_parsers_round_trip(shared_data):
    """The pipeline's real prompts (benchfill/prompts/) are what the world reads; its parsers read the replies."""
    from benchfill.benchmarks import get_benchmark
    from benchfill.prompts import (
        format_judge_prompt,
        format_rewriter_prompt,
        format_solver_prompt,
        parse_child,
        parse_verdict,
    )

    bench = get_benchmark("mmlu-pro", shared_data)
    items, spec = bench.items[:40], bench.spec
    world = World.from_items(items, evaluator=spec.evaluator, text_field=spec.text_field,
                             answer_field=spec.answer_field, options_field=spec.options_field, seed=2)
    parent = items[0]
    prompt = format_rewriter_prompt(parent, 0.8, [(items[1], 0.2), (items[2], 0.9)], spec)
    with SimServer(world) as srv:
        kw = {"api_base": srv.base_url, "api_key": "sk-test", "num_retries": 0}
        reply = litellm.completion(model="openai/sim-rewriter", messages=[{"role": "user", "content": prompt}],
                                   seed=5, **kw).choices[0].message.content
        child = parse_child(reply, required=[spec.text_field, spec.answer_field, spec.options_field])
        truth = world.lookup(child[spec.text_field])
        assert truth.parent == parent["id"] and sorted(child["options"]) == sorted(parent["options"])
        # The child's true answer is the parent's correct option, wherever the shuffle put it.
        assert child["options"][ord(truth.answer) - 65] == parent["options"][ord(parent["answer"]) - 65]
        judged = litellm.completion(model="openai/sim-judge", seed=1, **kw,
                                    messages=[{"role": "user", "content": format_judge_prompt(child, spec)}])
        valid, reason = parse_verdict(judged.choices[0].message.content)
        assert reason
        solver = format_solver_prompt(child, spec)
        r = litellm.completion(model="openai/sim-probe-12", messages=[{"role": "user", "content": solver}], **kw)
        assert srv.stats["unknown_problems"] == 0 and "The answer is (" in r.choices[0].message.content


def test_replicas_sharing_a_state_file_know_each_others_children(items, tmp_path):
    """Two servers of one world (a fleet's replicas) share its state file: a child one of them wrote is
    asked of the other, which reads it there instead of answering an unknown problem wrong."""
    state = tmp_path / "sim_state.jsonl"
    a, b = make_world(items, state_path=state), make_world(items, state_path=state)  # both up before any child
    with SimServer(a) as srv_a, SimServer(b) as srv_b:
        child = child_of(asyncio.run(rewrite_all(srv_a, [(items[2], 0.8, 3)]))[0])
        r = litellm.completion(model="openai/sim-probe-12", api_base=srv_b.base_url, api_key="sk-test",
                               messages=[{"role": "user", "content": f"<problem>{child['problem']}</problem>"}])
        assert srv_b.stats["unknown_problems"] == 0 and "\\boxed{" in r.choices[0].message.content
    assert b.true_difficulty(child["id"]) == a.true_difficulty(child["id"])


def test_runs_sharing_a_world_rewrite_each_others_later_children(items, tmp_path):
    """Runs on one store share a world: a child run A made after run B's world was built is a parent B's
    rewriter is asked to rewrite. B finds it in A's state file (``World.siblings``), where it used to take it
    for an item it never made and rewrite it from z 0.5."""
    a = make_world(items, state_path=tmp_path / "a" / "sim_state.jsonl")
    b = make_world(items, state_path=tmp_path / "b" / "sim_state.jsonl")
    b.siblings = lambda: [tmp_path / "a" / "sim_state.jsonl"]  # built before A made any child
    with SimServer(a) as srv_a:
        child = child_of(asyncio.run(rewrite_all(srv_a, [(items[2], 0.9, 3)]))[0])
    assert b.lookup(child["problem"]) is None
    with SimServer(b) as srv_b:
        grandchild = child_of(asyncio.run(rewrite_all(srv_b, [(child, 0.9, 4)]))[0])
    assert b.lookup(grandchild["problem"]).parent == child["id"]
    assert b.true_difficulty(child["id"]) == a.true_difficulty(child["id"])
