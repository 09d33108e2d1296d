"""Multiple-choice grading: read the chosen option letter, compare with the reference.

Letters run A to J (MMLU-Pro has up to ten options). The reference may be a letter
(``"C"``) or an index into the options (``answer_index``-style integers).
Chance level is one over the number of options.
"""

from __future__ import annotations

import re
import string
from typing import Any

from benchfill.errors import DataError
from benchfill.evaluators import register
from benchfill.evaluators.base import Evaluator, Grade, field_name, item_field
from benchfill.replies import final_part

LETTERS = string.ascii_uppercase[:10]

# Most explicit forms first; within each, the last occurrence wins (a model may
# restate the options before concluding). A lowercase letter counts only inside
# parentheses, so "the answer is a prime" is not read as option A.
_LETTER = r"[\s*\[]*(?:\(([A-Ja-j])\)|([A-J])\b)"
_PATTERNS = [
    re.compile(r"(?i:answer\s+is)\s*:?" + _LETTER),
    re.compile(r"\\boxed\{\s*(?:\\text(?:bf)?\{\s*)?(?:\(([A-J])\)|([A-J]))\s*\}"),
    re.compile(r"(?i:answer)\**\s*:" + _LETTER),
    re.compile(r"(?:^|\n)\s*(?:\(([A-J])\)|([A-J]))[.):]?\s*$"),  # a lone letter on the last line
    # Only where none of MMLU-Pro's own forms reads a letter (so never over what they read): "the correct answer
    # is option B", "Answer: Option C", "the answer is $(C)$", "Answer: $C$". ("the answer is $F = 20$ N" is a
    # variable, not option F.)
    re.compile(r"(?i:answer)(?:\s+is\s*:?|\**\s*:)[\s*]*(?:(?i:option|choice)\s+\(?([A-J])\)?|\$\s*\(?([A-J])\)?\s*\$)"),
]


def extract_choice(response: str, n_options: int = 10) -> str | None:
    """The option letter a response commits to, or ``None``."""
    valid = LETTERS[:n_options]
    text = final_part(response).strip()  # a reasoning model's drafts ("so (B)? Let me check C") are not its answer
    if not text:
        return None
    for pattern in _PATTERNS:
        found = [(m.group(1) or m.group(2)).upper() for m in pattern.finditer(text)]
        found = [letter for letter in found if letter in valid]
        if found:
            return found[-1]
    return None


def _reference_letter(item: dict, answer_name: str, n_options: int, labels: list | None = None) -> str:
    value = item_field(item, answer_name, "answer_field")
    item_id = item.get("id", "?")
    named = [str(x).strip() for x in labels or ()]
    if not isinstance(value, bool) and str(value).strip() in named:
        # the Hugging Face layout's key names a label ("3" of "1".."4", ARC): the option in that place
        value = LETTERS[named.index(str(value).strip())]
    if isinstance(value, bool):
        raise DataError(f"item {item_id!r}: field {answer_name!r} must be an option letter or index")
    if isinstance(value, int):
        letter = LETTERS[value] if 0 <= value < len(LETTERS) else ""
    else:
        letter = str(value).strip().strip("()").upper()
    if len(letter) != 1 or letter not in LETTERS[:n_options]:
        raise DataError(
            f"item {item_id!r}: field {answer_name!r} = {value!r} is not one of the {n_options} options"
        )
    return letter


@register("multiple_choice")
class MultipleChoice(Evaluator):
    """Grades ``The answer is (X)`` / ``Answer: X`` / a lone letter against the reference letter."""

    item_fields = (("options_field", "options"),)

    def _options(self, item: dict, spec: Any) -> list:
        from benchfill.data import options_of  # (here: the sandbox imports this package without numpy)

        name = field_name(spec, "options_field", "options")
        options = options_of(item_field(item, name, "options_field"))  # a list, or {"text": [...], "label": [...]}
        if not isinstance(options, list) or not 2 <= len(options) <= len(LETTERS):
            raise DataError(
                f"item {item.get('id', '?')!r}: field {name!r} must be a list of 2 to {len(LETTERS)} options "
                '(or {"text": [...], "label": [...]})'
            )
        return options

    def _labels(self, item: dict, spec: Any) -> list | None:
        value = item.get(field_name(spec, "options_field", "options"))
        return value.get("label") if isinstance(value, dict) and isinstance(value.get("label"), list) else None

    def grade(self, response: str, item: dict, spec: Any = None) -> Grade:
        n = len(self._options(item, spec))
        reference = _reference_letter(item, field_name(spec, "answer_field", "answer"), n, self._labels(item, spec))
        letter = extract_choice(response or "", n)
        if letter is None:
            return Grade(False, None, "no option letter found")
        if letter == reference:
            return Grade(True, letter, "matches reference")
        return Grade(False, letter, f"chose {letter}, reference {reference}")

    def reference_fault(self, item: dict, spec: Any = None) -> str | None:
        """Options this grader cannot read (not a list of 2 to 10), or a key that names none of them: each
        would stop the grading of every probe's answer (a rewriter's eleventh option, a key "E" of four)."""
        try:
            _reference_letter(item, field_name(spec, "answer_field", "answer"), len(self._options(item, spec)),
                              self._labels(item, spec))
        except DataError as exc:
            return str(exc).split(": ", 1)[-1]  # said of the item already: the item's id is the caller's
        return None

    def chance(self, item: dict, spec: Any = None) -> float:
        return 1.0 / len(self._options(item, spec))
