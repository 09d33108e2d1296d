"""Target steering: learn how this rewriter responds to an ask, and ask for what lands on the target.

Not in the paper. A real rewriter reads "6.2 out of 10" on its own sense of difficulty, moves only
part of the way from its parent and drifts, so asking for the target itself lands elsewhere. Each
annotated child is one observation of that response on the z scale:

    z_child - z_parent = offset + share * (ask - z_parent) + noise

fitted by weighted least squares (weights 1 / (sigma^2 + se_child^2)) with a Gaussian prior on
(offset, share) centred on "no correction" (0, 1), so a gap with few children is barely steered.
The residual sigma is estimated from the data, pulled toward ``sigma0`` by ``nu0`` pseudo-points.
A real rewriter also misjudges each parent in its own, consistent way (children of one parent
share that error), so each parent gets its own offset: the gap's, plus the mean residual of its
children so far (their median) shrunk by n / (n + ``parent_prior``). The next ask for a parent at z_p is the one
the fitted response maps onto the target:

    ask = z_p + (target - z_p - offset_parent) / share,

with the share floored and the ask kept on the prompt's 0-10 scale and near the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Steering:
    offset_sd: float = 0.1  # prior sd of the offset (z): a drift of a logit or so is plausible
    share_prior: float = 1.0  # prior mean of the share ("no correction"; 0.6 was measured worse)
    share_sd: float = 0.25  # prior sd of the share: near the gap the asks hardly vary, so the
    # data say little about the share and much about the offset; a loose prior lets noise steer
    sigma0: float = 0.05  # prior guess of the residual sd (z)
    nu0: float = 4.0  # pseudo-points behind that guess
    min_share: float = 0.2  # never divide by less: a tiny fitted share would ask for the moon
    max_shift: float = 0.2  # never ask further than this from the target (z)
    parent_prior: float = 2.0  # pseudo-children of zero residual behind each parent's own offset
    robust: float = 2.0  # Huber's threshold (standard deviations): a point beyond it pulls no harder
    # Steer only once the learned response is told apart from "no correction": its offset from 0 or its share
    # from 1 by more than this many posterior sds (0: always steer). A rewriter with no lean otherwise gets
    # asks that follow the placements' noise (docs/sim-rewriter.md, "Where steering's gain goes").
    gate: float = 0.0
    points: list[tuple[float, float, float, float]] = field(default_factory=list)  # z_parent, ask, z_child, se
    parents: list[str] = field(default_factory=list)  # the parent of each point
    asks: list[tuple[float, float]] = field(default_factory=list)  # (target, ask) of every ask made
    # The last fit and what it was made of: the posterior selection asks for the response once per child
    # it weighs, and refitting each time took a third of a search's own time in the bench.
    _memo: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def observe(self, z_parent: float, ask: float, z_child: float, se: float, parent: str = "") -> None:
        if all(math.isfinite(v) for v in (z_parent, ask, z_child)):
            self.points.append((z_parent, ask, z_child, se if math.isfinite(se) else 1.0))
            self.parents.append(parent)

    def parent_offset(self, parent: str) -> float:
        """The gap's offset plus this parent's own share of the residual, shrunk toward none."""
        offset, share, sigma = self.response()
        res = [c - z - offset - share * (a - z) for (z, a, c, se), p in zip(self.points, self.parents, strict=True)
               if p == parent and se <= 3 * sigma]
        if not parent or not res:
            return offset
        # The median, so one wild child does not move a parent far; shrunk toward the gap's offset.
        return offset + float(np.median(res)) * len(res) / (len(res) + self.parent_prior)

    def response(self) -> tuple[float, float, float]:
        """(offset, share, residual sd): the posterior mean of the response and its noise."""
        # Points are only ever appended (``observe``); the prior's fields may be changed by a caller.
        return self._fitted()[:3]

    def told_apart(self) -> bool:
        """Is the response told apart from "no correction" (offset 0, share 1) by more than ``gate`` sds?"""
        if self.gate <= 0:  # the default: no fit is needed to say so
            return True
        offset, share, _, sd_offset, sd_share = self._fitted()
        return abs(offset) > self.gate * sd_offset or abs(share - 1.0) > self.gate * sd_share

    def _fitted(self) -> tuple[float, float, float, float, float]:
        key = (len(self.points), self.points[-1] if self.points else None, self.offset_sd, self.share_prior,
               self.share_sd, self.sigma0, self.nu0, self.robust)
        if self._memo is None or self._memo[0] != key:
            self._memo = (key, self._fit())
        return self._memo[1]

    def _fit(self) -> tuple[float, float, float, float, float]:
        """(offset, share, residual sd, and the offset's and the share's posterior sds)."""
        if not self.points:
            return 0.0, self.share_prior, self.sigma0, self.offset_sd, self.share_sd
        p = np.asarray(self.points, dtype=float)
        x, y, se = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0], p[:, 3]
        prior_prec = np.diag([1 / self.offset_sd**2, 1 / self.share_sd**2])
        prior_mean = np.array([0.0, self.share_prior])
        X = np.column_stack([np.ones_like(x), x])
        sigma2 = self.sigma0**2
        beta = prior_mean
        robust = np.ones_like(y)
        for _ in range(4):  # the noise estimate, the fit and the outlier weights settle in a few passes
            w = robust / (sigma2 + se**2)
            A = X.T @ (X * w[:, None]) + prior_prec
            beta = np.linalg.solve(A, X.T @ (w * y) + prior_prec @ prior_mean)
            resid = y - X @ beta
            excess = np.maximum(resid**2 - se**2, 0.0)  # what the annotation error does not explain
            sigma2 = (self.nu0 * self.sigma0**2 + excess.sum()) / (self.nu0 + len(y))
            # Huber weights: a child that landed far off (or whose estimate ran away) pulls no harder
            # than one at ``robust`` standard deviations.
            scaled = np.abs(resid) / np.sqrt(sigma2 + se**2)
            robust = np.minimum(1.0, self.robust / np.maximum(scaled, 1e-12))
        cov = np.linalg.inv(A)
        return float(beta[0]), float(beta[1]), math.sqrt(sigma2), math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1])

    def ask(self, target: float, z_parent: float, parent: str = "", record: bool = True) -> float:
        if not self.told_apart():
            if record:
                self.asks.append((target, target))
            return target
        _, share, _ = self.response()
        offset = self.parent_offset(parent)
        share = max(share, self.min_share)
        ask = z_parent + (target - z_parent - offset) / share
        ask = min(max(ask, target - self.max_shift, 0.0), target + self.max_shift, 1.0)
        if record:  # (an ask worked out but not made is not one the report counts)
            self.asks.append((target, ask))
        return ask

    def predict(self, z_parent: float, ask: float, parent: str = "") -> float:
        _, share, _ = self.response()
        return z_parent + self.parent_offset(parent) + share * (ask - z_parent)

    def summary(self) -> dict[str, Any]:
        offset, share, sigma = self.response()
        shifts = [a - t for t, a in self.asks]
        return {"offset": offset, "share": share, "residual_sd": sigma, "points": len(self.points),
                "asks": len(shifts), "mean_shift": float(np.mean(shifts)) if shifts else 0.0,
                "max_abs_shift": float(np.max(np.abs(shifts))) if shifts else 0.0}
