"""Code grading, HumanEval style: run the candidate against the item's tests in the sandbox.

The program is the item's prompt (imports, helpers, the signature), then the
candidate, then the item's tests, then ``check(<entry point>)``. A candidate is
read from what follows a reasoning model's last ``</think>``: the last fenced
```python (or ~~~) block that defines the entry point (a full function that
redefines the prompt's stub; a later block of example usage, tests or output
is not the answer), else the last fenced block, or, with no fence, the raw
completion of the prompt (how base models and ``canonical_solution`` read),
from its first top-level ``def``/``import``/``class`` where prose leads it in.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

from benchfill.evaluators import register
from benchfill.evaluators.base import Evaluator, Grade, field_name, item_field
from benchfill.evaluators.sandbox import isolation, run_programs
from benchfill.replies import final_parts, reasoning_closes

MAX_CODE_CHARS = 100_000

_FENCE = re.compile(r"(```|~~~)[ \t]*(?:(?:python3?|py)(?:[ \t][^\n]*)?)?\n(.*?)\1", re.DOTALL | re.IGNORECASE)
_TOP_LEVEL = re.compile(r"^(?:def |async def |class |import |from \S+ import |@)", re.MULTILINE)


def extract_code(response: str, entry_point: str | None = None) -> str:
    """The code a response offers: the last fenced block that defines ``entry_point`` (else the last
    fenced block), else the response from its first top-level statement, else the whole response."""
    response = _answer_part(response)
    blocks = _fenced_blocks(response) or [textwrap.dedent(m.group(2)) for m in _FENCE.finditer(response)]
    if blocks:
        if entry_point:
            defining = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
            for k in range(len(blocks) - 1, -1, -1):
                if defining.search(blocks[k]):
                    # the imports and helpers a reply sets out in blocks of their own before it
                    lead = [b for b in blocks[:k] if _definitions_only(b)]
                    return "\n\n".join([*lead, blocks[k]])
        return blocks[-1]
    start = _TOP_LEVEL.search(response)
    if start is not None and start.start() > 0 and not _parses(response) and _prose(response[:start.start()]):
        return response[start.start():]  # "Here is the function:\n\ndef add(...)": the prose is not code
    return response


def _answer_part(response: str) -> str:
    """What follows the reply's reasoning: after its last ``</think>``, as ever, where anything fenced
    follows it. Code may hold the tag itself (a function that splits a reasoning model's reply), which leaves
    no fenced block after the last one: the reply is then read from an earlier tag (or whole, where it does not
    open its reasoning), where every later tag lies inside its fenced blocks. A tag outside them ended the
    reasoning, so a sketch before it is never graded."""
    parts = final_parts(response)
    if _fenced_blocks(parts[0]) or _FENCE.search(parts[0]):
        return parts[0]
    for said in parts[1:]:
        spans = [(a, b) for _, a, b in _fences(said)]
        tags = reasoning_closes(said)
        if spans and tags and all(any(a <= m.start() < b for a, b in spans) for m in tags):
            return said
    return parts[0]


def _prose(lead: str) -> bool:
    """Whether ``lead`` reads as prose, not code: it does not parse as Python once dedented (a raw
    completion's body does, and a helper after it must not take its place; "Plan:\n- a\n  - b" does not)."""
    return bool(lead.strip()) and not _parses(textwrap.dedent(lead))


_FENCE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n]*)$")
_PYTHON_INFO = re.compile(r"(?:python3?|py)?(?:[ \t].*)?", re.IGNORECASE)


def _fenced_blocks(text: str) -> list[str]:
    """The Python (or untagged) fenced blocks of ``text``, fences on lines of their own; a block in
    another language (bash, output tagged ``text``) is passed over."""
    # (an empty block is one line break, as its lines joined had made it; a fence in a list item is indented)
    return [textwrap.dedent(text[a:b] or "\n") for info, a, b in _fences(text) if _PYTHON_INFO.fullmatch(info)]


def _fences(text: str) -> list[tuple[str, int, int]]:
    """Each fenced block of ``text`` (any language, fences on lines of their own): its info string, and where its
    body starts and ends (character offsets)."""
    found: list[tuple[str, int, int]] = []
    fence, info, start, at = None, "", 0, 0
    for line in text.split("\n"):
        m = _FENCE_LINE.match(line)
        if fence is None:
            if m:
                fence, info, start = m.group(1), m.group(2).strip(), at + len(line) + 1
        elif m and m.group(1).startswith(fence) and not m.group(2).strip():
            found.append((info, start, at))
            fence = None
        at += len(line) + 1
    return found


def _definitions_only(code: str) -> bool:
    """Whether ``code`` parses and only imports, defines or assigns (no example calls, no prints)."""
    tree = _tree(code)
    kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
    return tree is not None and bool(tree.body) and all(isinstance(node, kinds) for node in tree.body)


def _parses(code: str) -> bool:
    return _tree(code) is not None


def _tree(code: str) -> ast.Module | None:
    """``code`` parsed (never run), or None where it is not Python."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


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
            entry = item.get(field_name(spec, "entry_point_field", "entry_point"))
            code = extract_code(response or "", str(entry) if entry else None)
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
