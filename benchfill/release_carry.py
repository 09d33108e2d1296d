"""What a new release keeps of the one before it: carried-forward, removed and changed items.

Release N+1 holds release N's generated items as they were released unless a reviewer removes one:
by name (``remove``: item id -> who and why), or by a reject recorded on the item in this run after
release N under which the item no longer passes the release rule. An item this run releases again
with different item fields is "changed" (this run's version wins); one it releases again unchanged is
carried forward. Either way the row keeps the release it first appeared in (``released_in``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from benchfill import untrusted
from benchfill.errors import ConfigError
from benchfill.schema import as_utc

# A generated item whose id another run's released item holds is released as "<id>@<run>"
# (benchfill.release._own_ids); this run's outcomes find it under its own id.
RUN_SEP = "@"


@dataclass
class Carry:
    previous: str  # the version carried from ("" for a first release)
    before: set[str]  # generated items of the previous release
    carried: list[str] = field(default_factory=list)
    removed: dict[str, str] = field(default_factory=dict)  # id -> who removed it and why
    changed: dict[str, list[str]] = field(default_factory=dict)  # id -> item fields that differ
    # this run's id -> the released id of the same item: another run's child this run reused ("X@A",
    # benchfill.engine.memory_store.foreign_id) that the previous release holds as A's "X"
    aliases: dict[str, str] = field(default_factory=dict)
    # the benchmark's own items against the previous release's (an items file edited between runs): one added
    # or removed moves the "before" figures, a changed one keeps the place its earlier version was measured at
    originals_added: list[str] = field(default_factory=list)
    originals_removed: list[str] = field(default_factory=list)
    originals_changed: dict[str, list[str]] = field(default_factory=dict)  # id -> item fields that differ

    def originals_moved(self) -> bool:
        return bool(self.originals_added or self.originals_removed or self.originals_changed)

    def originals_summary(self) -> str:
        """"1 added, 2 changed" of the original items; "" where they are the previous release's."""
        parts = [(len(self.originals_added), "added"), (len(self.originals_removed), "removed"),
                 (len(self.originals_changed), "changed")]
        return ", ".join(f"{n} {what}" for n, what in parts if n)

    def changelog(self) -> str:
        """The CHANGELOG lines for this release's entry (none for a first release)."""
        if not self.previous:
            return ""
        # ids and reasons are untrusted text (a benchmark's, a reviewer's): kept literal (benchfill.untrusted)
        out = [f"- {len(self.carried)} generated item(s) carried forward from {untrusted.md_text(self.previous)}"
               + (": " + ", ".join(untrusted.md_code(i) for i in self.carried) if self.carried else "")]
        out += [f"- removed {untrusted.md_code(i)} ({untrusted.md_text(why)})" for i, why in self.removed.items()]
        out += [f"- changed {untrusted.md_code(i)} ({untrusted.md_text(', '.join(f))})" for i, f in self.changed.items()]
        if self.originals_moved():
            out.append(f"- the original items differ from {untrusted.md_text(self.previous)}'s "
                       f"({self.originals_summary()}); {originals_effect(self.originals_added, self.originals_removed)}")
            out += [f"  - original added {untrusted.md_code(i)}" for i in self.originals_added]
            out += [f"  - original removed {untrusted.md_code(i)}" for i in self.originals_removed]
            out += [f"  - original changed {untrusted.md_code(i)} ({untrusted.md_text(', '.join(f))}): it keeps the "
                    "place the scale of record measured its earlier version at" for i, f in self.originals_changed.items()]
        return "\n".join(out) + "\n"


def original_changes(rows: Collection[dict[str, Any]], previous_rows: Mapping[str, dict[str, Any]],
                     provenance: Collection[str]) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """The original items of ``rows`` against the previous release's: (added, removed, changed: id -> the
    item fields that differ; the provenance columns are the releases' own, not the item's)."""
    before = {i: r for i, r in previous_rows.items() if r.get("origin") == "original"}
    now = {r["id"]: r for r in rows if r.get("origin") == "original"}
    changed = {}
    for item_id in sorted(now.keys() & before.keys()):
        mine = {k: v for k, v in now[item_id].items() if k not in provenance}
        theirs = {k: v for k, v in before[item_id].items() if k not in provenance}
        diff = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        if diff:
            changed[item_id] = diff
    return [i for i in now if i not in before], [i for i in before if i not in now], changed


def originals_effect(added: Collection[str], removed: Collection[str]) -> str:
    """What original items that differ do to the "before" figures: an item added or removed moves them; a
    changed one keeps the place the scale of record measured its earlier version at, and so do they."""
    if added or removed:
        return "the \"before\" figures move with them"
    return ("the \"before\" figures stay: a changed item keeps the place the scale of record measured its "
            "earlier version at")


