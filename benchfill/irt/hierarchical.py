"""The paper's hierarchical prior on item difficulties, fitted by empirical Bayes around the MAP 1PL.

The BenchFill paper (Appendix, "alternative prior structures") also fits

    b_i ~ N(mu_b, sigma_b^2),   mu_b ~ N(0, 1),   sigma_b ~ HalfNormal(1),   theta_j ~ N(0, 1),

and reports the difficulties "highly consistent" with its N(0, 1) prior. Their order is (a correlation of
0.99 and more); their spread at the ends is not. Under N(0, 1) the least-measured items, near or past the
ends of the models' abilities, are drawn in toward the middle, so the largest gaps, which lie there, come
out small: on matrices of humaneval's shape whose difficulties spread as its fit suggests, the fitted max
gap was under half the true one (bench/bench_gap_bias.py). A prior whose spread is estimated from the
items themselves draws them in only as far as the benchmark's own spread warrants.

The fit is an EM over (mu_b, sigma_b): the E-step is benchfill's MAP 1PL fit under N(mu_b, sigma_b^2),
its Laplace standard errors standing in for each difficulty's posterior sd; the M-step maximizes the
expected log joint over the hyperparameters with their priors, in closed form (``m_step``). It stops
when sigma_b moves by under 1e-4 of itself and no item's z by more than 1e-5. The location mu_b trades
off against the abilities' along a ridge that only the two N(0, 1) priors tilt, and EM creeps along it;
z, min-max normalized, does not depend on where the ridge is followed to, so the fit stops on z.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np

from benchfill.irt.fit import IrtFit
from benchfill.irt.map import ConvergenceWarning, fit_map_1pl
from benchfill.matrix import ResponseMatrix

MAX_ROUNDS = 200
SD_TOL = 1e-4  # relative change of sigma_b
Z_TOL = 1e-5  # largest change of an item's z


def m_step(b: np.ndarray, se: np.ndarray, var: float) -> tuple[float, float]:
    """(mu_b, sigma_b^2) maximizing E[log p(b | mu, v)] + log N(mu; 0, 1) + log HalfNormal(sqrt v; 1), with
    each b_i ~ N(``b``_i, ``se``_i^2) and the variance of the last round, ``var``, in mu's update.

    mu = sum b / (n + v); then, with S = sum (b_i - mu)^2 + se_i^2, the variance's stationary point of
    -n/2 log v - S / (2 v) - v / 2 is the positive root of v^2 + n v - S = 0."""
    b, se = np.asarray(b, dtype=float), np.asarray(se, dtype=float)
    n = b.size
    mu = float(b.sum() / (n + var))
    s = float(((b - mu) ** 2 + se**2).sum())
    return mu, (-n + math.sqrt(n * n + 4.0 * s)) / 2.0


def fit_hierarchical_1pl(
    matrix: ResponseMatrix,
    *,
    guessing: bool = True,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> IrtFit:
    """The MAP 1PL fit under the difficulty prior N(mu_b, sigma_b^2) that the benchmark's items support.

    Its diagnostics carry ``prior`` "hierarchical", ``difficulty_prior_mean`` and ``difficulty_prior_sd``
    (the estimated mu_b and sigma_b) and ``em_rounds``; a fit that runs out of rounds warns, as the MAP
    fit does, with ``ConvergenceWarning``."""
    mu, var = 0.0, 1.0
    f = fit_map_1pl(matrix, guessing=guessing, seed=seed)
    converged = False
    for rounds in range(1, MAX_ROUNDS + 1):
        mu, new_var = m_step(f.difficulty, f.difficulty_se, var)
        z_before = np.asarray(f.z, dtype=float)
        f = fit_map_1pl(matrix, guessing=guessing, seed=seed, b_prior=(mu, math.sqrt(new_var)),
                        start=np.concatenate([f.ability, f.difficulty]))
        moved = abs(math.sqrt(new_var) - math.sqrt(var)) / math.sqrt(var)
        var = new_var
        if progress:
            progress(f"hierarchical prior round {rounds}: sigma_b {math.sqrt(var):.4f}, mu_b {mu:+.4f}")
        if moved < SD_TOL and float(np.max(np.abs(np.asarray(f.z, dtype=float) - z_before))) < Z_TOL:
            converged = True
            break
    if not converged:
        warnings.warn(f"hierarchical prior: sigma_b still moving after {MAX_ROUNDS} rounds", ConvergenceWarning,
                      stacklevel=2)
    f.diagnostics.update({"prior": "hierarchical", "difficulty_prior_mean": round(mu, 6),
                          "difficulty_prior_sd": round(math.sqrt(var), 6), "em_rounds": rounds,
                          "converged": bool(f.diagnostics.get("converged")) and converged})
    return f


__all__ = ["MAX_ROUNDS", "fit_hierarchical_1pl", "m_step"]
