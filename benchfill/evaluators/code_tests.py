"""Code grading, HumanEval style: run the candidate against the item's tests in the sandbox.

The program is the item's prompt (imports, helpers, the signature), then the
candidate, then the item's tests, then ``check(<entry point>)``. A candidate is
read from the last fenced ```python block of the response (a full function
that redefines the prompt's stub), or, with no fence, taken as the raw
completion of the prompt (how base models and ``canonical_solution`` read).
"""

from __future__ import annotations

import re
from typing import Any

from benchfill.evaluators import register
from benchfill.evaluators.base import Evaluator, Grade, field_name, item_field
from benchfill.evaluators.sandbox import isolation, run_programs

MAX_CODE_CHARS = 100_000

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(response: str) -> str:
    """The code a response offers: the last fenced block, else the whole response."""
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


def build_program(code: str, item: dict, spec: Any = None) -> str:
    prompt = str(item_field(item, field_name(spec, "text_field", "prompt"), "text_field"))
    tests = str(item_field(item, field_name(spec, "tests_field", "test"), "tests_field"))
    entry_point = str(
        item_field(item, field_name(spec, "entry_point_field", "entry_point"), "entry_point_field")
    )
    defines_entry = re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE)
    # A full function goes after the whole prompt (whose helpers it may call); a body continues it.
    joiner = "\n\n" if defines_entry else ""
    return f"{prompt}{joiner}{code}\n\n{tests}\n\ncheck({entry_point})\n"


@register("code")
class CodeTests(Evaluator):
    """Passes when the item's tests run without error in the sandbox.

    Without a working bubblewrap it refuses (``sandbox.Unconfined``, one line saying why) unless
    ``allow_unconfined`` is true (a run sets it through ``evaluators.evaluator_for_run``) or, left at
    None, the user set ``BENCHFILL_ALLOW_UNCONFINED=1``.
    """

    item_fields = (("tests_field", "test"), ("entry_point_field", "entry_point"))

    offload = True

    def __init__(self, timeout: float = 10.0, cpu_seconds: int = 10, allow_unconfined: bool | None = None):
        self.timeout = timeout
        self.cpu_seconds = cpu_seconds
        self.allow_unconfined = allow_unconfined

    def isolation(self) -> str:
        return isolation()

    def grade(self, response: str, item: dict, spec: Any = None) -> Grade:
        return self.grade_pairs([(response, item)], spec)[0]

    def reference_fault(self, item: dict, spec: Any = None) -> str | None:
        """The reference solution, as it ships (raw: not read out of prose as a model's reply is), run
        against the item's own tests. ``Unconfined`` where this grader may not run it."""
        answer = str(item_field(item, field_name(spec, "answer_field", "canonical_solution"), "answer_field"))
        (outcome,) = run_programs([build_program(answer, item, spec)], timeout=self.timeout,
                                  cpu_seconds=self.cpu_seconds, allow_unconfined=self.allow_unconfined)
        if outcome.passed:
            return None
        said = " ".join(f"{outcome.status}: {outcome.detail}".split())[:200]
        return f"its reference solution fails its own tests ({said})"

    def grade_pairs(self, pairs: list[tuple[str, dict]], spec: Any = None) -> list[Grade]:
        grades: list[Grade | None] = []
        programs, slots = [], []
        for response, item in pairs:
            code = extract_code(response or "")
            if not code.strip():
                grades.append(Grade(False, None, "no code found"))
            elif len(code) > MAX_CODE_CHARS:
                grades.append(Grade(False, None, f"code longer than {MAX_CODE_CHARS} characters"))
            else:
                slots.append((len(grades), code))
                programs.append(build_program(code, item, spec))
                grades.append(None)
        outcomes = run_programs(programs, timeout=self.timeout, cpu_seconds=self.cpu_seconds,
                                allow_unconfined=self.allow_unconfined)
        for (index, code), outcome in zip(slots, outcomes, strict=True):
            reason = "tests passed" if outcome.passed else f"{outcome.status}: {outcome.detail}"
            grades[index] = Grade(outcome.passed, code, reason)
        return grades