def check_remove(remove: Any) -> None:
    """Refuse a ``remove`` that is not a mapping of item id -> who removed it and why (None: no reason
    given). A list of ids would otherwise fail deep in ``carry_forward`` as a TypeError on indexing."""
    if remove is None:
        return
    if not isinstance(remove, Mapping):
        raise ConfigError(f"remove: expected a mapping of item id -> who removed it and why, got "
                          f"{type(remove).__name__}")
    for item_id, why in remove.items():
        if not isinstance(item_id, str) or not (why is None or isinstance(why, str)):
            raise ConfigError(f"remove: expected item id (a string) -> reason (a string), got {item_id!r} -> {why!r}")
        if why is not None and untrusted.controls_in(why):  # the reviewer's name and reason, as a release states them
            raise ConfigError(f"remove: the reason for {item_id!r} holds a control character ({untrusted.terminal(why)})")


def carry_forward(
    rows: list[dict[str, Any]],
    previous_rows: Mapping[str, dict[str, Any]],
    previous: str,
    previous_released_at: str | None,
    outcomes: Mapping[str, Any],
    remove: Mapping[str, str],
    provenance: Collection[str],
    run_id: str | None = None,
) -> Carry:
    """Add the previous release's generated items to ``rows`` (in place) unless a reviewer removed them.

    ``outcomes`` are this run's review outcomes (benchfill.review.rule.Outcome by item id), which judge
    only the items this run (``run_id``) made: another run's item of the same name is another item.
    ``provenance`` names the columns that are not item fields.
    """
    gen_before = {i: r for i, r in previous_rows.items() if r.get("origin") == "generated"}
    unknown = sorted(set(remove) - set(gen_before))
    if unknown:
        raise ConfigError(f"cannot remove {', '.join(unknown)}: not a generated item of "
                          f"{previous or 'an earlier release (there is none)'}")  # fmt: skip
    carry = Carry(previous=previous, before=set(gen_before))
    if previous:
        carry.originals_added, carry.originals_removed, carry.originals_changed = original_changes(
            rows, previous_rows, provenance)
    since = parse_time(previous_released_at)
    now_ids = {r["id"]: r for r in rows}
    reused = _reused(rows, gen_before, run_id)
    for item_id, row in gen_before.items():
        if item_id in remove:
            carry.removed[item_id] = remove[item_id] or "removed by a reviewer"
            continue
        own = run_id is None or row.get("run_id") in (None, run_id)
        res = outcomes.get(item_id.removesuffix(f"{RUN_SEP}{run_id}")) if own else None
        made_by = row.get("run_id")
        if res is None and run_id and made_by and not own:  # this run's review of the same item, had it
            # reused it from its run ("X@A")
            res = outcomes.get(f"{item_id.removesuffix(f'{RUN_SEP}{made_by}')}{RUN_SEP}{made_by}")
        late = [d for d in (res.decisions if res else []) if d.decision == "reject"
                and (since is None or as_utc(d.created_at) > since)]  # fmt: skip
        if res is not None and res.status == "rejected" and late:
            carry.removed[item_id] = "; ".join(f"rejected by {d.reviewer}" + (f": {d.reason}" if d.reason else "")
                                               for d in late)  # fmt: skip
            continue
        if item_id in now_ids or item_id in reused:  # released again (by the same run, or one that made it
            # too, or one that reused it): kept, and its first release stays on record, as a carried row's does
            again = now_ids[item_id] if item_id in now_ids else reused[item_id]
            if again["id"] != item_id:  # a reused item keeps its released id, and the run that made it
                carry.aliases[again["id"]] = item_id
                again["id"], again["run_id"] = item_id, row.get("run_id")
            mine = {k: v for k, v in again.items() if k not in provenance}
            theirs = {k: v for k, v in row.items() if k not in provenance}
            diff = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            for key in ("released_in", "released_at"):
                if row.get(key) is not None:
                    again[key] = row[key]
            if diff:
                carry.changed[item_id] = diff
            else:
                carry.carried.append(item_id)
            continue
        rows.append(dict(row))  # kept as released, provenance included (released_in: its first release)
        carry.carried.append(item_id)
    # A removed item goes even if this run would release it again.
    gone = {id(reused[i]) for i in carry.removed if i in reused}  # under its reused name too
    rows[:] = [r for r in rows if r["id"] not in carry.removed and id(r) not in gone]
    return carry


