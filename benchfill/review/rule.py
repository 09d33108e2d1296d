"""The release rule: which reviewed items go into a release, and with which text.

Each reviewer's latest decision on an item counts (a reviewer may change their
mind); an "edit" is an accept of the edited version. An item is released when
at least ``min_accepts`` reviewers accept it and at most ``max_rejects`` reject it.
Once an item is edited, only the edit and the accepts made after it count as accepts:
an earlier accept was of a version that is no longer the one to be released. A reviewer
whose latest decision is "withdraw" counts neither way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from benchfill.errors import ConfigError
from benchfill.schema import ReviewDecision


@dataclass(frozen=True)
class ReleaseRule:
    min_accepts: int = 1
    max_rejects: int = 0

    def __post_init__(self) -> None:
        if self.min_accepts < 1:
            raise ConfigError(f"release rule: min_accepts must be at least 1, got {self.min_accepts}")
        if self.max_rejects < 0:
            raise ConfigError(f"release rule: max_rejects must be 0 or more, got {self.max_rejects}")

    def describe(self) -> str:
        return f"accepted by at least {self.min_accepts} reviewer(s) and rejected by at most {self.max_rejects}"

    def to_dict(self) -> dict[str, int]:
        return {"min_accepts": self.min_accepts, "max_rejects": self.max_rejects}


@dataclass
class Outcome:
    """Where one item stands under a rule."""

    item_id: str
    status: str  # "accepted" | "rejected" | "pending"
    accepted_by: list[str] = field(default_factory=list)
    rejected_by: list[str] = field(default_factory=list)
    edited_fields: dict[str, Any] | None = None  # the latest edit among the counted decisions
    edited_by: str | None = None
    decisions: list[ReviewDecision] = field(default_factory=list)  # every decision, oldest first

    @property
    def released(self) -> bool:
        return self.status == "accepted"


def latest_per_reviewer(decisions: list[ReviewDecision]) -> dict[str, ReviewDecision]:
    ordered = sorted(decisions, key=lambda d: (d.created_at, d.id or 0))
    latest: dict[str, ReviewDecision] = {}
    for d in ordered:
        latest[d.reviewer] = d
    return latest


def outcome(item_id: str, decisions: list[ReviewDecision], rule: ReleaseRule) -> Outcome:
    """Apply ``rule`` to the decisions on one item."""
    mine = sorted((d for d in decisions if d.item_id == item_id), key=lambda d: (d.created_at, d.id or 0))
    latest = latest_per_reviewer(mine)
    rejected = sorted(r for r, d in latest.items() if d.decision == "reject")
    edits = [d for d in latest.values() if d.decision == "edit" and d.edited_json]
    last_edit = max(edits, key=lambda d: (d.created_at, d.id or 0)) if edits else None
    since = (last_edit.created_at, last_edit.id or 0) if last_edit else None
    accepted = sorted(r for r, d in latest.items() if (d is last_edit) or (
        d.decision == "accept" and (since is None or (d.created_at, d.id or 0) > since)))
    if len(rejected) > rule.max_rejects:
        status = "rejected"
    elif len(accepted) >= rule.min_accepts:
        status = "accepted"
    else:
        status = "pending"
    return Outcome(
        item_id=item_id,
        status=status,
        accepted_by=accepted,
        rejected_by=rejected,
        edited_fields=json.loads(last_edit.edited_json) if last_edit else None,
        edited_by=last_edit.reviewer if last_edit else None,
        decisions=mine,
    )
