"""Math grading on real AIME 2024/2025 and AMC 2023 items, plus hand-worked extraction cases."""

from __future__ import annotations

import json
import os
import signal

import pytest

from benchfill.evaluators import get_evaluator
from benchfill.evaluators.math_answers import as_number, extract_answer, last_boxed
from benchfill.evaluators.math_worker import MathVerifier

MATH = get_evaluator("math")


def _items(shared_data, name):
    with open(shared_data / name / "items.jsonl") as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.parametrize(("bench", "count"), [("aime24", 30), ("aime25", 30), ("amc23", 40)])
def test_reference_answers_correct_perturbed_wrong(shared_data, bench, count):
    items = _items(shared_data, bench)
    assert len(items) == count
    for item in items:
        ref = item["answer"]
        value = int(ref)
        for response in (
            f"Thus the total is \\boxed{{{ref}}}.",
            f"... so the answer is ${ref}$.",
            f"\\boxed{{{value + 1}}} was a slip; the final answer is \\boxed{{ {ref} }}",
        ):
            grade = MATH.grade(response, item)
            assert grade.correct, (item["id"], response, grade)
        for wrong in (value + 1, value - 1, value * 10):
            grade = MATH.grade(f"\\boxed{{{wrong}}}", item)
            assert not grade.correct and grade.extracted == str(wrong), (item["id"], grade)


def test_aime_leading_zeros_and_integer_forms(shared_data):
    item = next(i for i in _items(shared_data, "aime25") if i["answer"] == "70")
    for answer in ("070", "70", "+70", "70.0", "\\text{70}", "70^\\circ"):
        assert MATH.grade(f"\\boxed{{{answer}}}", item).correct, answer
    for answer in ("7", "700", "0.70", "71"):
        assert not MATH.grade(f"\\boxed{{{answer}}}", item).correct, answer
    assert MATH.grade("\\boxed{033}", {"answer": "33"}).reason == "equal numbers"


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        (r"so \boxed{\frac{1}{2}} done", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{ {2}+\sqrt{3} }", r"{2}+\sqrt{3}"),
        (r"\fbox{5}", "5"),
        (r"\boxed{unclosed", None),
        ("no box here", None),
    ],
)
def test_last_boxed_balances_braces(text, boxed):
    assert last_boxed(text) == boxed


def test_extract_answer_forms():
    assert extract_answer("We get 3. Therefore, the answer is 1.5.") == "1.5"
    assert extract_answer("The answer is: $\\frac{3}{4}$.\nExtra.") == "\\frac{3}{4}"
    assert extract_answer("The answer is 2. Wait, the answer is \\boxed{4}") == "4"
    assert extract_answer("I could not solve it.") is None
    assert MATH.grade("I could not solve it.", {"answer": "4"}) == (MATH.grade("", {"answer": "4"}))


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        # the last anchor is the committed answer: an earlier "answer is" may be a guess it rejected
        ("Let us check whether the answer is 204 minutes ... that gives 240.\n\n**Final Answer:** 240", "240"),
        ("A quick guess says the answer is 204, but computing carefully: ... **Answer: 240**", "240"),
        ("**Final Answer:** 204", "204"),
        ("Final answer: 204", "204"),
        ("**Final Answer**\n\n204", "204"),
        ("so the answer is **204** minutes.", "204"),
        ("The answer is 7. I am confident in this final answer.", "7"),
        # a reasoning model: only what follows its thinking; thinking that never closes gives no answer
        ("<think>the answer is 5? no</think>\nTherefore \\boxed{6}", "6"),
        ("Okay, so the answer is 5.</think>\n\nThe answer is 6.", "6"),
        ("<think>so the answer is 204? Wait, let me re-check", None),
        ("The answer to this depends on x.", None),
        # a bare "answer:" in passing is no label; after a conclusion, in a numbered list or as "final answer:", it is
        ("So the answer is 35.\n\n(A common wrong answer: 33.)", "35"),
        ("Final Answer: 35\n\nNote: an earlier draft had answer: 33", "35"),
        ("Thus the answer is 204.\n\nLet me double-check the answer: t = 24, so 180 + 24 = 204.", "204"),
        ("I think the answer is 204. This is my final answer, and I'm confident.", "204"),
        ("Thus, the final answer: 35", "35"),
        ("The answer is 33. Thus the tempting answer: 35.", "33"),
        ("The answer is 10.\n\nWhat if I reconsidered my final answer: 12? No, 10 stands.", "10"),
        ("Therefore the answer: 35", "35"),
        ("1. Answer: 12\n2. Answer: 35", "35"),
        # a sentence ends at a full stop, but not at one inside braces (it had read "\text{St")
        ("Therefore, the answer is \\text{St. Louis}.", "\\text{St. Louis}"),
        ("The answer is $\\frac{1}{2}$. Done.", "\\frac{1}{2}"),
    ],
)
def test_extract_answer_reads_how_models_commit(reply, answer):
    assert extract_answer(reply) == answer