def _reused(rows: list[dict[str, Any]], gen_before: Mapping[str, dict[str, Any]],
             run_id: str | None) -> dict[str, dict[str, Any]]:
    """The previous release's generated items of another run that this run releases again under another
    name, the one being a child the other reused: released id -> this run's row of it.

    A run that reuses run A's child "X" names it "X@A" (benchfill.engine.memory_store.foreign_id; and
    where the previous release holds another run's "X@A", release._own_ids makes it "X@A@<this run>");
    A's release holds it as "X" (or "X@A" after a clash of its own). Both are keyed (A's own id, A), in
    either order of release: a release of A after one of B that reused "X" finds B's "X@A" as its "X"."""
    if not run_id:
        return {}
    released: dict[tuple[str, str], str] = {}
    for item_id, row in gen_before.items():
        made_by = row.get("run_id")
        if made_by and made_by != run_id:
            local = item_id.removesuffix(f"{RUN_SEP}{made_by}")
            released[(local, made_by)] = item_id
            base, sep, origin = local.rpartition(RUN_SEP)
            if sep and origin and (base, origin) not in released:  # the other run reused one of origin's
                released[(base, origin)] = item_id
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("origin") != "generated":
            continue
        hit = released.get(_made_as(str(r["id"]), run_id))
        if hit is not None and hit != r["id"] and hit not in out:
            out[hit] = r
    return out


def parse_time(value: Any) -> datetime | None:
    try:
        return as_utc(datetime.fromisoformat(str(value)))
    except ValueError:
        return None


@dataclass
class KeptOut:
    """Items an earlier release removed, against this run's wish to release them again."""

    held: dict[str, str] = field(default_factory=dict)  # id -> why it stays out (kept out of this release)
    restored: dict[str, str] = field(default_factory=dict)  # id -> who put it back
    removed: dict[str, dict[str, Any]] = field(default_factory=dict)  # the record for this release's manifest

    def changelog(self) -> str:
        out = [f"- {untrusted.md_code(i)} stays removed ({untrusted.md_text(why)}); an accept or edit of it made after its removal puts "
               "it back" for i, why in self.held.items()]
        out += [f"- {untrusted.md_code(i)} back after its removal ({untrusted.md_text(why)})" for i, why in self.restored.items()]
        return "".join(line + "\n" for line in out)


def keep_out(
    rows: list[dict[str, Any]],
    removed_before: Mapping[str, Any],
    removed_now: Mapping[str, str],
    previous_rows: Mapping[str, dict[str, Any]],
    outcomes: Mapping[str, Any],
    version: str,
    released_at: str,
    run_id: str,
) -> KeptOut:
    """Drop from ``rows`` (in place) this run's items that an earlier release removed, unless a reviewer
    accepted or edited the item after that release: the run's own decisions still pass them, and without a
    record of the removal each later release from the run would add them back.

    ``removed_before`` is the previous release's record of removed items (its manifest's ``removed``: id ->
    run_id, removed_in, removed_at, why); ``removed_now`` the items ``carry_forward`` removed from it.
    Returns the record this release keeps: every removal still in force, this release's included.
    """
    kept = KeptOut()
    record = {str(i): dict(e) for i, e in removed_before.items() if isinstance(e, dict)}
    for item_id, why in removed_now.items():
        record[item_id] = {"run_id": (previous_rows.get(item_id) or {}).get("run_id"), "removed_in": version,
                           "removed_at": released_at, "why": why}  # fmt: skip
    by_maker = {_made_as(i, e.get("run_id")): i for i, e in record.items()}
    keep = []
    for r in rows:
        hit = None
        if r.get("origin") == "generated" and r["id"] not in previous_rows and r.get("released_in") == version:
            hit = by_maker.get(_made_as(str(r["id"]), r.get("run_id")))
        if hit is None:
            keep.append(r)
            continue
        entry = record[hit]
        since = parse_time(entry.get("removed_at"))
        res = outcomes.get(str(r["id"]).removesuffix(f"{RUN_SEP}{run_id}"))
        back = [d for d in (res.decisions if res else []) if d.decision in ("accept", "edit")
                and since is not None and as_utc(d.created_at) > since]  # fmt: skip
        if back:
            kept.restored[r["id"]] = (f"removed in {entry.get('removed_in')}; "
                                      + ", ".join(f"{d.decision}ed again by {d.reviewer}" for d in back))
            del record[hit]
            keep.append(r)
        else:
            kept.held[r["id"]] = f"removed in {entry.get('removed_in')}: {entry.get('why')}"
    rows[:] = keep
    released = {_made_as(str(r["id"]), r.get("run_id")) for r in rows if r.get("origin") == "generated"}
    kept.removed = {i: e for i, e in record.items() if _made_as(i, e.get("run_id")) not in released}
    return kept


def _made_as(item_id: str, run_id: Any) -> tuple[str, str]:
    """(the id its run gave it, that run): one key for an item under every name a release gives it
    ("X" of run A, "X@A" as run B reused it, "X@B" after a clash; see ``_reused``)."""
    run = str(run_id or "")
    local = item_id.removesuffix(f"{RUN_SEP}{run}") if run else item_id
    base, sep, origin = local.rpartition(RUN_SEP)
    return (base, origin) if sep and origin else (local, run)
