"""The BenchFill search for one gap (Algorithm 2 of the paper, Appendix E).

Memory of annotated items near the gap -> parents closest to the target ->
reference list (half below, half above) -> rewriter -> judge -> online
calibration -> memory update; stop early once a valid child is within the
tolerance, then select the valid child closest to the target.

Every call's key is (seed, strategy, gap, round, parent, child), so a rerun of
the same search replays the same requests; the callers' store-backed caches
answer the completed ones, which is what makes a killed run resume for free.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchfill.search.annotate import Annotation, Annotator
from benchfill.search.memory import Memory, MemoryEntry
from benchfill.search.services import Reference, SearchServices, Spend, Verdict


@dataclass(frozen=True)
class SearchSettings:
    rounds: int = 8  # T
    parents: int = 4  # R
    children: int = 4  # C
    references: int = 16  # L
    tolerance: float = 0.01  # tau on the normalized scale
    memory_size: int = 16  # benchmark items that seed the memory
    # Adaptive annotation only (the fixed protocol keeps the paper's rule): also stop once the best
    # child sits within this many of its own z standard errors of the target, since it then cannot
    # be told apart from the target and later rounds would chase unmeasurable differences. 0 = off.
    indistinct: float = 1.0
    # ... but only once that standard error is small against the gap (at most this share of its
    # width): a weak panel (few probes, few trials) cannot place a child inside the gap at all, and
    # stopping there would hand back an item that fills nothing.
    indistinct_max_se: float = 1.0


@dataclass
class Child:
    item_id: str
    parent_id: str
    ancestor_id: str
    round: int
    item: dict[str, Any] | None
    verdict: Verdict | None = None
    annotation: Annotation | None = None
    flags: list[str] = field(default_factory=list)
    true_difficulty: float | None = None
    true_z: float | None = None
    near_duplicate: dict[str, Any] | None = None
    confirmation: Annotation | None = None  # fresh rollouts on the selected child

    @property
    def valid(self) -> bool:
        return self.item is not None and self.verdict is not None and self.verdict.valid and self.annotation is not None

    def deviation(self, target_z: float) -> float:
        return abs(self.annotation.z - target_z) if self.annotation else math.inf


@dataclass
class GapSearch:
    """A gap to fill and the benchmark around it."""

    gap_index: int
    left: float
    right: float
    items: dict[str, dict[str, Any]]  # benchmark item id -> fields
    z: dict[str, float]  # benchmark item id -> fitted normalized difficulty

    @property
    def target_z(self) -> float:
        return (self.left + self.right) / 2


@dataclass
class GapResult:
    gap_index: int
    left: float
    right: float
    target_z: float
    strategy: str
    children: list[Child]
    chosen: Child | None
    rounds_used: int
    spend: Spend
    memory: list[list[Any]] = field(default_factory=list)
    stop: str = ""  # why the search ended: "tolerance", "indistinct" or "rounds"

    @property
    def deviations_by_round(self) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        for c in self.children:
            if c.valid:
                out.setdefault(c.round, []).append(c.deviation(self.target_z))
        return out


# Hooks the orchestrator passes in: it alone writes the store.
OnChild = Callable[[int, Child, float], None]
OnRound = Callable[[int, int, Memory, Spend, float], None]


async def benchfill_search(
    gap: GapSearch,
    services: SearchServices,
    annotator: Annotator,
    settings: SearchSettings | None = None,
    *,
    seed: int = 0,
    on_child: OnChild | None = None,
    on_round: OnRound | None = None,
    check_child: Callable[[Child], None] | None = None,
) -> GapResult:
    settings = settings or SearchSettings()
    target = gap.target_z
    memory = Memory.near_gap(list(gap.z), list(gap.z.values()), target, settings.memory_size)
    items = dict(gap.items)
    spend = Spend()
    children: list[Child] = []
    rounds_used = 0
    stop = "rounds"
    for t in range(1, settings.rounds + 1):
        rounds_used = t
        parents = memory.parents(settings.parents)
        refs = [Reference(items[e.item_id], e.z, e.item_id) for e in memory.references(settings.references)]
        # A child matters only if it could beat what the previous rounds already found.
        margin = min((c.deviation(target) for c in children if c.valid), default=(gap.right - gap.left) / 2)
        jobs = [
            _make_child(
                gap, services, annotator, spend, seed, "benchfill", t, pi, ci, p, items[p.item_id], refs, margin, check_child
            )
            for pi, p in enumerate(parents)
            for ci in range(settings.children)
        ]
        made = await asyncio.gather(*jobs)
        for child in made:  # in (parent, child) order, never completion order
            children.append(child)
            if child.item is not None:
                items[child.item_id] = child.item
            if child.valid:
                memory.add(MemoryEntry(child.item_id, child.annotation.z, "generated", child.ancestor_id))
            if on_child:
                on_child(gap.gap_index, child, target)
        best_child = select_closest(children, target)
        best = best_child.deviation(target) if best_child else math.inf
        if on_round:
            on_round(gap.gap_index, t, memory, spend, best)
        if best <= settings.tolerance:
            stop = "tolerance"
            break
        if _indistinct(best_child, target, gap.left, gap.right, annotator, settings):
            stop = "indistinct"
            break
    return GapResult(
        gap.gap_index, gap.left, gap.right, target, "benchfill", children, select_closest(children, target),
        rounds_used, spend, memory.to_json(), stop,
    )


def _indistinct(
    best: Child | None, target_z: float, left: float, right: float, annotator: Annotator, settings: SearchSettings
) -> bool:
    """Is the best child inside the gap and within ``settings.indistinct`` standard errors of the
    target, with that standard error small against the gap (adaptive only)?"""
    if best is None or annotator.protocol != "adaptive" or settings.indistinct <= 0:
        return False
    if not left < best.annotation.z < right:  # an item outside the gap fills nothing: keep searching
        return False
    resolution = annotator.resolution(best.annotation)
    if resolution > settings.indistinct_max_se * (right - left):
        return False
    return best.deviation(target_z) <= settings.indistinct * resolution


def select_closest(children: list[Child], target_z: float) -> Child | None:
    """The valid child whose annotated difficulty is closest to the target (line 31); ties by id."""
    valid = [c for c in children if c.valid]
    if not valid:
        return None
    return min(valid, key=lambda c: (c.deviation(target_z), c.item_id))


def child_id(strategy: str, gap_index: int, rnd: int, parent_index: int, child_index: int) -> str:
    tag = "bf" if strategy == "benchfill" else strategy[:4]
    return f"{tag}-g{gap_index}-r{rnd}-p{parent_index}-c{child_index}"


async def _make_child(
    gap: GapSearch,
    services: SearchServices,
    annotator: Annotator,
    spend: Spend,
    seed: int,
    strategy: str,
    rnd: int,
    parent_index: int,
    child_index: int,
    parent: MemoryEntry,
    parent_item: dict[str, Any],
    refs: list[Reference],
    margin: float,
    check_child: Callable[[Child], None] | None,
) -> Child:
    cid = child_id(strategy, gap.gap_index, rnd, parent_index, child_index)
    key = f"s{seed}:{cid}"
    child = Child(cid, parent.item_id, parent.ancestor_id or parent.item_id, rnd, None)
    spend.rewriter_calls += 1
    item = await services.rewrite(parent_item, gap.target_z, refs, key)
    if item is None:
        spend.failures += 1
        child.flags.append("rewrite_failed")
        return child
    child.item = item
    spend.judge_calls += 1
    child.verdict = await services.judge(item, key)
    if not child.verdict.valid:
        child.flags.append("judged_invalid")
        return child
    child.annotation = await annotator.annotate(cid, item, key, gap.target_z, margin)
    spend.rollouts += child.annotation.rollouts
    child.flags.extend(f for f in child.annotation.flags if f not in child.flags)
    truth = getattr(services, "true_difficulty", None)
    if truth is not None:
        b = truth(cid)
        if b is not None:
            child.true_difficulty = float(b)
            child.true_z = annotator.to_z(float(b))
    if check_child:
        check_child(child)
    return child
