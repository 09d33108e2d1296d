"""The two references BenchFill is compared against (Section 4.2, Appendix E.1).

- baseline: best-of-N uniform-parent rewriting on the same rewrite budget. Four
  benchmark items drawn uniformly as parents, 4*T_g children each, conditioned
  on the parent and the target only (no difficulty-aware retrieval, no
  references, no memory); the valid child closest to the target wins.
- oracle: not a method but an upper bound: insert items exactly at the midpoint
  of the current largest gap, one after another.
"""

from __future__ import annotations

import asyncio

import numpy as np

from benchfill.search.annotate import Annotator
from benchfill.search.loop import Child, GapResult, GapSearch, SearchSettings, _make_child
from benchfill.search.memory import MemoryEntry
from benchfill.search.selection import in_range, select_closest
from benchfill.search.services import SearchServices, Spend, derive_seed

STRATEGIES = ("benchfill", "baseline", "oracle")


async def baseline_search(
    gap: GapSearch,
    services: SearchServices,
    annotator: Annotator,
    settings: SearchSettings | None = None,
    *,
    rounds_matched: int | None = None,
    children_matched: int | None = None,
    seed: int = 0,
    on_child=None,
    check_child=None,
) -> GapResult:
    """Budget-matched: ``rounds_matched`` (T_g, the rounds BenchFill used on this gap) times R*C children
    (fewer by BenchFill's narrower first round, if it has one); or, given ``children_matched``, exactly
    that many (the children BenchFill asked for on this gap, whose rounds may vary in width)."""
    settings = settings or SearchSettings()
    t_g = rounds_matched or settings.rounds
    rng = np.random.default_rng(derive_seed(seed, "baseline", gap.gap_index))
    ids = sorted(gap.items)
    picks = rng.choice(len(ids), size=min(settings.parents, len(ids)), replace=False)
    parents = [MemoryEntry(ids[i], gap.z[ids[i]], "original", ids[i]) for i in sorted(picks)]
    spend = Spend()
    # BenchFill's children over T_g rounds (its first round may be narrower), spread over the parents
    n = len(parents)
    total = (children_matched if children_matched is not None
             else settings.children * (min(settings.first_parents or n, n) + n * (t_g - 1)))
    counts = [total // n + (pi < total % n) for pi in range(n)]
    # The baseline has no memory, so no round can learn from another: the margin for an
    # adaptive early stop is the gap's half-width (a child outside the gap helps nothing).
    margin = (gap.right - gap.left) / 2
    jobs = [
        _make_child(
            gap, services, annotator, spend, seed, "baseline", 1 + ci // settings.children, pi, ci, p,
            gap.items[p.item_id], [], margin, check_child,
        )
        for pi, p in enumerate(parents)
        for ci in range(counts[pi])
    ]
    children: list[Child] = list(await asyncio.gather(*jobs))
    if on_child:
        for c in children:
            on_child(gap.gap_index, c, gap.target_z)
    return GapResult(
        gap.gap_index, gap.left, gap.right, gap.target_z, "baseline", children,
        select_closest(in_range(children), gap.target_z), t_g, spend,
    )


def oracle_fill(z: np.ndarray, k: int) -> list[float]:
    """The k insertions of the oracle: each at the midpoint of the then-largest adjacent gap."""
    pts = sorted(float(v) for v in np.asarray(z, dtype=float))
    added: list[float] = []
    for _ in range(k):
        if len(pts) < 2:
            break
        widths = np.diff(pts)
        i = int(np.argmax(widths))
        mid = (pts[i] + pts[i + 1]) / 2
        added.append(mid)
        pts.insert(i + 1, mid)
    return added
