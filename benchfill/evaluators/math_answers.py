"""Math grading: pull the final answer out of a response and compare it with the reference.

Extraction reads what follows a reasoning model's last ``</think>`` (``benchfill.replies``), and takes the
last ``\\boxed{...}`` (or ``\\fbox{...}``, braces balanced), else what follows the last "final answer",
"answer is" or "Answer:" (markdown bold set aside). Comparison, cheapest first:

1. plain numbers on both sides (AIME/AMC style: ``"033"``, ``"33"``, ``"-1"``,
   ``"0.5"``) compare exactly as rationals, in this process;
2. anything else goes to math-verify (symbolic and numeric equivalence) in a
   persistent worker process with its own timeout and a memory cap
   (``benchfill.evaluators.math_worker``). Nothing is ever passed to ``eval``.

Answers longer than ``MAX_ANSWER_CHARS`` are graded wrong unparsed: a size cap keeps
a pathological response from reaching the parser.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from benchfill.evaluators import register
from benchfill.evaluators.base import Evaluator, Grade, field_name, item_field
from benchfill.evaluators.math_worker import MathVerifier, VerifierFailed, shared_verifier
from benchfill.replies import final_part

MAX_ANSWER_CHARS = 300
MAX_REFERENCE_CHARS = 1000

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Where a reply commits to its answer: "the answer is 204" or "the final answer is 204" anywhere (the old
# reading); a label at the start of a line ("Final Answer: 240", "2. Answer: 35", "### Answer") or in bold
# ("**Answer**: 240"); and "answer:" right after a conclusion ("Therefore the answer: 35", "Thus, the final
# answer: 35"). The last of them counts (an earlier "answer is 204" may be a guess the reply then rejected).
# An "answer:" in passing is no label ("Let me check the answer: t = 24", "Thus the tempting answer: 35",
# "my final answer: 12? No, 10 stands"), nor is "my final answer, and ...".
_ANCHOR = re.compile(
    r"\b(?:final\s+)?answer\s+is\b\s*:?"
    r"|^[ \t>#*_-]*(?:\d+[.)][ \t]*)?(?:final\s+)?answer\b[ \t*_]*(?:[:\uff1a]|$)"
    r"|\*\*[ \t]*(?:final\s+)?answer[ \t]*(?:\*\*[ \t]*)?[:\uff1a]"
    r"|\b(?:therefore|thus|hence|so),?[ \t]+(?:the[ \t]+)?(?:final[ \t]+)?answer[ \t]*(?:\*\*[ \t]*)?[:\uff1a]",
    re.IGNORECASE | re.MULTILINE,
)
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces, or ``None``."""
    starts = [m.end() for m in _BOX.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
    return None  # only unbalanced boxes


def _after_anchor(rest: str) -> str:
    rest = rest.lstrip(" \t\n:")
    bold = _BOLD.match(rest)
    if bold:  # "the answer is **204** minutes" -> "204"
        rest = bold.group(1)
    rest = rest.lstrip(" \t\n*:")
    # "the answer is $42$." -> "42"; stop at the end of the sentence, not at a decimal point, nor inside
    # braces ("the answer is \text{St. Louis}." had read "\text{St")
    depth, end = 0, len(rest)
    for k, c in enumerate(rest):
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
        elif c == "\n" or (c == "." and depth == 0 and not rest[k + 1 : k + 2].isdigit()):
            end = k
            break
    return rest[:end].replace("**", "").strip().strip("$").strip()


def extract_answer(response: str) -> str | None:
    """The final answer a response commits to, or ``None``."""
    response = final_part(response)
    boxed = last_boxed(response)
    if boxed is not None:
        return boxed
    for anchor in reversed(list(_ANCHOR.finditer(response))):
        answer = _after_anchor(response[anchor.end():])
        if answer:  # "... I am sure of this final answer." names none: the one before it counts
            return answer
    return None


def _clean(answer: str) -> str:
    text = answer.strip().strip("$").strip()
    text = re.sub(r"\\(?:text|mathrm|textbf)\{([^{}]*)\}", r"\1", text)
    text = text.replace("\\!", "").replace("\\,", "").replace("{,}", "")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # thousands separators
    text = re.sub(r"\^\{?\\circ\}?|°", "", text)  # degrees
    return text.strip()


def as_number(answer: str) -> Fraction | None:
    """``answer`` as an exact rational if it is a plain decimal number, else ``None``."""
    text = _clean(answer)
    if not _NUMBER.fullmatch(text):
        return None
    return Fraction(text)


@register("math")
class MathAnswer(Evaluator):
    """Final-answer math grading (``\\boxed{}``, else "final answer", "answer is" or "Answer:")."""

    def __init__(self, verifier: MathVerifier | None = None):
        self._verifier = verifier

    @property
    def verifier(self) -> MathVerifier:
        if self._verifier is None:
            self._verifier = shared_verifier()
        return self._verifier

    def grade(self, response: str, item: dict, spec: Any = None) -> Grade:
        name = field_name(spec, "answer_field", "answer")
        reference = str(item_field(item, name, "answer_field")).strip()
        answer = extract_answer(response or "")
        if answer is None:
            return Grade(False, None, "no final answer found")
        if len(answer) > MAX_ANSWER_CHARS:
            return Grade(False, answer[:40] + "...", f"answer longer than {MAX_ANSWER_CHARS} characters")
        ref_number, ans_number = as_number(reference), as_number(answer)
        if ref_number is not None and ans_number is not None:
            if ref_number == ans_number:
                return Grade(True, answer, "equal numbers")
            return Grade(False, answer, f"number differs from reference {reference}")
        if len(reference) > MAX_REFERENCE_CHARS:
            return Grade(False, answer, f"reference longer than {MAX_REFERENCE_CHARS} characters")
        try:
            equal = self.verifier.equal(_clean(reference), _clean(answer))
        except VerifierFailed as exc:
            return Grade(False, answer, str(exc))
        return Grade(equal, answer, "equivalent (math-verify)" if equal else "not equivalent (math-verify)")