def test_as_number_is_exact():
    assert as_number("0.5") == as_number(".50")
    assert as_number("1,625") == 1625
    assert as_number(r"\frac12") is None
    assert as_number("1e5") is None  # not a plain decimal: left to math-verify


@pytest.mark.parametrize(
    ("reference", "answer", "equal"),
    [
        (r"\frac{1}{2}", "0.5", True),
        (r"\frac{1}{2}", r"\dfrac{1}{2}", True),
        (r"3\sqrt{2}", r"\sqrt{18}", True),
        ("x^2+2x+1", "(x+1)^2", True),
        (r"\frac{\pi}{4}", r"\frac{\pi}{3}", False),
        (r"2\sqrt{3}", r"\sqrt{13}", False),
    ],
)
def test_symbolic_equivalence_through_math_verify(reference, answer, equal):
    grade = MATH.grade(f"\\boxed{{{answer}}}", {"answer": reference})
    assert grade.correct is equal
    assert "math-verify" in grade.reason


def test_size_cap_grades_huge_answers_wrong_unparsed():
    huge = "9" * 5000
    grade = MATH.grade(f"\\boxed{{{huge}}}", {"answer": huge})
    assert not grade.correct and "longer than" in grade.reason


def test_worker_timeout_grades_wrong_and_worker_recovers():
    verifier = MathVerifier(timeout=10.0)
    ev = get_evaluator("math", verifier=verifier)
    try:
        assert ev.grade(r"\boxed{\sqrt{4}}", {"answer": "2"}).correct  # warms the worker
        stalled = verifier._proc
        os.kill(stalled.pid, signal.SIGSTOP)  # a worker stuck in sympy, deterministically
        verifier.timeout = 0.5
        grade = ev.grade(r"\boxed{\sqrt{9}}", {"answer": "3"})
        assert not grade.correct and "took over" in grade.reason
        assert verifier._proc is None and stalled.poll() is not None  # killed, not left behind
        assert stalled.stdin.closed and stalled.stdout.closed  # its pipes closed, not left to the collector
        assert ev.grade(r"\boxed{\sqrt{16}}", {"answer": "4"}).correct  # a fresh worker
        fresh = verifier._proc
    finally:
        verifier.close()
    assert fresh.stdin.closed and fresh.stdout.closed


def test_a_hundred_symbolic_checks_in_the_shared_worker():
    # Its speed is bench/bench_evaluators.py's to measure, not a timed test's.
    MATH.grade(r"\boxed{\frac{2}{4}}", {"answer": "0.5"})  # warm the shared worker
    for k in range(1, 51):
        assert MATH.grade(rf"\boxed{{\frac{{{k}}}{{{2 * k}}}}}", {"answer": r"\frac{1}{2}"}).correct
        assert not MATH.grade(
            rf"\boxed{{\frac{{{k + 1}}}{{{2 * k + 1}}}}}", {"answer": r"\frac{1}{2}"}
        ).correct


def test_an_answer_of_exactly_the_limit_is_graded_and_one_character_more_is_not():
    from benchfill.evaluators.math_answers import MAX_ANSWER_CHARS

    at = "1" * MAX_ANSWER_CHARS
    assert MATH.grade(f"\\boxed{{{at}}}", {"answer": at}).correct
    over = at + "1"
    g = MATH.grade(f"\\boxed{{{over}}}", {"answer": over})
    assert not g.correct and f"longer than {MAX_ANSWER_CHARS}" in g.reason
