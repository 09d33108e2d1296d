"""Multiple choice on real MMLU-Pro items: letter extraction, reference, chance level."""

from __future__ import annotations

import json
from itertools import islice

import pytest

from benchfill.errors import DataError
from benchfill.evaluators import get_evaluator
from benchfill.evaluators.multiple_choice import extract_choice

MC = get_evaluator("multiple_choice")


@pytest.fixture(scope="module")
def mmlu_items(shared_data):
    with open(shared_data / "mmlu-pro" / "items.jsonl") as fh:
        return [json.loads(line) for line in islice(fh, 300)]


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("Let's think step by step. ... The answer is (C).", "C"),
        ("the answer is J", "J"),
        ("The answer is: **(B)**", "B"),
        ("Reasoning...\nAnswer: D", "D"),
        ("Answer: (h)", "H"),
        ("Thinking\n\nE", "E"),
        ("(A) looks plausible but the answer is (F)", "F"),
        ("The answer is (A). Wait, that misreads the units: the answer is (C).", "C"),  # the last one stands
        (r"so \boxed{G}", "G"),
        ("**Answer**: B", "B"),
        (r"\boxed{\text{B}}", "B"),
        ("The correct answer is option B.", "B"),
        ("The answer is $(C)$", "C"),
        # a reasoning model's drafts are not its answer; thinking that never closes gives none
        ("<think>So the answer is (A)? No.</think>\n**Final Answer**\n\\boxed{B}", "B"),
        ("<think>... so the answer is (B)? Let me check option C too. For C,", None),
        ("Answer: Option B", "B"),
        ("Answer: $C$", "C"),
        # only where MMLU-Pro's own forms read nothing: a variable is no option, an explicit answer wins
        ("…the answer is $F = 20$ N, which is option (B).", None),
        ("We need to decide whether the answer is option B or option D.\n\nAnswer: D", "D"),
        ("Answer choice A can be ruled out since the rate is negative.", None),
        ("The answer $C$ seems tempting but it is not.", None),
        ("I am not sure.", None),
        ("The answer is a prime number, 7.", None),
        ("", None),
    ],
)
def test_extract_choice(response, letter):
    assert extract_choice(response) == letter


def test_letter_beyond_the_options_is_not_a_choice():
    assert extract_choice("The answer is (E)", n_options=4) is None


def test_reference_letters_grade_correct_others_wrong(mmlu_items):
    assert len(mmlu_items) == 300
    for item in mmlu_items:
        ref = item["answer"]
        n = len(item["options"])
        assert MC.grade(f"Step by step... The answer is ({ref}).", item).correct
        wrong = "ABCDEFGHIJ"[(item["answer_index"] + 1) % n]
        grade = MC.grade(f"The answer is ({wrong})", item)
        assert not grade.correct and grade.extracted == wrong
        assert MC.chance(item) == pytest.approx(1 / n)


def test_mmlu_pro_has_ten_options_mostly(mmlu_items):
    # the guessing floor comes from each item's own option count, not a constant
    chances = {round(MC.chance(item), 4) for item in mmlu_items}
    assert 0.1 in chances and len(chances) > 1


def test_answer_index_reference_and_bad_reference():
    item = {"id": "x", "options": ["a", "b", "c"], "answer": 2}
    assert MC.grade("Answer: C", item).correct
    assert not MC.grade("Answer: B", item).correct
    with pytest.raises(DataError, match=r"item 'x'.*'answer'.*not one of the 3 options"):
        MC.grade("Answer: C", {"id": "x", "options": ["a", "b", "c"], "answer": "D"})
    with pytest.raises(DataError, match=r"item 'y'.*'options'"):
        MC.grade("Answer: C", {"id": "y", "options": "abc", "answer": "A"})
