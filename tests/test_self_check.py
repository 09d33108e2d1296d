"""A new code item's own reference solution, run against its own tests before any judge or rollout."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import sqlite3

import pytest

from benchfill.benchmarks import BenchmarkSpec
from benchfill.cli import main
from benchfill.config import LLMConfig, RetryConfig
from benchfill.evaluators.code_tests import CodeTests
from benchfill.llm import Failure, RewriteResult, rewrite
from benchfill.prompts import parse_child
from benchfill.sim import SimServer, World, roles, texts

SPEC = BenchmarkSpec(name="tiny-code", text_field="prompt", answer_field="canonical_solution", tests_field="test",
                     entry_point_field="entry_point", evaluator="code", solver_prompt="code")


@pytest.fixture
def code_items(shared_data):
    lines = (shared_data / "humaneval" / "items.jsonl").read_text().splitlines()[:6]
    return [json.loads(line) for line in lines]


def _code_run(tmp_path, lines: list[str], tests_field: str, knobs: str):
    """A small simulated code run (16 HumanEval items, one gap, one round of 2 x 4 children): its folder."""
    items = tmp_path / "items.jsonl"
    items.write_text("".join(lines))
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "tiny-code"\ntext_field = "prompt"\nanswer_field = "canonical_solution"\n'
                    f'{tests_field}entry_point_field = "entry_point"\nevaluator = "code"\nsolver_prompt = "code"\n')
    runs = tmp_path / "runs"
    assert main(["run", "--items", str(items), "--spec", str(spec), "--gaps", "1", "--rounds", "1", "--parents", "2",
                 "--children", "4", "--sim-probes", "4", "--no-confirm", "--quiet", "--runs-dir", str(runs),
                 "--rewriter-knobs", knobs]) == 0
    (run_dir,) = runs.iterdir()
    return run_dir


def code_world(items, **knobs) -> World:
    return World.from_items(items, evaluator="code", text_field="prompt", answer_field="canonical_solution",
                            n_probes=2, seed=1, rewriter_knobs=knobs)


def test_running_the_reference_tells_broken_tests_and_not_tests_written_to_a_wrong_solution(code_items):
    grader, item = CodeTests(), code_items[0]
    assert grader.reference_fault(item, SPEC) is None
    broken = {**item, "test": texts.invalid_code_test(item["test"])}
    assert grader.reference_fault(broken, SPEC).startswith("its reference solution fails its own tests (failed")
    # The simulated world's two kinds of invalid child, made by the rewriter itself: with tests_agree 0 every
    # one fails its own tests, with 1 every one passes them, while a right solution (a probe's) fails.
    world = code_world(code_items, invalid_base=1.0, invalid_max=1.0, tests_agree=0.0)
    parent = world.lookup(item["prompt"])
    child = roles.make_child(world, dict(item), parent, 0.5, random.Random(0))
    assert not child.valid and grader.reference_fault(child.fields, SPEC) is not None
    world = code_world(code_items, invalid_base=1.0, invalid_max=1.0, tests_agree=1.0)
    child = roles.make_child(world, dict(item), world.lookup(item["prompt"]), 0.5, random.Random(0))
    assert not child.valid and grader.reference_fault(child.fields, SPEC) is None
    assert not grader.grade(child.answer, child.fields, SPEC).correct  # the true solution fails these tests


def test_a_rewriter_child_without_the_tests_is_asked_for_again(tmp_path, code_items):
    def dropping(reply):  # a rewriter that leaves out the tests every time
        child = parse_child(reply)
        child.pop("test", None)
        return child

    with SimServer(code_world(code_items)) as srv:
        cfg = LLMConfig(model="openai/sim-rewriter", api_base=srv.base_url, timeout_s=5, max_repairs=1)
        retry = RetryConfig(max_attempts=3, initial_wait_s=0, max_wait_s=0, jitter_s=0)
        parent = {k: v for k, v in code_items[0].items() if k != "task_id"}
        got = asyncio.run(rewrite(cfg, parent, 0.7, [], spec=SPEC, seed=1, retry=retry, parse=dropping))
        assert isinstance(got, Failure) and len(got.replies) == 2  # the first reply and one repair turn
        kept = asyncio.run(rewrite(cfg, parent, 0.7, [], spec=SPEC, seed=1, retry=retry))
        assert isinstance(kept, RewriteResult) and "test" in kept.child and "entry_point" in kept.child


def test_a_code_run_sets_aside_children_that_fail_their_own_tests_before_judge_and_rollouts(tmp_path, shared_data):
    run_dir = _code_run(tmp_path, (shared_data / "humaneval" / "items.jsonl").read_text().splitlines(True)[:16],
                        "tests_field = \"test\"\n", "invalid_base=0.6,tests_agree=0")
    db = sqlite3.connect(run_dir / "store.db")
    rows = db.execute("select id, valid, judge_reason, flags_json, rollouts from candidate").fetchall()
    db.close()
    assert len(rows) == 8
    refused = [r for r in rows if "fails_own_check" in json.loads(r[3])]
    assert refused, rows  # 0.6 of the children are invalid, and none has tests that agree with it
    for _id, valid, reason, _flags, rollouts in refused:
        assert not valid and rollouts == 0 and reason.startswith("its reference solution fails its own tests")
    report = json.loads((run_dir / "report.json").read_text())
    spend = report["spend"]
    assert spend["rewriter_calls"] == 8 and spend["judge_calls"] == 8 - len(refused)  # no judge was asked


def test_a_multiple_choice_child_its_grader_cannot_read_is_set_aside(tmp_path, shared_data, monkeypatch):
    # A rewriter's eleventh option (or a key naming none) passed the judge, then stopped the grading of every
    # probe's answer: "field 'options' must be a list of 2 to 10 options", exit 2, and so on every rerun
    from benchfill.evaluators.multiple_choice import MultipleChoice

    grader = MultipleChoice()
    item = {"id": "x", "question": "?", "options": list("abcd"), "answer": "B"}
    assert grader.reference_fault(item) is None
    assert grader.reference_fault({**item, "options": list("abcdefghijk")}) == \
        'field \'options\' must be a list of 2 to 10 options (or {"text": [...], "label": [...]})'
    assert grader.reference_fault({**item, "answer": "E"}) == "field 'answer' = 'E' is not one of the 4 options"

    make_child = roles.make_child

    def eleven(*args, **kwargs):
        child = make_child(*args, **kwargs)
        child.fields["options"] = list(child.fields["options"]) + ["None of the above"] * (11 - len(child.fields["options"]))
        return child

    monkeypatch.setattr(roles, "make_child", eleven)
    items = tmp_path / "items.jsonl"
    items.write_text("".join((shared_data / "mmlu-pro" / "items.jsonl").read_text().splitlines(True)[:40]))
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "mm"\ntext_field = "question"\nanswer_field = "answer"\noptions_field = "options"\n'
                    'evaluator = "multiple_choice"\nsolver_prompt = "multiple_choice"\nchance = "options"\n')
    runs = tmp_path / "runs"
    assert main(["run", "--items", str(items), "--spec", str(spec), "--gaps", "1", "--rounds", "1", "--parents", "2",
                 "--children", "2", "--sim-probes", "4", "--no-confirm", "--quiet", "--runs-dir", str(runs)]) == 0
    (run_dir,) = runs.iterdir()
    db = sqlite3.connect(run_dir / "store.db")
    rows = db.execute("select judge_reason, flags_json, rollouts from candidate").fetchall()
    db.close()
    assert len(rows) == 4 and all(json.loads(f) == ["fails_own_check"] and n == 0 for _, f, n in rows)
    assert rows[0][0] == 'field \'options\' must be a list of 2 to 10 options (or {"text": [...], "label": [...]})'


def test_tests_written_to_a_wrong_solution_pass_the_probes_that_make_the_same_slip(code_items):
    # The world failed every probe on every invalid code child, so one whose tests agree with its wrong
    # solution could never be placed, let alone chosen: only a judge's miss, never a shipped wrong item.
    # Now a probe's wrong reply may be that same wrong solution (the slip a wrong key draws in math), and the
    # sandbox's grade of the world's replies agrees with the world's own count.
    grader = CodeTests()
    passed = {}
    for agree in (1.0, 0.0):
        world = code_world(code_items, invalid_base=1.0, invalid_max=1.0, tests_agree=agree)
        item = code_items[0]
        child = world.register_child(roles.make_child(world, dict(item), world.lookup(item["prompt"]), 0.5,
                                                      random.Random(0)))
        weakest = min(world.abilities, key=world.abilities.get)
        prompt = texts.code_response(child.fields["prompt"], "")  # any prompt naming the child: its hash seeds
        replies, _ = roles.solve(world, weakest, prompt, "h", child, 0, 40)
        graded = [grader.grade(r, child.fields, SPEC).correct for r in replies]
        counted = [world.graded_correct(weakest, child, world.uniform(weakest, "h", 0, i),
                                        world.uniform("slip", weakest, "h", 0, i)) for i in range(40)]
        assert graded == counted
        passed[agree] = sum(graded)
    assert passed[1.0] > 0 and passed[0.0] == 0


def test_a_run_recorded_with_another_guessing_floor_is_not_resumed_on_this_ones(tmp_path, shared_data, capsys):
    # A multiple-choice spec without `chance` meant 0 before, "options" now: a run started before was resumed
    # on the new floors, fitted again, and kept its first rounds' children under another gap
    from benchfill.store import Store

    items = tmp_path / "items.jsonl"
    items.write_text("".join((shared_data / "mmlu-pro" / "items.jsonl").read_text().splitlines(True)[:40]))
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "mm"\ntext_field = "question"\nanswer_field = "answer"\noptions_field = "options"\n'
                    'evaluator = "multiple_choice"\nsolver_prompt = "multiple_choice"\n')
    args = ["run", "--items", str(items), "--spec", str(spec), "--gaps", "1", "--rounds", "1", "--parents", "2",
            "--children", "2", "--sim-probes", "4", "--no-confirm", "--quiet", "--runs-dir", str(tmp_path / "runs")]
    assert main(args) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    store = Store(run_dir / "store.db")  # a run's own store keeps its rows under no run id
    assert store.get_meta("benchmark")["chance"] == "options"
    store.set_meta("benchmark", {**store.get_meta("benchmark"), "chance": 0.0})  # as the version before wrote it
    store.close()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"benchfill: error: run {run_dir.name} was made by an earlier benchfill that read its "
                          "spec's chance as 0.0; this version reads 'options'")
    assert err.endswith("so it cannot be resumed: start it anew under another --run-id (a sweep's unit: another "
                        "label or --runs-dir)")
    # and the way it gives works: the same command under another run id
    assert main([*args, "--run-id", "anew"]) == 0


def test_a_child_of_an_invalid_code_child_is_rewritten_from_its_true_solution(code_items):
    # A grandchild took the shown parent's wrong solution as its truth and wrapped the wrapped tests again, so
    # that check called itself (RecursionError): the served world set it aside, the in-process one placed it
    grader = CodeTests()
    item = code_items[0]
    for agree, valid_rate in ((1.0, 1.0), (1.0, 0.0), (0.0, 1.0)):
        world = code_world(code_items, invalid_base=1.0, invalid_max=1.0, tests_agree=agree)
        child = world.register_child(roles.make_child(world, dict(item), world.lookup(item["prompt"]), 0.5,
                                                      random.Random(0)))
        world.rewriter = dataclasses.replace(world.rewriter, invalid_base=1.0 - valid_rate)  # the grandchild's draw
        grand = world.register_child(roles.make_child(world, dict(child.fields), child, 0.5, random.Random(1)))
        assert grand.answer == item["canonical_solution"]  # the true solution, not the parent's wrong one
        fault = grader.reference_fault(grand.fields, SPEC)
        assert fault is None or "RecursionError" not in fault
        if grand.valid:  # a valid child of an invalid parent: its own true solution passes its own tests
            assert fault is None and grader.grade(grand.answer, grand.fields, SPEC).correct
        weakest = min(world.abilities, key=world.abilities.get)
        replies, _ = roles.solve(world, weakest, "p", "h", grand, 0, 30)
        counted = [world.graded_correct(weakest, grand, world.uniform(weakest, "h", 0, i),
                                        world.uniform("slip", weakest, "h", 0, i)) for i in range(30)]
        assert [grader.grade(r, grand.fields, SPEC).correct for r in replies] == counted


def test_a_sim_code_run_keeps_the_specs_own_tests_field(tmp_path, shared_data):
    # The run's world read a spec's tests under "test" whatever the spec named them, and wrote an empty "test"
    # into every child of a spec whose tests are in "tests" (`sim serve` gave the world the spec's names)
    rows = [json.loads(line) for line in (shared_data / "humaneval" / "items.jsonl").read_text().splitlines()[:16]]
    run_dir = _code_run(tmp_path, [json.dumps({**{k: v for k, v in r.items() if k != "test"}, "tests": r["test"]})
                                   + "\n" for r in rows], "tests_field = \"tests\"\n", "invalid_base=0.5,tests_agree=0")
    children = [json.loads(line)["fields"] for line in (run_dir / "sim_world_state.jsonl").read_text().splitlines()]
    assert children and all("test" not in c and "tests" in c for c in children)
    # an invalid one's checks went into its own tests field, where its grader looks (set aside before the judge)
    db = sqlite3.connect(run_dir / "store.db")
    flags = [json.loads(f) for (f,) in db.execute("select flags_json from candidate")]
    db.close()
    assert any("fails_own_check" in f for f in flags)


def test_an_invalid_child_of_the_version_before_is_unwrapped_too():
    # a resumed run's world holds invalid children the version before wrote, whose checks rebound `check`
    original = "def check(candidate):\n    assert candidate(1) == 2\n"
    old = (f"{original.rstrip()}\n\n\n_sim_original_check = check\n\n\ndef check(candidate):\n"
           "    _sim_original_check(candidate)\n    assert candidate.__name__ == 'not_' + candidate.__name__\n")
    assert texts.unwrapped_tests(old) == original
    assert texts.unwrapped_tests(texts.invalid_code_test(old)) == original
    assert texts.unwrapped_tests(original) == original
