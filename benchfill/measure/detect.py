"""The localized-improvement test: did a model get better on a benchmark after a change?

The one-sided stratified randomization test of the BenchFill paper (Appendix E.2, Table 12).
Each item is a stratum. Under the null hypothesis the change did nothing, so on every item the
pooled rollout outcomes of the two conditions are exchangeable: a permutation reassigns them at
random between "before" and "after", keeping each condition's number of rollouts on the item.
The statistic is the accuracy gain, the mean over items of (after rate - before rate); the
p-value is the share of permutations whose gain is at least the observed one.

Only the number of successes a permutation puts on the "after" side of item i matters, and
that number is hypergeometric (K_i successes among N_i pooled outcomes, r_i drawn). Drawing
it by inverse CDF from one uniform per item and permutation is the same distribution as
shuffling the outcomes themselves, and lets 100,000 permutations of 30 items x 32 rollouts
run as a few array operations. The gain is affine in those counts,
``T = sum_i c_i X_i + const`` with ``c_i = (1/r_after,i + 1/r_before,i) / n``, so a
permutation is compared on ``sum_i c_i (X_i - x_i)`` alone.

The Monte Carlo p-value is ``(1 + #{T* >= T}) / (1 + B)`` (never 0, valid at any B);
:func:`exact_p_value` enumerates the permutation distribution by convolution for small cases.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from benchfill.errors import DataError
from benchfill.irt.engine import require_matrix
from benchfill.matrix import ResponseMatrix

DEFAULT_PERMUTATIONS = 100_000
# The most permutations a test may ask for. Past 10**7 the Monte Carlo p-value resolves 1e-7 and its standard
# error at p = 0.05 is under 1e-4: no decision changes, and only the running time grows, linearly with
# permutations x items (10**7 take 20 s at 30 items, 13 minutes at 1,000, hours on a whole large benchmark).
# A huge --permutations (a typo's extra zeros) had run for hours without a word; an exact p-value is 0.
MAX_PERMUTATIONS = 10_000_000
PROGRESS_EVERY_S = 15.0  # as a NUTS fit says its iterations (benchfill.irt.sampling): a short test says nothing
_CHUNK_CELLS = 4_000_000  # uniforms drawn at once (float32: 16 MB), so big benchmarks stay in memory


@dataclass
class BandGain:
    lo: float
    hi: float
    n_items: int
    acc_before: float
    acc_after: float

    @property
    def gain(self) -> float:
        return self.acc_after - self.acc_before


@dataclass
class DetectResult:
    model_before: str
    model_after: str
    n_items: int
    acc_before: float
    acc_after: float
    p_value: float
    permutations: int  # 0 when the p-value is exact
    alpha: float
    difficulty_source: str  # where the bands' difficulties come from
    bands: list[BandGain] = field(default_factory=list)
    unplaced: int = 0  # items without a difficulty (not in any band)

    @property
    def gain(self) -> float:
        return self.acc_after - self.acc_before

    @property
    def detected(self) -> bool:
        return self.p_value < self.alpha

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gain"] = self.gain
        d["detected"] = self.detected
        for b, band in zip(d["bands"], self.bands, strict=True):
            b["gain"] = band.gain
            for k in ("acc_before", "acc_after", "gain"):
                b[k] = None if b[k] != b[k] else b[k]  # an empty band: null in JSON, not NaN
        return d

    def lines(self) -> list[str]:
        b_ = self.permutations
        how = "exact" if b_ == 0 else f"{b_:,} permutation{'' if b_ == 1 else 's'}"
        verdict = "improvement detected" if self.detected else "no improvement detected"
        out = [
            f"{self.model_before} -> {self.model_after} on {self.n_items} items: accuracy "
            f"{self.acc_before:.4f} -> {self.acc_after:.4f}, gain {self.gain:+.4f}",
            f"one-sided stratified randomization test ({how}): p = {self.p_text()}; "
            f"{verdict} at p < {self.alpha}",
            f"gain per difficulty band (difficulty: {self.difficulty_source}):",
        ]
        # enough decimals to tell the edges apart: with two, 1,000 bands all read [0.00, 0.00)
        d = next(d for d in range(2, 17) if len({f"{e:.{d}f}" for e in self._edges()}) == len(self.bands) + 1)
        for k, b in enumerate(self.bands):
            close = "]" if k == len(self.bands) - 1 else ")"  # the last band holds z = 1
            if b.n_items:
                out.append(f"  [{b.lo:.{d}f}, {b.hi:.{d}f}{close} {b.n_items:>4} items  "
                           f"{b.acc_before:.4f} -> {b.acc_after:.4f}  gain {b.gain:+.4f}")
            else:
                out.append(f"  [{b.lo:.{d}f}, {b.hi:.{d}f}{close}    0 items")
        if self.unplaced:
            out.append(f"  {self.unplaced} item(s) without a difficulty are in no band")
        return out

    def p_text(self) -> str:
        """The p-value to three significant digits (scientific below 1e-4), so that a tiny one never reads as
        0; a Monte Carlo p at its floor 1/(B + 1) says so, as the most those permutations can resolve."""
        p, b = self.p_value, self.permutations
        if p <= 0:  # an exact p whose terms all underflowed a float
            return "< 1e-300"
        text = f"{p:.3g}"
        if b and p * (b + 1) <= 1 + 1e-9:
            text += f" (the floor 1/({b:,} + 1): no permutation reached the observed gain)"
        return text

    def _edges(self) -> list[float]:
        return [b.lo for b in self.bands] + [self.bands[-1].hi] if self.bands else []


def _check(correct: np.ndarray, trials: np.ndarray, name: str) -> None:
    if np.any(trials < 1):
        raise DataError(f"{name}: every item needs at least one rollout in both conditions")
    if np.any(correct < 0) or np.any(correct > trials):
        raise DataError(f"{name}: correct must lie in [0, trials]")


def _prepare(cb, tb, ca, ta) -> tuple[np.ndarray, ...]:
    cb, tb, ca, ta = (np.asarray(x, dtype=np.int64).ravel() for x in (cb, tb, ca, ta))
    if not (cb.shape == tb.shape == ca.shape == ta.shape) or cb.size == 0:
        raise DataError("before and after need the same, non-empty list of items")
    _check(cb, tb, "before")
    _check(ca, ta, "after")
    return cb, tb, ca, ta


def _hypergeom_cdf(k: int, n: int, draws: int) -> np.ndarray:
    """CDF of the successes among ``draws`` of ``n`` outcomes holding ``k`` successes, on 0..draws.

    From scipy's log-space pmf: exact binomial coefficients cost time quadratic in the rollouts
    (a minute at 10,000 per condition), for no difference a float64 sum can hold."""
    from scipy.stats import hypergeom

    return np.cumsum(hypergeom.pmf(np.arange(draws + 1), n, k, draws))


def stratified_permutation_test(
    correct_before: Sequence[int] | np.ndarray,
    trials_before: Sequence[int] | np.ndarray,
    correct_after: Sequence[int] | np.ndarray,
    trials_after: Sequence[int] | np.ndarray,
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int | np.random.Generator | None = 0,
    progress: Callable[[str], None] | None = None,
) -> tuple[float, float]:
    """(accuracy gain, one-sided p-value) of after over before; arrays are per item. ``progress``: given a
    line of the permutations done every PROGRESS_EVERY_S seconds of a long test."""
    cb, tb, ca, ta = _prepare(correct_before, trials_before, correct_after, trials_after)
    check_permutations(permutations)
    n = cb.size
    gain = float(np.mean(ca / ta) - np.mean(cb / tb))
    k, pool = ca + cb, ta + tb
    # Items whose pooled outcomes are all alike cannot move under a permutation.
    live = np.flatnonzero((k > 0) & (k < pool))
    if live.size == 0:
        return gain, 1.0
    # On the integer lattice of exact_p_value when the rollout counts allow it: no float ties.
    lcm = _lcm(np.concatenate([ta[live], tb[live]]))
    if lcm <= 1 << 30:
        weight, tol = lcm // ta[live] + lcm // tb[live], 0
    else:
        weight = (1.0 / ta[live] + 1.0 / tb[live]) / n
        tol = 1e-9 * float(weight.min())
    observed = ca[live]
    cdfs = [_hypergeom_cdf(int(k[i]), int(pool[i]), int(ta[i]))[:-1].astype(np.float32) for i in live]
    # Where the items outnumber the steps of their CDFs (many items of few rollouts: a benchmark's), the
    # inverse CDF is counted a step at a time over every item at once: the steps at or below each uniform,
    # as searchsorted(side="right") counts them, with the items' shorter CDFs padded by steps never reached.
    # A searchsorted per item per chunk cost permutations x items**2 / _CHUNK_CELLS calls (157 s for 20,000
    # items); this costs permutations x items x steps in whole-array work, and draws the same uniforms.
    width = max(c.size for c in cdfs)
    steps = None
    if width < live.size and weight.dtype.kind == "i":  # (on the lattice: a sum in any order is the same sum)
        steps = np.full((width, live.size), np.inf, dtype=np.float32)
        for j, cdf in enumerate(cdfs):
            steps[: cdf.size, j] = cdf
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    chunk = max(1, _CHUNK_CELLS // live.size)
    at_least = 0
    done = 0
    last = time.monotonic()
    while done < permutations:
        m = min(chunk, permutations - done)
        u = rng.random((m, live.size), dtype=np.float32)
        if steps is not None:
            # Inverse CDF: the permuted "after" successes of each item; then less the observed ones, weighed.
            x = np.zeros((m, live.size), dtype=np.int16 if width < 1 << 15 else np.int32)
            for row in steps:
                np.add(x, u >= row, out=x, casting="unsafe")
            shift = x @ weight - int(observed @ weight)
        else:
            shift = np.zeros(m, dtype=weight.dtype)
            for j, cdf in enumerate(cdfs):
                # Inverse CDF: the permuted "after" successes of this item, minus the observed ones.
                x = np.searchsorted(cdf, u[:, j], side="right")
                shift += weight[j] * (x - observed[j])
        at_least += int(np.count_nonzero(shift >= -tol))
        done += m
        if progress is not None and done < permutations and time.monotonic() - last >= PROGRESS_EVERY_S:
            progress(f"permutations {done:,}/{permutations:,} done")
            last = time.monotonic()
    return gain, (1 + at_least) / (1 + permutations)


def check_permutations(permutations: int, name: str = "permutations", alpha: float | None = None,
                       alpha_name: str = "alpha") -> None:
    """Refuse a count of random permutations below 1 or above MAX_PERMUTATIONS, in one line naming ``name``;
    with ``alpha`` (``alpha_name``), also one too few for any p to fall below it."""
    if permutations < 1:
        raise DataError(f"{name} must be at least 1, got {permutations}")
    if permutations > MAX_PERMUTATIONS:
        raise DataError(f"{name} must be at most {MAX_PERMUTATIONS:,} (a p-value to 1e-7 already; more only runs "
                        f"longer), got {permutations:,}")
    # A Monte Carlo p is never below 1/(B + 1), and detection is p < alpha: fewer permutations than that
    # said "no improvement detected" whatever the data
    if alpha is not None and 1.0 / (permutations + 1.0) >= alpha:
        need = min_permutations(alpha)
        if need > MAX_PERMUTATIONS:
            raise DataError(f"{alpha_name} {alpha!r}: no improvement can be detected, as p is never below "
                            f"1/({MAX_PERMUTATIONS:,} + 1) even at the most {name}; give {alpha_name} above "
                            f"{1.0 / (MAX_PERMUTATIONS + 1.0):.8g}, or {name} 0 (exact, small cases only)")
        raise DataError(f"{name} {permutations:,} with {alpha_name} {alpha!r}: no improvement can be detected, as "
                        f"p is never below 1/({permutations:,} + 1); give {name} {need:,} or more, or 0 (exact)")


def min_permutations(alpha: float) -> int:
    """The fewest random permutations whose smallest p, 1/(B + 1), is below ``alpha`` (20 for .05)."""
    b = max(math.floor(1.0 / alpha), 1)
    while 1.0 / (b + 1.0) >= alpha:  # float rounding of 1/alpha, either way
        b += 1
    while b > 1 and 1.0 / b < alpha:
        b -= 1
    return b


def _lcm(counts: np.ndarray) -> int:
    """The least common multiple of rollout counts, exact: numpy's int64 lcm wraps past 2**63 (the counts
    85 to 100 already wrap, to a negative number that passed for a small one and turned the test around)."""
    return math.lcm(*(int(t) for t in np.unique(counts)))


def exact_p_value(
    correct_before: Sequence[int] | np.ndarray,
    trials_before: Sequence[int] | np.ndarray,
    correct_after: Sequence[int] | np.ndarray,
    trials_after: Sequence[int] | np.ndarray,
) -> float:
    """P(T* >= T) under the full within-item permutation distribution, by convolution.

    With L the least common multiple of all rollout counts, ``n * L * c_i`` is an integer, so
    the statistic lives on an integer lattice and the per-item hypergeometric distributions
    convolve exactly. Meant for small cases: the lattice must stay below a few million points.
    """
    cb, tb, ca, ta = _prepare(correct_before, trials_before, correct_after, trials_after)
    lcm = _lcm(np.concatenate([ta, tb]))
    if lcm * cb.size > 5_000_000:  # the lattice spans at least n * L points
        raise DataError("exact p-value: the permutation distribution is too large; use permutations")
    weights = lcm // ta + lcm // tb
    span = int(np.sum(weights * ta))
    if span > 5_000_000:
        raise DataError("exact p-value: the permutation distribution is too large; use permutations")
    dist = np.ones(1)  # probability of sum_i w_i X_i, from 0
    for i in range(cb.size):
        k, pool, r, w = int(ca[i] + cb[i]), int(ta[i] + tb[i]), int(ta[i]), int(weights[i])
        pmf = np.diff(_hypergeom_cdf(k, pool, r), prepend=0.0)
        spread = np.zeros(w * r + 1)
        spread[::w] = pmf
        dist = np.convolve(dist, spread)
    observed = int(np.sum(weights * ca))
    return float(min(1.0, dist[observed:].sum()))


def _row(matrix: ResponseMatrix, model: str | None, side: str) -> tuple[str, np.ndarray, np.ndarray]:
    if model is None:
        if matrix.n_models != 1:
            raise DataError(f"{side} ({matrix.source or 'responses'}): {matrix.n_models} models; name one "
                            f"({', '.join(matrix.models[:5])}{', ...' if matrix.n_models > 5 else ''})")
        model = matrix.models[0]
    if model not in matrix.models:
        raise DataError(f"{side} ({matrix.source or 'responses'}): no model {model!r}")
    j = matrix.models.index(model)
    return model, matrix.correct[j], matrix.trials[j]


def detect(
    before: ResponseMatrix,
    after: ResponseMatrix,
    *,
    model_before: str | None = None,
    model_after: str | None = None,
    difficulty: Mapping[str, float] | None = None,
    bands: int = 5,
    permutations: int = DEFAULT_PERMUTATIONS,
    alpha: float = 0.05,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> DetectResult:
    """The localized-improvement test of one model before and after a change.

    Items are those both matrices tried for the model. ``difficulty`` maps item ids to a
    normalized difficulty z (e.g. ``dict(zip(fit.item_ids, fit.z))``) for the per-band gains;
    without it the bands use 1 - the item's pooled accuracy over both conditions.
    ``permutations=0`` computes the exact p-value instead (small cases only). ``progress``: given a line of
    the permutations done now and then in a long test (``stratified_permutation_test``).
    """
    require_matrix(before, "before")  # None or a path failed in _row as an AttributeError
    require_matrix(after, "after")
    if not 0 < alpha < 1:
        raise DataError(f"alpha must lie in (0, 1), got {alpha}")
    if permutations != 0:  # before the matrices are read through: a bad count is refused at once
        check_permutations(permutations, alpha=alpha)
    if bands < 1:
        raise DataError(f"bands: must be at least 1, got {bands}")
    if difficulty is not None and not isinstance(difficulty, Mapping):  # an array has no item ids to match
        raise DataError("difficulty must map item ids to z (e.g. dict(zip(fit.item_ids, fit.z))), "
                        f"got {type(difficulty).__name__}")
    mb, cb_all, tb_all = _row(before, model_before, "before")
    ma, ca_all, ta_all = _row(after, model_after, "after")
    pos_a = {i: k for k, i in enumerate(after.item_ids)}
    ib = [k for k, i in enumerate(before.item_ids) if tb_all[k] > 0 and i in pos_a and ta_all[pos_a[i]] > 0]
    ids = [before.item_ids[k] for k in ib]  # (by position: a look-up by id per item was 22 s at 50,000 items)
    if not ids:
        raise DataError(f"{mb} before and {ma} after share no item with responses")
    ia = [pos_a[i] for i in ids]
    cb, tb, ca, ta = cb_all[ib], tb_all[ib], ca_all[ia], ta_all[ia]
    if permutations == 0:
        p = exact_p_value(cb, tb, ca, ta)
    else:
        _, p = stratified_permutation_test(cb, tb, ca, ta, permutations=permutations, seed=seed,
                                          progress=progress)
    rate_b, rate_a = cb / tb, ca / ta
    if difficulty is None:
        z = 1.0 - (cb + ca) / (tb + ta)
        source = "1 - pooled accuracy of both conditions"
    else:
        z = np.array([float(difficulty[i]) if i in difficulty else np.nan for i in ids])
        source = "normalized IRT difficulty z"
    edges = np.arange(bands + 1) / bands  # 0.6 as 3/5, not linspace's 0.6000000000000001
    placed = ~np.isnan(z)
    # Band b is [b/bands, (b+1)/bands), the last one closed at 1. A difficulty on an edge up to float noise
    # (1 - 0.8 = 0.19999999999999996) is on it, hence the tolerance; searchsorted on float edges put it in
    # the band below. Values outside [0, 1] (items beyond the original range) join the end bands.
    band_of = np.clip(np.floor(np.where(placed, z, 0.0) * bands + 1e-9), 0, bands - 1).astype(int)
    out = []
    for b in range(bands):
        sel = placed & (band_of == b)
        nb = int(sel.sum())
        out.append(BandGain(float(edges[b]), float(edges[b + 1]), nb,
                            float(rate_b[sel].mean()) if nb else float("nan"),
                            float(rate_a[sel].mean()) if nb else float("nan")))  # fmt: skip
    return DetectResult(
        model_before=mb, model_after=ma, n_items=len(ids),
        acc_before=float(rate_b.mean()), acc_after=float(rate_a.mean()),
        p_value=p, permutations=permutations, alpha=alpha, difficulty_source=source,
        bands=out, unplaced=int((~placed).sum()),
    )  # fmt: skip
