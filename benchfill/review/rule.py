"""The release rule: which reviewed items go into a release, and with which text.

Each reviewer's latest decision on an item counts (a reviewer may change their mind); an "edit" is an
accept of the edited version. An item is released when at least ``min_accepts`` reviewers accept it and at
most ``max_rejects`` reject it.

An accept is of the version of the item it was given on: the edit in force then, else the proposal. The
edit in force is the latest edit whose reviewer has not since rejected the item, withdrawn, or edited it
again; a reviewer's own accept after their edit keeps it (it accepts that edit). So an accept counts only
while the version it was given on is the one to be released: an item edited since, or whose edit was
withdrawn since, needs accepting again. A reviewer whose latest decision is "withdraw" counts neither way.
Reviewers are told apart by name, compared without regard to case or spacing ("Alice " is alice).
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


# 2: an accept counts for the version it was given on, an editor's own accept keeps their edit, names are
# compared without regard to case or spacing. A release records it, so that the next one made under another
# rule can name the items that now stand otherwise (``outcome_before_2``).
RULE_VERSION = 2


def outcome_before_2(item_id: str, decisions: list[ReviewDecision], rule: ReleaseRule) -> tuple[str, str | None]:
    """(status, the edit in force as JSON) as benchfill read them before ``RULE_VERSION`` 2: each reviewer's
    latest decision by exact name; an edit in force only while it was its author's latest decision; once an
    item was edited, only the edit and accepts made after it counted. Kept to say what an upgrade changed."""
    latest: dict[str, ReviewDecision] = {}
    for d in sorted((d for d in decisions if d.item_id == item_id), key=_order):
        latest[d.reviewer] = d
    rejected = [r for r, d in latest.items() if d.decision == "reject"]
    edits = [d for d in latest.values() if d.decision == "edit" and d.edited_json]
    last_edit = max(edits, key=_order) if edits else None
    since = _order(last_edit) if last_edit else None
    accepted = [r for r, d in latest.items()
                if d is last_edit or (d.decision == "accept" and (since is None or _order(d) > since))]
    status = ("rejected" if len(rejected) > rule.max_rejects else "accepted" if len(accepted) >= rule.min_accepts
              else "pending")
    return status, last_edit.edited_json if last_edit else None


def reviewer_key(name: str) -> str:
    """Who a name stands for: one reviewer typing "Alice", "alice " and "ALICE" is one vote, not three."""
    return " ".join(name.split()).casefold()


def _order(d: ReviewDecision) -> tuple[Any, int]:
    return (d.created_at, d.id or 0)


def latest_per_reviewer(decisions: list[ReviewDecision]) -> dict[str, ReviewDecision]:
    """Each reviewer's latest decision, keyed by ``reviewer_key``."""
    latest: dict[str, ReviewDecision] = {}
    for d in sorted(decisions, key=_order):
        latest[reviewer_key(d.reviewer)] = d
    return latest


def outcome(item_id: str, decisions: list[ReviewDecision], rule: ReleaseRule) -> Outcome:
    """Apply ``rule`` to the decisions on one item."""
    mine = sorted((d for d in decisions if d.item_id == item_id), key=_order)
    stands: dict[str, tuple[str, ReviewDecision | None]] = {}  # reviewer -> (accept|reject, version accepted)
    edits: dict[str, ReviewDecision] = {}  # reviewer -> their edit still standing
    names: dict[str, str] = {}

    def in_force() -> ReviewDecision | None:
        return max(edits.values(), key=_order) if edits else None

    for d in mine:
        who = reviewer_key(d.reviewer)
        names[who] = d.reviewer
        if d.decision == "edit" and d.edited_json:
            edits[who] = d
            stands[who] = ("accept", d)
        elif d.decision == "accept":
            stands[who] = ("accept", in_force())
        elif d.decision == "reject":
            stands[who] = ("reject", None)
            edits.pop(who, None)
        else:  # withdraw (or an edit that recorded nothing): neither way, and their edit no longer stands
            stands.pop(who, None)
            edits.pop(who, None)
    last_edit = in_force()
    accepted = {names[w] for w, (kind, version) in stands.items() if kind == "accept" and version is last_edit}
    if last_edit is not None:  # its author accepts it, whatever version a later accept of theirs was given on
        accepted.add(names[reviewer_key(last_edit.reviewer)])
    rejected = sorted(names[w] for w, (kind, _) in stands.items() if kind == "reject")
    if len(rejected) > rule.max_rejects:
        status = "rejected"
    elif len(accepted) >= rule.min_accepts:
        status = "accepted"
    else:
        status = "pending"
    return Outcome(
        item_id=item_id,
        status=status,
        accepted_by=sorted(accepted),
        rejected_by=rejected,
        edited_fields=json.loads(last_edit.edited_json) if last_edit else None,
        edited_by=last_edit.reviewer if last_edit else None,
        decisions=mine,
    )
