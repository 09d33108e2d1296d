"""Coverage before and after new items, computed one way for the run report and the release card.

"After" places each new item at one estimate of its z (the confirmed one where there is one) and
carries that estimate's uncertainty: a Monte Carlo over the new items' z, each drawn from
N(z, se^2) independently, gives an interval for every after-figure (the originals' fitted z are the
scale of record and held fixed). Seeded, so the same inputs give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from benchfill.coverage import ddm, max_gap, top_k_gap_sum

DRAWS = 2000


def figures(z: Sequence[float], k: int) -> dict[str, float]:
    z = np.asarray(z, dtype=float)
    return {"max_gap": max_gap(z), f"top{k}_gap_sum": top_k_gap_sum(z, k), "ddm": ddm(z)}


def before_after(z_before: Sequence[float], new_z: Sequence[float], new_se: Sequence[float] | None, k: int,
                 seed: int = 0, level: float = 0.9) -> dict[str, Any]:
    """{"before": figures, "after": figures, "after_interval": {name: [lo, hi]}, "after_expected": figures,
    "reduction": ..., "reduction_expected": ...}. The expected figures average the after-figures over the
    new items' error: an item near an end of the axis may truly lie beyond it and open a new gap, which
    the point figure at its estimate does not show."""
    base = np.asarray(z_before, dtype=float)
    new = np.asarray(new_z, dtype=float)
    before = figures(base, k)
    after = figures(np.concatenate([base, new]), k) if new.size else dict(before)
    key = f"top{k}_gap_sum"
    out: dict[str, Any] = {"before": before, "after": after, "k": k,
                           "reduction": 1 - after[key] / before[key] if before[key] > 0 else 0.0}
    se = np.zeros_like(new) if new_se is None else np.nan_to_num(np.asarray(new_se, dtype=float), nan=0.0)
    if se.shape != new.shape:  # one se per new item: a single one was silently broadcast to all
        raise ValueError(f"new_se: {se.size} standard errors for {new.size} new items")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if new.size and np.any(se > 0):
        rng = np.random.default_rng(seed)
        draws = new[None, :] + se[None, :] * rng.standard_normal((DRAWS, new.size))
        sims = {name: [] for name in before}
        for row in draws:
            for name, v in figures(np.concatenate([base, row]), k).items():
                sims[name].append(v)
        q = [(1 - level) / 2, (1 + level) / 2]
        out["after_interval"] = {name: [float(x) for x in np.quantile(v, q)] for name, v in sims.items()}
        out["interval_level"] = level
        out["after_expected"] = {name: float(np.mean(v)) for name, v in sims.items()}
        out["reduction_expected"] = (1 - out["after_expected"][key] / before[key]) if before[key] > 0 else 0.0
    return out
