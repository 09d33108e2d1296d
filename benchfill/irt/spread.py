"""How much a benchmark's items differ in discrimination: sd(log a_i) from its response matrix.

The search places children with a 1PL. An item of slope a is then placed off its difficulty by
(1 - a) times the lean of the probes it was asked (search/annotate.py, ``Annotator.misfit``), and the
allowance for that needs the spread of log a over items like the benchmark's own. The spread of the
2PL MAP estimates is not it: a tight prior shrinks them toward one another, a loose one lets sampling
noise through. The estimate here is the empirical-Bayes one: the prior log a_i ~ N(0, tau^2) whose
tau maximizes the marginal likelihood, found by EM with a Laplace step on the joint mode: fit the 2PL
under tau, then set tau^2 to the mean of the items' squared deviations of log a about their mean plus
their posterior variances, until tau settles. Like penalized quasi-likelihood, this under-states a
variance on binary answers (by about a fifth on 12 models x 8 trials or 40 models x 1), so the figure
is corrected by matrices drawn from the fit (a parametric bootstrap). Where the items carry little
information about their slopes (``information`` near 0) tau stays near where EM started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from benchfill.errors import ConfigError
from benchfill.irt.likelihood import Posterior
from benchfill.matrix import ResponseMatrix

START_SD = 0.35  # where EM starts: the judgement value of docs/sim-rewriter.md
MIN_SD = 0.01  # tau is kept above this: the prior's precision 1/tau^2 must stay finite
MAX_ITEMS = 600  # a seeded subset of larger benchmarks: the spread needs hundreds of items, not 12,000
MIN_MODELS = 5  # below this the 2PL slopes are not identified at all
MIN_ITEMS = 10
REPLICATES = 4  # matrices drawn from the fit to correct the EM's bias
CORRECTION_STEPS = 2


@dataclass(frozen=True)
class Spread:
    sd: float  # tau, bias-corrected: the estimated sd of log a over items
    raw_sd: float  # tau before the correction (the Laplace EM's own figure)
    items: int  # items used (those with both right and wrong answers, at most MAX_ITEMS)
    models: int
    iterations: int
    converged: bool
    # The share of tau^2 that the items' own data determine (1 - mean posterior variance / tau^2): near
    # 0, the estimate is mostly the start's; near 1, the matrix's.
    information: float

    def to_dict(self) -> dict:
        return {"sd": round(self.sd, 4), "raw_sd": round(self.raw_sd, 4), "items": self.items,
                "models": self.models, "iterations": self.iterations, "converged": self.converged,
                "information": round(self.information, 3)}


def discrimination_spread(
    matrix: ResponseMatrix,
    *,
    guessing: bool = True,
    max_items: int = MAX_ITEMS,
    seed: int = 0,
    replicates: int = REPLICATES,
) -> Spread:
    """The sd of log discrimination over ``matrix``'s items (see the module text), corrected for the
    Laplace EM's own bias by ``replicates`` matrices drawn from the fit (0: no correction)."""
    if matrix.n_models < MIN_MODELS:
        raise ConfigError(f"{matrix.source or 'responses'}: {matrix.n_models} models are too few to estimate "
                          f"how item discrimination spreads (at least {MIN_MODELS})")
    sub = _informative(matrix, max_items, seed)
    if sub.n_items < MIN_ITEMS:
        raise ConfigError(f"{matrix.source or 'responses'}: {sub.n_items} items have both right and wrong answers; "
                          f"at least {MIN_ITEMS} are needed to estimate how item discrimination spreads")
    raw, theta, b, iterations, converged, information = _em(sub, guessing, seed)
    sd = raw
    if replicates and raw > MIN_SD:
        # Laplace EM under-states tau on binary data (as PQL does for variance components). Indirect
        # inference: the tau whose matrices, drawn like this one from the fit, EM estimates at ``raw`` on
        # average, by CORRECTION_STEPS multiplicative steps on the same draws (common random numbers).
        for _ in range(CORRECTION_STEPS):
            rng = np.random.default_rng(seed)
            again = [_em(_draw(sub, theta, b, sd, rng, guessing), guessing, seed)[0] for _ in range(replicates)]
            sd = sd * raw / max(float(np.mean(again)), MIN_SD)
    return Spread(sd=sd, raw_sd=raw, items=sub.n_items, models=sub.n_models, iterations=iterations,
                  converged=converged, information=information)


