"""The simulated world's truth placed on a run's fitted scale, for reports and benchmarks alike.

A run measures items on the scale of its own IRT fit (normalized z from the fitted b_min and b_max),
while the world knows latent difficulties on the scale it drew or fitted them on. The two differ by
a location and a scale (and the fit's shrinkage), so a "true z" is only comparable with the fitted z
of the benchmark's items once mapped: the expected fitted b of an item with latent b, from the least
squares line of fitted on latent b over the benchmark's own items. The run report and
bench/bench_search.py both call this, so their "true" columns agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TrueScale:
    intercept: float
    slope: float
    b_min: float  # the fit's normalization
    b_max: float
    n_items: int

    def fitted_b(self, latent_b: float) -> float:
        return self.intercept + self.slope * latent_b

    def z(self, latent_b: float) -> float:
        """The latent difficulty as a z on the fit's scale (not clipped to [0, 1])."""
        span = self.b_max - self.b_min
        return 0.5 if span <= 0 else (self.fitted_b(latent_b) - self.b_min) / span


def true_scale(world, fit) -> TrueScale:
    """Map the world's latent b onto ``fit`` through the benchmark items both know."""
    fitted, latent = [], []
    for item_id, b in zip(fit.item_ids, np.asarray(fit.difficulty, dtype=float), strict=True):
        item = world.lookup(item_id)
        if item is not None and item.origin == "original":
            fitted.append(float(b))
            latent.append(item.difficulty)
    if len(latent) < 2 or np.ptp(latent) <= 0:
        return TrueScale(0.0, 1.0, float(fit.b_min), float(fit.b_max), len(latent))
    slope, intercept = np.polyfit(np.asarray(latent), np.asarray(fitted), 1)
    return TrueScale(float(intercept), float(slope), float(fit.b_min), float(fit.b_max), len(latent))


def world_truth(world, fit, results, gaps, k: int) -> dict | None:
    """The gap figures by the world's own difficulties: every original item at its latent b, each chosen item at
    its own, on the originals' min-max scale. What no fit can see, and the question a maintainer asks of the
    world: is each gap truly filled?

    The "true" figures beside it (``TrueScale``) place the chosen items on the fit's scale and keep the originals
    at their fitted places, where the gaps were measured; the originals' own fit error, which moves the gaps'
    edges, is left out there. Here it is not: ``inside`` counts the chosen items whose latent b lies strictly
    between those of the two original items at their gap's edges (``gaps``, as each result's gap_index indexes
    them: the items the report names there, whose places the fit may have in another order). None where the
    world cannot place every chosen item or original."""
    from benchfill.coverage import max_gap, top_k_gap_sum

    latent: dict[str, float] = {}
    for item_id in fit.item_ids:
        item = world.lookup(item_id)
        if item is not None and item.origin == "original":
            latent[item_id] = float(item.difficulty)
    chosen = [r for r in results if r.chosen is not None]
    if len(latent) < 2 or any(r.chosen.true_difficulty is None for r in chosen):
        return None
    lo, hi = min(latent.values()), max(latent.values())
    if hi <= lo:
        return None
    before = (np.array(list(latent.values())) - lo) / (hi - lo)
    after = np.concatenate([before, (np.array([r.chosen.true_difficulty for r in chosen]) - lo) / (hi - lo)])
    inside = 0
    for r in chosen:
        # by name, as coverage.gaps gives them: of items tied at an edge's z, the one the report names there
        ends = [gaps[r.gap_index].left_item, gaps[r.gap_index].right_item]
        if all(e in latent for e in ends) and \
                min(latent[e] for e in ends) < r.chosen.true_difficulty < max(latent[e] for e in ends):
            inside += 1
    return {"top_k": k, "max_gap_before": max_gap(before), "max_gap_after": max_gap(after),
            "top_k_sum_before": top_k_gap_sum(before, k), "top_k_sum_after": top_k_gap_sum(after, k),
            "inside": inside, "chosen": len(chosen)}
