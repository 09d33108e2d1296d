"""What every grader shares: the ``Grade`` record, the ``Evaluator`` base and field look-up.

A benchmark spec names its fields (``text_field``, ``answer_field``, ...). Graders read
them with ``field_name(spec, "answer_field", default)`` so that a pydantic
``BenchmarkSpec``, any plain object, or ``None`` (per-evaluator defaults) all work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchfill.errors import DataError


@dataclass(frozen=True)
class Grade:
    """The verdict on one response: ``extracted`` is the answer the grader read, if any."""

    correct: bool
    extracted: str | None
    reason: str


def field_name(spec: Any, attr: str, default: str) -> str:
    value = getattr(spec, attr, None) if spec is not None else None
    return value or default


def item_field(item: dict, name: str, attr: str) -> Any:
    """The item's value for a spec field; a missing field is the user's data error."""
    if name not in item:
        item_id = item.get("id", "?")
        raise DataError(f"item {item_id!r}: missing field {name!r} (spec {attr})")
    return item[name]


class Evaluator:
    """Base grader. Subclasses set ``name`` and implement ``grade``.

    ``grade_many`` grades several responses to one item; ``grade_pairs`` grades
    (response, item) pairs across items. Both default to a loop; graders with a
    per-call start-up cost (the code sandbox) override them to batch.
    """

    # The spec fields (attribute, default name) it reads from every item beyond the answer: a run checks
    # them on loading, not when the first probe's answer comes back to be graded.
    item_fields: tuple[tuple[str, str], ...] = ()

    name: str = ""
    # Grading takes long enough (a sandbox launch per batch) to run in worker processes, off the
    # event loop of a run (benchfill.grading); such a grader must pickle.
    offload: bool = False
    # For graders that run programs: whether they may run them unconfined where no sandbox works
    # (None: as the user's BENCHFILL_ALLOW_UNCONFINED=1 says). Set per run by evaluator_for_run.
    allow_unconfined: bool | None = None

    def isolation(self) -> str | None:
        """How programs this grader runs are confined ("bubblewrap", "unconfined"); None: it runs none."""
        return None

    def grade(self, response: str, item: dict[str, Any], spec: Any = None) -> Grade:
        raise NotImplementedError

    def grade_many(self, responses: list[str], item: dict, spec: Any = None) -> list[Grade]:
        return self.grade_pairs([(r, item) for r in responses], spec)

    def grade_pairs(self, pairs: list[tuple[str, dict]], spec: Any = None) -> list[Grade]:
        return [self.grade(response, item, spec) for response, item in pairs]

    def reference_fault(self, item: dict, spec: Any = None) -> str | None:
        """Why the item's own reference answer fails this grader (a code item's solution its own tests
        reject), or None: where it passes, or where the grader has no such check. A new item that fails is
        invalid whatever a judge says, and no rollout need be spent on it."""
        return None

    def chance(self, item: dict, spec: Any = None) -> float:
        """Probability of a correct answer by guessing (the IRT guessing floor)."""
        return 0.0

    def __repr__(self) -> str:
        return f"<evaluator {self.name!r}>"