def _em(sub: ResponseMatrix, guessing: bool, seed: int, tol: float = 1e-3, max_iter: int = 200
        ) -> tuple[float, np.ndarray, np.ndarray, int, bool, float]:
    """tau by EM under the prior log a ~ N(0, tau^2), and the last fit's abilities and difficulties.

    The prior's mean stays 0, as in ``fit_map_2pl``: the abilities' N(0, 1) prior is the only other thing
    that fixes the scale, and a mean set from the slopes' modes drifts with it. The spread is taken about
    the modes' own mean, so where the scale settles does not enter it."""
    from benchfill.irt.map import fit_map_2pl

    tau, x, share = START_SD, None, 0.0
    for it in range(1, max_iter + 1):
        fit = fit_map_2pl(sub, guessing=guessing, seed=seed, log_a_prior=(0.0, tau), start=x)
        log_a = np.log(fit.discrimination)
        x = np.concatenate([fit.ability, fit.difficulty, log_a])
        var = _log_a_variance(Posterior(sub, model="2pl", guessing=guessing, log_a_prior=(0.0, tau)), x, tau)
        new = max(math.sqrt(float(np.mean((log_a - log_a.mean()) ** 2 + var))), MIN_SD)
        share = max(float(1.0 - np.mean(var) / tau**2), 0.0)
        step, tau = abs(new - tau), new
        # EM creeps where the data say little: a step is small against how much the data move tau.
        if step < tol * max(share, 0.05):
            return tau, fit.ability, fit.difficulty, it, True, share
    return tau, fit.ability, fit.difficulty, max_iter, False, share


def _draw(sub: ResponseMatrix, theta: np.ndarray, b: np.ndarray, tau: float, rng: np.random.Generator,
          guessing: bool = True) -> ResponseMatrix:
    """A matrix of the same shape and trials, from the fitted abilities and difficulties and fresh slopes
    (with the guessing floor only where the fit used one)."""
    a = np.exp(rng.normal(0.0, tau, len(b)))
    g = np.asarray(sub.chance, dtype=float) if guessing else np.zeros(len(b))
    p = g + (1.0 - g) / (1.0 + np.exp(-a[None, :] * (theta[:, None] - b[None, :])))
    trials = np.asarray(sub.trials)
    return ResponseMatrix(sub.models, sub.item_ids, rng.binomial(trials, p), trials, g, sub.source)


def _log_a_variance(post: Posterior, x: np.ndarray, tau: float) -> np.ndarray:
    """Each item's posterior variance of log a_i at the mode, its difficulty free and the abilities
    held: the 2 x 2 (b_i, log a_i) block of the information, inverted."""
    _, log_a = x[post.m : post.m + post.n], x[post.m + post.n :]
    _, _, w, eta = post.terms(x)
    a = np.exp(log_a)
    i_bb = a**2 * w.sum(axis=0) + 1.0  # d eta / d b = -a; the prior b ~ N(0, 1)
    i_aa = (w * eta**2).sum(axis=0) + 1.0 / tau**2  # d eta / d log a = eta
    i_ab = -a * (w * eta).sum(axis=0)
    return i_bb / np.maximum(i_aa * i_bb - i_ab**2, 1e-300)


def _informative(matrix: ResponseMatrix, max_items: int, seed: int) -> ResponseMatrix:
    """The items some model got right and some model wrong (the others say nothing of a slope), at most
    ``max_items`` of them, chosen by ``seed``."""
    correct = np.asarray(matrix.correct)
    trials = np.asarray(matrix.trials)
    keep = np.flatnonzero((correct.sum(axis=0) > 0) & ((trials - correct).sum(axis=0) > 0))
    if len(keep) > max_items:
        keep = np.sort(np.random.default_rng(seed).choice(keep, size=max_items, replace=False))
    return ResponseMatrix(matrix.models, tuple(matrix.item_ids[i] for i in keep), correct[:, keep], trials[:, keep],
                          np.asarray(matrix.chance, dtype=float)[keep], matrix.source)


# The least misfit allowance ``misfit_allowance`` gives: the median spread of the seven public matrices
# (humaneval 0.36, aime25 0.37, mmlu-pro 0.47, mbpp 0.50, chembench 0.52, livecodebench-codegen 0.54,
# cruxeval-output 0.84). A matrix that shows less (a simulated 1PL benchmark such as the demo's, one
# with too few models to tell) says little about the children a rewriter writes, which need not keep
# their parents' slopes: a judgement, the same one as the simulated world's default spread
# (sim/world.py, DISCRIMINATION_SD), docs/sim-rewriter.md ("Flat items").
ALLOWANCE_FLOOR = 0.5


def misfit_allowance(matrix: ResponseMatrix, *, guessing: bool = True, seed: int = 0) -> tuple[float, dict]:
    """The annotator's misfit allowance for a benchmark (``--misfit auto``): its estimated spread of log
    discrimination, at least ``ALLOWANCE_FLOOR``; with what it rests on, for the run's record."""
    try:
        spread = discrimination_spread(matrix, guessing=guessing, seed=seed)
    except ConfigError as exc:  # too few models or items: the floor, and why
        return ALLOWANCE_FLOOR, {"sd": ALLOWANCE_FLOOR, "estimate": None, "why": str(exc), "floor": ALLOWANCE_FLOOR}
    # Rounded as recorded: a resumed run and a sweep's other units read the record, and must allow the same.
    sd = round(max(spread.sd, ALLOWANCE_FLOOR), 4)
    return sd, {"sd": sd, "estimate": spread.to_dict(), "floor": ALLOWANCE_FLOOR}
