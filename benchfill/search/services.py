"""What the search needs from the outside world, as one small async protocol.

The search never knows whether it talks to real endpoints or to the simulated
world: ``run.py`` binds these calls to ``benchfill.llm`` (rewriter, judge) and
``benchfill.probes`` (rollouts), whose store-backed caches make a rerun repeat
no completed call. Every call carries a ``key`` built from (seed, gap, round,
parent, child, ...) so that its sampling seed, and so its cached result, never
depends on the order in which concurrent work finished.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Protocol

# ``Verdict.model`` of a child its own grader refused before any judge was asked (a code item whose
# reference solution fails its own tests): no model call was made.
SELF_CHECK = "self-check"


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str = ""
    model: str = ""


@dataclass(frozen=True)
class Probe:
    name: str
    ability: float  # theta_j on the benchmark's IRT scale
    trials: int  # K_j of the fixed protocol
    # The fit's standard error of theta_j. An item placed through this probe inherits the error in
    # full (b-hat moves one for one with theta_j): no number of rollouts on the item removes it, only
    # spreading the rollouts over several probes averages it down (Annotator._variance).
    ability_se: float = 0.0


@dataclass
class Spend:
    """Work spent by one search, counted as it happens (cache hits count too: they were paid once)."""

    rollouts: int = 0
    screen_rollouts: int = 0  # the order screen's spot checks (benchfill/search/screen.py), not in ``rollouts``
    rewriter_calls: int = 0
    judge_calls: int = 0
    repair_calls: int = 0  # the rewriter's and judge's repair turns after a malformed reply: calls made too
    failures: int = 0
    prescreened: int = 0  # judged-valid children the text pre-screen kept from annotation

    @property
    def model_calls(self) -> int:
        return self.rewriter_calls + self.judge_calls + self.repair_calls

    def to_dict(self) -> dict[str, int]:
        return {
            "rollouts": self.rollouts,
            "screen_rollouts": self.screen_rollouts,
            "rewriter_calls": self.rewriter_calls,
            "judge_calls": self.judge_calls,
            "repair_calls": self.repair_calls,
            "model_calls": self.model_calls,
            "failures": self.failures,
            "prescreened": self.prescreened,
        }


@dataclass
class Reference:
    """An item shown to the rewriter with its difficulty on the normalized scale."""

    item: dict[str, Any]
    z: float
    item_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class SearchServices(Protocol):
    async def rewrite(
        self, parent: dict[str, Any], target_z: float, references: list[Reference], key: str
    ) -> dict[str, Any] | None:
        """One child item (same fields as the parent), or None when the call failed for good."""

    async def judge(self, child: dict[str, Any], key: str) -> Verdict:
        """Is the child's reference answer correct? (``Verdict.model`` is ``SELF_CHECK`` where the child's own
        grader refused it and no judge was asked: not a model call.)"""

    async def rollouts(self, item_id: str, item: dict[str, Any], probe: str, n: int, key: str) -> int:
        """Grade ``n`` fresh samples of ``probe`` on the item; the number correct."""

    # Optional: ``repair_calls(key) -> int``, the repair turns the rewrite and judge of ``key`` took (each one
    # a call to the model beyond the first), taken once. Services that never repair leave it out.


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed from the run seed and a path of names (gap, round, parent, child, ...)."""
    text = ":".join([str(seed), *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF
