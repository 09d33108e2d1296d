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
