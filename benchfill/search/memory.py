"""The search memory: annotated item-difficulty pairs around one gap (Algorithm 2, lines 4-8).

Parents are the entries whose annotated difficulty is closest to the target;
the reference list gives the rewriter local context on both sides of it. Ties
are broken by item id so that the choice never depends on the order in which
concurrent work finished.

Where the entries come from is not this module's business: the benchmark's own
items (``near_gap``), or a seed the engine retrieved from the store's shared
memory (benchfill/engine/memory_store.py), which may hold children of earlier
gaps, runs and releases. An entry a screen flagged, a judge rejected or a
reviewer turned down stays usable as a reference but is never a parent
(``parent_ok``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Flags that keep a child from ever being a parent: a wrong key (order screen) or a copy of an
# existing item (near duplicate) would pass its defect on to its own children.
NO_PARENT_FLAGS = frozenset({"order_anomaly", "near_duplicate", "judged_invalid", "fails_own_check", "rewrite_failed",
                             "prescreened", "probe_refused"})


def tie_key(x: float) -> float:
    """``x`` rounded for a sort key whose ties go on to the next key (an id). Two children answered alike
    get the same z but for float noise, and that noise is the machine's: the BLAS kernel numpy picks for the
    CPU moves a fit's last bits. Broken by it, the tie made a run's parents, and so its whole search,
    differ between two machines at one seed."""
    return round(x, 9)


@dataclass(frozen=True)
class MemoryEntry:
    item_id: str
    z: float  # annotated (or fitted) normalized difficulty
    origin: str = "original"  # "original" | "generated"
    ancestor_id: str = ""  # the original benchmark item this line of rewrites started from
    parent_ok: bool = True  # False: a reference only (flagged, invalid or rejected), never a parent
    source: str = ""  # the earlier run it came from ("" = the benchmark or this run)

    def to_list(self) -> list[Any]:
        row: list[Any] = [self.item_id, self.z, self.origin, self.ancestor_id]
        if not self.parent_ok or self.source:
            row += [self.parent_ok, self.source]
        return row

    @classmethod
    def from_list(cls, row: list[Any]) -> MemoryEntry:
        extra = (bool(row[4]), str(row[5])) if len(row) > 5 else ()
        return cls(str(row[0]), float(row[1]), str(row[2]), str(row[3]), *extra)


def may_parent(flags: list[str] | tuple[str, ...]) -> bool:
    return not NO_PARENT_FLAGS.intersection(flags)


@dataclass
class Memory:
    target_z: float
    entries: list[MemoryEntry] = field(default_factory=list)

    @classmethod
    def near_gap(cls, item_ids: list[str], z: list[float], target_z: float, size: int) -> Memory:
        """The ``size`` benchmark items whose difficulty is nearest the target (line 4)."""
        pool = [MemoryEntry(i, float(v), "original", i) for i, v in zip(item_ids, z, strict=True)]
        return cls.nearest(pool, target_z, size)

    @classmethod
    def nearest(cls, pool: list[MemoryEntry], target_z: float, size: int) -> Memory:
        """The ``size`` entries of ``pool`` nearest the target, ties by id."""
        pool = sorted(pool, key=lambda e: (tie_key(abs(e.z - target_z)), e.item_id))
        return cls(target_z, pool[: max(1, size)])

    def add(self, entry: MemoryEntry) -> None:
        if all(e.item_id != entry.item_id for e in self.entries):
            self.entries.append(entry)

    def update(self, item_id: str, z: float, parent_ok: bool | None = None) -> None:
        """A better estimate of an entry's z (its confirmation), and what its screen now says."""
        self.entries = [MemoryEntry(e.item_id, z, e.origin, e.ancestor_id,
                                    e.parent_ok if parent_ok is None else parent_ok, e.source)
                        if e.item_id == item_id else e for e in self.entries]

    def parents(self, r: int) -> list[MemoryEntry]:
        """At most ``r`` entries closest to the target (line 7), among those that may be parents."""
        able = (e for e in self.entries if e.parent_ok)
        return sorted(able, key=lambda e: (tie_key(abs(e.z - self.target_z)), e.item_id))[:r]

    def references(self, budget: int, around: float | None = None) -> list[MemoryEntry]:
        """Up to ``budget`` entries: half the nearest below the target, the rest the nearest above (line 8).

        ``around`` centres them elsewhere (a steered ask), so that they bracket what the rewriter is
        asked for. When one side runs short the other side fills the remaining places, so the
        rewriter still sees as much local context as the memory holds.
        """
        c = self.target_z if around is None else around
        # an entry at the centre but for float noise (an ask at a parent's own z) is above it on every machine
        centre = tie_key(c)
        below = sorted((e for e in self.entries if tie_key(e.z) < centre), key=lambda e: (tie_key(c - e.z), e.item_id))
        above = sorted((e for e in self.entries if tie_key(e.z) >= centre), key=lambda e: (tie_key(e.z - c), e.item_id))
        half = budget // 2
        take_below = min(len(below), max(half, budget - len(above)))
        take_above = min(len(above), budget - take_below)
        chosen = below[:take_below] + above[:take_above]
        return sorted(chosen, key=lambda e: (tie_key(e.z), e.item_id))

    def to_json(self) -> list[list[Any]]:
        return [e.to_list() for e in self.entries]

    @classmethod
    def from_json(cls, target_z: float, rows: list[list[Any]]) -> Memory:
        return cls(target_z, [MemoryEntry.from_list(r) for r in rows])
