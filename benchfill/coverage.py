"""Coverage of the difficulty axis: DDM, gaps, posterior uncertainty, uniform comparison.

Definitions follow the measure-over-difficulty paper (sec. 2, Appendix C.4, C.6):

* DDM is the 1-Wasserstein distance from the n normalized difficulties to the
  same-size quantile grid of the target, ``u_i = Q((i - 1/2) / n)``; for the
  uniform target ``u_i = (i - 1/2) / n`` and DDM = mean |z_(i) - u_i|.
* Gaps are the n + 1 spacings of the sorted difficulties with end points
  z_(0) = 0 and z_(n+1) = 1; the max gap is eq. (1).

This module imports only numpy, so the search loop and the CLI can use it cheaply;
scipy is imported only when a Beta target, or the chance of an item between two uncertain edges, is asked for.
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchfill.errors import ConfigError, DataError

log = logging.getLogger(__name__)

FIT_OR_Z = "an IrtFit or an array of normalized difficulties"  # what diagnose and calibrate take


@dataclass(frozen=True)
class Gap:
    left: float
    right: float
    width: float
    left_item: str | None  # None at the 0 end point
    right_item: str | None  # None at the 1 end point


@dataclass(frozen=True)
class Target:
    """A target distribution on [0, 1], known through its quantile function."""

    name: str = "uniform"
    params: tuple[float, ...] = ()
    # A file's values q_1 <= ... <= q_m, the target's quantiles at the levels (j - 1/2) / m (the levels of
    # the grid below, so a file written from grid(m) reads back as the same target).
    quantiles: np.ndarray | None = field(default=None, compare=False)

    def grid(self, n: int) -> np.ndarray:
        """The same-size reference grid Q((i - 1/2) / n), i = 1..n."""
        tau = (np.arange(1, n + 1) - 0.5) / n
        if self.name == "uniform":
            return tau
        if self.name == "beta":
            from scipy.stats import beta

            with np.errstate(all="ignore"):
                q = beta.ppf(tau, *self.params)
            if not np.all(np.isfinite(q)):  # scipy overflows on some huge parameters (parse_target tries a few)
                raise ConfigError(f"target {self.describe()}: its quantiles at {n} levels are not all finite "
                                  "numbers; give smaller Beta parameters")
            return q
        return self.quantile(tau)

    def quantile(self, tau: np.ndarray) -> np.ndarray:
        """Q(tau) of a file target: linear between its values at the levels (j - 1/2) / m and, beyond the
        outermost levels, continued along the end segments, kept within [0, 1]. Read as a sample instead
        (np.quantile), the uniform's own quantiles 0.1, 0.3, ..., 0.9 made a target on [0.1, 0.9] only."""
        q = np.asarray(self.quantiles, dtype=float)
        tau = np.asarray(tau, dtype=float)
        m = q.size
        if m == 1:  # one value: all the target's mass there
            return np.full(tau.shape, q[0])
        level = (np.arange(1, m + 1) - 0.5) / m
        out = np.interp(tau, level, q)
        lo, hi = tau < level[0], tau > level[-1]
        out[lo] = q[0] - (level[0] - tau[lo]) * (q[1] - q[0]) * m
        out[hi] = q[-1] + (tau[hi] - level[-1]) * (q[-1] - q[-2]) * m
        return np.clip(out, 0.0, 1.0)

    def describe(self) -> str:
        if self.name == "beta":
            return f"beta({self.params[0]:g},{self.params[1]:g})"
        return self.name


UNIFORM = Target()


def parse_target(spec: str | Path | Target | None) -> Target:
    """``uniform``, ``beta:A,B`` or a file of target quantiles: m numbers in [0, 1] (any whitespace/commas),
    sorted on reading and taken as the target's quantiles at the levels (i - 1/2) / m (``Target.quantile``)."""
    if spec is None or isinstance(spec, Target):
        return spec or UNIFORM
    spec = str(spec)  # a pathlib.Path of quantiles reads like its name
    if spec == "uniform":
        return UNIFORM
    if spec.startswith("beta:"):
        try:
            a, b = (float(x) for x in spec[5:].split(","))
        except ValueError:
            raise ConfigError(f"target {spec!r}: expected beta:A,B with two positive numbers") from None
        if not (a > 0 and b > 0):
            raise ConfigError(f"target {spec!r}: Beta parameters must be positive")
        if not (np.isfinite(a) and np.isfinite(b)):
            raise ConfigError(f"target {spec!r}: Beta parameters must be finite numbers")
        target = Target("beta", (a, b))
        # Where scipy's quantiles overflow (beta:1e308,1e308, beta:1e200,2) they are NaN at every level: one
        # small grid finds them before a fit, where DDM would come out nan
        try:
            target.grid(3)
        except ConfigError:
            raise ConfigError(f"target {spec!r}: Beta parameters too large to compute its quantiles; "
                              "give smaller ones") from None
        return target
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"target {spec!r}: not 'uniform', 'beta:A,B' or an existing file of quantiles")
    from benchfill.data import read_text

    values: list[float] = []
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        for tok in line.replace(",", " ").split():
            try:
                values.append(float(tok))
            except ValueError:
                raise DataError(f"{path}:{lineno}: not a number: {tok!r}") from None
    if not values:
        raise DataError(f"{path}: empty target quantile file")
    q = np.sort(np.asarray(values))
    if q[0] < 0 or q[-1] > 1 or not np.all(np.isfinite(q)):
        raise DataError(f"{path}: target quantiles must lie in [0, 1]")
    return Target(f"file:{path.name}", (), q)


# -- metrics on one vector of normalized difficulties ---------------------------------------------


def check_k(k: Any, arg: str = "k", *, at_least_one: bool = True) -> int:
    """``k`` as an int (of at least 1 unless the caller checks its range), for the public entry points: a
    string or a float would otherwise fail as a TypeError deep in a comparison or a slice. numpy's
    integers are ints here."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ConfigError(f"{arg}: expected an int, got {type(k).__name__} {k!r}")
    if at_least_one and k < 1:
        raise ConfigError(f"{arg} must be at least 1, got {k}")
    return int(k)


def z_of(values: Any, arg: str = "z", what: str = "an array of normalized difficulties",
         vector: bool = False) -> np.ndarray:
    """Normalized difficulties given to a public entry point as an array (anything numpy reads as numbers),
    refused in one line naming ``arg`` otherwise: numpy reads None as one NaN, "0.5" as 0.5 and fails on
    "abc" with a bare ValueError. ``vector``: one value per item, a flat array (a 2-D one was flattened into
    that many items without a word)."""
    why = f"{arg}: expected {what}, got {type(values).__name__}"
    if values is None or isinstance(values, (str, bytes)):
        raise ConfigError(why)
    try:
        out = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(why) from None
    if vector and out.ndim != 1:
        raise ConfigError(f"{arg}: expected {what}, one value per item, got an array of shape {out.shape}")
    return out


def _as_z(z: Any) -> np.ndarray:
    z = np.asarray(z, dtype=float).ravel()
    if z.size == 0:
        raise DataError("no items: coverage metrics need at least one difficulty")
    if not np.all(np.isfinite(z)):
        raise DataError("non-finite normalized difficulty")
    return z


def ddm(z: Any, target: Target | str | None = None) -> float:
    """W1 between the items' empirical measure and the target's same-size grid."""
    z = np.sort(_as_z(z))
    return float(np.mean(np.abs(z - parse_target(target).grid(z.size))))


def spacings(z: Any) -> np.ndarray:
    """The n + 1 gaps between sorted difficulties with end points 0 and 1.

    A point outside [0, 1] (a new item beyond the original range) widens the axis
    instead of producing a negative spacing.
    """
    pts = np.sort(np.concatenate(([0.0], _as_z(z), [1.0])))
    return np.diff(pts)


def max_gap(z: Any) -> float:
    return float(spacings(z).max())


def top_k_gap_sum(z: Any, k: int = 5) -> float:
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}")
    s = np.sort(spacings(z))[::-1]
    return float(s[:k].sum())


def top_k_with_one(z: Any, new_z: Any, k: int = 5) -> np.ndarray:
    """The top-k gap sum with one more item at each of ``new_z`` (vectorized over them), as
    ``top_k_gap_sum(np.append(z, x), k)`` gives it for each x: the new item splits the spacing it
    falls in, or, beyond an end of the axis, adds the spacing out to it."""
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}")
    pts = np.sort(np.concatenate(([0.0], _as_z(z), [1.0])))
    sp = np.diff(pts)
    top = np.argsort(-sp, kind="stable")[: k + 1]  # one spare: the spacing split may be among them
    x = np.atleast_1d(np.asarray(new_z, dtype=float))
    i = np.clip(np.searchsorted(pts, x, side="right") - 1, 0, sp.size - 1)
    inside = (x >= pts[0]) & (x <= pts[-1])
    keep = np.where(inside[:, None] & (top[None, :] == i[:, None]), -np.inf, sp[top][None, :])
    first = np.where(inside, x - pts[i], np.where(x < pts[0], pts[0] - x, x - pts[-1]))
    second = np.where(inside, pts[i + 1] - x, -np.inf)
    cand = np.concatenate([keep, first[:, None], second[:, None]], axis=1)
    best = -np.sort(-cand, axis=1)[:, :k]
    return np.where(np.isfinite(best), best, 0.0).sum(axis=1)


# The expectation over a normal is taken on a grid of +-8 sd: the top-k sum is piecewise linear in
# the new item's z, with kinks where a piece overtakes another spacing, which Gauss-Hermite nodes
# integrate poorly (a 21-node rule was 23% off on a case worked by hand); 1,601 points are not.
_GRID = np.linspace(-8.0, 8.0, 1601)
_WEIGHTS = np.exp(-0.5 * _GRID**2)
_WEIGHTS /= _WEIGHTS.sum()


def expected_top_k_change(z: Any, new_z: float, se: float, k: int = 5,
                          only_in: tuple[float, float] | None = None) -> float:
    """E[top-k gap sum with one more item] - top-k gap sum now, the new item's true z ~ N(new_z, se^2).

    An item inside [0, 1] only splits a gap, so the change is never positive there; only the chance
    that the item truly lies beyond the easiest or hardest item, where it opens a new gap, can make
    it positive. se 0 (or nan): the item exactly at ``new_z``. ``only_in`` (left, right): a landing on
    [0, 1] outside that gap counts as no change (the item was made for that gap alone)."""
    now = top_k_gap_sum(z, k)
    x = new_z + se * _GRID if se > 0 else np.array([new_z], dtype=float)
    sums = top_k_with_one(z, x, k)
    if only_in is not None:
        sums = np.where(((x <= only_in[0]) | (x >= only_in[1])) & (x >= 0.0) & (x <= 1.0), now, sums)
    return float((np.dot(_WEIGHTS, sums) if se > 0 else sums[0]) - now)


def normal_cdf(x: float) -> float:
    """The standard normal's cdf, by math alone (no scipy on the search's path)."""
    return 0.5 * math.erfc(-x / math.sqrt(2))


def inside_chance(z: float, se: float, left: float, right: float, left_se: float = 0.0,
                  right_se: float = 0.0) -> float:
    """P(L < x < R) for an item truly at x ~ N(z, se^2) between edges truly at L ~ N(left, left_se^2) and
    R ~ N(right, right_se^2), the three independent. With exact edges it is the chance the item lies inside
    the gap as fitted; with the edge items' own fit error, the chance it lies between those two items. An se
    of 0 is exact.

    Over the item's place x: the integral of its density times P(L < x) P(R > x), by quadrature with the
    edges as break points (a step where an edge is exact or nearly so); with exact edges, and with an exact
    item, closed forms."""
    if left_se <= 0 and right_se <= 0:  # (math's erfc, not scipy: the search asks this of every chosen child)
        if se <= 0:
            return float(left < z < right)
        return max(normal_cdf((right - z) / se) - normal_cdf((left - z) / se), 0.0)
    from scipy.integrate import quad
    from scipy.special import ndtr

    def below(edge: float, edge_se: float, x: float) -> float:  # P(the edge lies below x)
        return float(ndtr((x - edge) / edge_se)) if edge_se > 0 else float(x > edge)

    if se <= 1e-9 * max(left_se, right_se):  # (the item's spread below float resolution beside the edges')
        # an exact edge is still met by the item's own spread (an item on it is half inside)
        def side(edge: float, edge_se: float) -> float:  # P(the edge lies below the item)
            spread = edge_se if edge_se > 0 else se
            return float(ndtr((z - edge) / spread)) if spread > 0 else float(z > edge)

        return side(left, left_se) * (1.0 - side(right, right_se))
    # In the item's standard units u = (x - z) / se, over +-12 (beyond, the density is below 1e-31), with break
    # points where the edges' own spreads begin, centre and end: an item se far wider than the edges' leaves
    # their steps to a sliver of the range, which quad's wide subintervals otherwise step over.
    lo, hi = -12.0, 12.0
    if left_se <= 0:
        lo = max(lo, (left - z) / se)
    if right_se <= 0:
        hi = min(hi, (right - z) / se)
    if lo >= hi:
        return 0.0

    def density(u: float) -> float:
        x = z + se * u
        return math.exp(-0.5 * u * u) / math.sqrt(2 * math.pi) * below(left, left_se, x) \
            * (1.0 - below(right, right_se, x))

    points: list[float] = []
    for p in sorted(p for edge, edge_se in ((left, left_se), (right, right_se)) for k in (-8, -3, 0, 3, 8)
                    if lo < (p := (edge + k * edge_se - z) / se) < hi):
        if not points or p - points[-1] > 1e-9:  # (two break points an ulp apart are one: quad warned of them)
            points.append(p)
    import warnings

    from scipy.integrate import IntegrationWarning

    with warnings.catch_warnings():  # a run's output is no place for quad's notes; the value is checked by tests
        warnings.simplefilter("ignore", IntegrationWarning)
        value, _ = quad(density, lo, hi, points=points or None, epsabs=1e-13, epsrel=1e-10, limit=400)
    return min(max(value, 0.0), 1.0)


def gaps(z: Any, *, k: int = 5, item_ids: Any = None) -> list[Gap]:
    """The k widest gaps, widest first (ties: leftmost first), with the items bounding them."""
    k = check_k(k)
    z = _as_z(z_of(z, vector=True))
    ids = [None] * z.size if item_ids is None else [str(i) for i in item_ids]
    if len(ids) != z.size:
        raise DataError(f"{len(ids)} item ids for {z.size} difficulties")
    order = np.argsort(z, kind="stable")
    pts = np.concatenate(([0.0], z[order], [1.0]))
    names: list[str | None] = [None] + [ids[i] for i in order] + [None]
    # Out-of-range items sort outside the end points; keep the axis monotone.
    axis = np.argsort(pts, kind="stable")
    pts, names = pts[axis], [names[i] for i in axis]
    widths = np.diff(pts)
    # Widths equal up to float noise (0.4 against 0.39999999999999997) are ties, broken leftmost first.
    rank = sorted(range(widths.size), key=lambda j: (-round(float(widths[j]), 12), pts[j]))
    return [
        Gap(float(pts[j]), float(pts[j + 1]), float(widths[j]), names[j], names[j + 1]) for j in rank[:k]
    ]


# -- comparison with n uniform points -------------------------------------------------------------


def expected_uniform_max_gap(n: int) -> float:
    """E[max spacing] of n iid U(0,1) points with end points 0 and 1: H_{n+1} / (n + 1) (exact).

    A benchmark of n items min-max normalized compares with n - 2 such points (its extremes are the ends)."""
    if n < 0:
        raise ConfigError(f"n must be 0 or more, got {n}")
    return float(np.sum(1.0 / np.arange(1, n + 2)) / (n + 1))


def uniform_max_gap_cdf(x: Any, n: int) -> np.ndarray:
    """P(max spacing of n iid U(0,1) points with end points 0 and 1 <= x), exact, for each x.

    The inclusion-exclusion sum over the n + 1 spacings (Whitworth; Feller, vol. II, I.9):
    F(x) = sum_j (-1)^j C(n+1, j) (1 - j x)_+^n. Its terms alternate and can exceed 1 by far where F is
    tiny; there the sum is taken in decimal arithmetic with the digits the largest term needs. (A
    Monte-Carlo of 2,000 sets, used before, put humaneval's P at 0.931 against the exact 0.945.)
    """
    if n < 0:
        raise ConfigError(f"n must be 0 or more, got {n}")
    xs = np.atleast_1d(np.asarray(x, dtype=float))
    j_all = np.arange(n + 2)
    # log C(n+1, j) for j = 0..n+1, by cumulative sums (no scipy here)
    log_c = np.concatenate(([0.0], np.cumsum(np.log(n + 1 - j_all[:-1]) - np.log(j_all[:-1] + 1))))
    out = np.empty(xs.size)
    for i, v in enumerate(xs):
        if v >= 1.0:
            out[i] = 1.0
            continue
        if v * (n + 1) <= 1.0:  # the largest of n + 1 spacings summing to 1 is at least 1 / (n + 1)
            out[i] = 0.0
            continue
        j = j_all[j_all * v < 1.0]
        log_t = log_c[: j.size] + n * np.log1p(-j * v)
        top = float(log_t.max()) / np.log(10.0)
        if top <= 3.0:  # float's cancellation error stays below 1e-12
            out[i] = float(np.sum(np.where(j % 2 == 1, -1.0, 1.0) * np.exp(log_t)))
        else:
            out[i] = _cdf_decimal(v, n, j.size, digits=int(top) + 25)
    return np.clip(out, 0.0, 1.0)


def _cdf_decimal(x: float, n: int, terms: int, digits: int) -> float:
    from decimal import Decimal, localcontext

    with localcontext() as ctx:
        ctx.prec = digits
        xd, total, c = Decimal(x), Decimal(0), 1
        for j in range(terms):
            term = c * (1 - j * xd) ** n
            total += -term if j % 2 else term
            c = c * (n + 1 - j) // (j + 1)
        return float(total)


def prob_max_gap_exceeds_uniform(observed: Any, n: int) -> float:
    """P(observed max gap > max gap of n uniform points), exact, averaged over observed values (draws)."""
    return float(np.mean(uniform_max_gap_cdf(observed, n)))


# -- the report ---------------------------------------------------------------------------------


@dataclass
class CoverageReport:
    n_items: int
    n_models: int | None
    ddm: float
    max_gap: float
    top_k_sum: float
    k: int
    gaps: list[Gap]
    target: str
    uniform: dict[str, Any]
    posterior: dict[str, Any] | None = None
    out_of_range: int = 0
    seed: int = 0
    notes: dict[str, Any] = field(default_factory=dict)  # extra facts from the caller (extreme items...)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        # rank 1 the widest: the table's "#", and what the notes' gap lists (narrower_than_confirmation,
        # beyond_models) name, where a list index would start at 0
        d["gaps"] = [{"rank": r, **asdict(g)} for r, g in enumerate(self.gaps, start=1)]
        return d


def _summary(x: np.ndarray) -> dict[str, float]:
    return {
        "mean": float(np.mean(x)),
        "sd": float(np.std(x, ddof=1)) if x.size > 1 else 0.0,
        "q05": float(np.quantile(x, 0.05)),
        "q95": float(np.quantile(x, 0.95)),
        "n_draws": int(x.size),
    }


def check_spread(fit: Any, matrix: Any = None, fit_source: str | None = None) -> None:
    """Refuse a scale on which coverage gaps are undefined: a matrix whose items all have the same
    responses from every model (every model solves every item, say), or a fit whose difficulties
    are all equal. Their normalized difficulties are floating-point noise, so would be their gaps.
    ``fit_source``: the file a saved fit came from, named in errors about its difficulties."""
    source = getattr(matrix, "source", None) or fit_source or "the fit"
    n = len(getattr(fit, "item_ids", ()) or ())
    if n == 1:  # one item sits alone on the axis: there is no spacing between items to speak of
        raise DataError(f"{source}: one item; coverage gaps need at least three")
    if n == 2:  # min-max normalized, two items sit at 0 and 1 whatever their difficulties: every figure a constant
        raise DataError(f"{source}: two items, which the min-max scale puts at 0 and 1 whatever their "
                        "difficulties; coverage gaps need at least three")
    if matrix is not None and matrix.n_items > 1:
        rate = matrix.correct / np.where(matrix.trials > 0, matrix.trials, 1)
        columns = np.vstack([rate, matrix.trials > 0, np.broadcast_to(matrix.chance, rate.shape[1:])])
        if np.all(columns == columns[:, :1]):
            solved = "solved by every model" if np.all(rate[matrix.trials > 0] == 1) else "answered alike"
            raise DataError(
                f"{source}: all {matrix.n_items} items are {solved}, so they share one difficulty and "
                "coverage gaps are undefined; add models or items that tell them apart"
            )
    source = fit_source or source  # a saved fit's difficulties are the file's, not the responses'
    b = np.asarray(fit.difficulty, dtype=float)
    if not np.all(np.isfinite(b)):
        i = int(np.flatnonzero(~np.isfinite(b))[0])
        ids = getattr(fit, "item_ids", None)
        name = f"item {ids[i]!r}" if ids is not None and i < len(ids) else f"difficulty {i}"
        raise DataError(f"{source}: {name} has a difficulty that is not a finite number ({b[i]})")
    if b.size > 1 and np.ptp(b) <= 1e-6 * max(1.0, float(np.max(np.abs(b)))):
        raise DataError(f"{source}: all {b.size} fitted difficulties are equal, so coverage gaps are undefined")


def _reach_the_ends(rows: np.ndarray) -> bool:
    """Is every row (a set of z) min-max normalized, its least item on 0 and its greatest on 1?"""
    return rows.shape[1] >= 2 and bool(np.all(np.abs(rows.min(axis=1)) < 1e-9)
                                       and np.all(np.abs(rows.max(axis=1) - 1.0) < 1e-9))


def diagnose(
    fit_or_z: Any,
    *,
    k: int | None = None,
    target: Target | str | None = None,
    item_ids: Any = None,
    draws: np.ndarray | None = None,
    seed: int = 0,
) -> CoverageReport:
    """Coverage diagnostics of one benchmark.

    ``fit_or_z`` is an ``IrtFit`` (its ``z``, item ids and, for NUTS, its
    per-draw normalized difficulties are used) or an array of normalized
    difficulties. ``draws`` (shape (n_draws, n_items)) overrides the fit's.
    ``k``: how many of the largest gaps to sum and list; by default 5, or all n + 1 when there are fewer.
    """
    if k is not None:
        k = check_k(k)
    n_models = None
    if hasattr(fit_or_z, "z") and hasattr(fit_or_z, "item_ids"):
        check_spread(fit_or_z)
        z = np.asarray(fit_or_z.z, dtype=float)
        item_ids = fit_or_z.item_ids if item_ids is None else item_ids
        draws = fit_or_z.z_draws if draws is None else draws
        n_models = int(fit_or_z.n_models)
    else:
        z = _as_z(z_of(fit_or_z, "fit_or_z", FIT_OR_Z, vector=True))
    tgt = parse_target(target)
    n = z.size
    # n items bound n + 1 gaps: a larger k would report the whole axis (a sum of 1) as the top-k sum.
    # Refused as a run refuses --gaps beyond them; the default takes what there is.
    if k is None:
        k = min(5, n + 1)
    elif k > n + 1:
        raise ConfigError(f"k: {k} gaps asked for, but {n} items bound only {n + 1}")
    g = max_gap(z)
    # The like-for-like baseline: a fit's z are min-max normalized, so the easiest and hardest items sit
    # on 0 and 1 and only the n - 2 others fall freely; n uniform points normalized the same way are
    # n - 2 free uniforms between fixed ends. Against n free points (n + 1 spacings, both ends open) the
    # baseline's max gap came out too small: P(observed > uniform) averaged 0.63 over uniform
    # benchmarks of 10 items, where it should be 0.5 (tests/test_coverage.py).
    normalized = _reach_the_ends(z[None, :])
    m = n - 2 if normalized else n
    expected = expected_uniform_max_gap(m)
    posterior = None
    if draws is not None:
        draws = np.asarray(draws, dtype=float)
        if draws.ndim != 2 or draws.shape[1] != n:
            raise DataError(f"posterior draws have shape {draws.shape}, expected (n_draws, {n})")
        d_ddm = np.array([ddm(row, tgt) for row in draws])
        d_gap = np.array([max_gap(row) for row in draws])
        posterior = {"ddm": _summary(d_ddm), "max_gap": _summary(d_gap)}
        # a fit's draws are each normalized by their own min and max (Appendix C.6): the same baseline
        normalized = _reach_the_ends(draws)
        m = n - 2 if normalized else n
        expected = expected_uniform_max_gap(m)
        p_exceed = prob_max_gap_exceeds_uniform(d_gap, m)
        # Over the draws, as the probability is: the posterior mean of the max gap, not the max gap of the
        # posterior-mean z (the headline figure, which averaging narrows); "ratio_of" says which it is.
        observed, ratio_of = float(np.mean(d_gap)), "posterior mean max gap"
    else:
        p_exceed = prob_max_gap_exceeds_uniform(g, m)
        observed, ratio_of = g, "max gap"
    how = "min-max normalized as the items are" if normalized else "between fixed ends 0 and 1"
    uniform = {
        "expected_max_gap": expected,
        "expected_method": f"exact: H_(m+1)/(m+1), m = {m} free points",
        "baseline": f"{n} uniform points, {how}",
        "free_points": m,
        "p_observed_exceeds": p_exceed,
        "p_method": "exact" + (", averaged over posterior draws" if draws is not None else ""),
        "ratio": observed / expected,
        "ratio_of": ratio_of,
        "observed_max_gap": observed,
    }
    report = CoverageReport(
        n_items=n,
        n_models=n_models,
        ddm=ddm(z, tgt),
        max_gap=g,
        top_k_sum=top_k_gap_sum(z, k),
        k=k,
        gaps=gaps(z, k=k, item_ids=item_ids),
        target=tgt.describe(),
        uniform=uniform,
        posterior=posterior,
        out_of_range=int(np.sum((z < 0) | (z > 1))),
        seed=seed,
    )
    if hasattr(fit_or_z, "difficulty") and hasattr(fit_or_z, "ability"):
        report.notes.update(fit_notes(fit_or_z, report))
    elif report.out_of_range > n / 2:  # b for z (fit.difficulty beside fit.z) gave a DDM of 1.26, unremarked
        log.warning("diagnose: %d of the %d values lie outside [0, 1]; it takes normalized difficulties z "
                    "(fit.z, or fit.normalize(b)), not difficulties on the logit scale", report.out_of_range, n)
    return report


WIDE = 1.25  # fitted difficulty sd past which diagnose says the prior draws the ends in (bench_gap_bias.py)
CONFIRM_SE = 0.02  # a run's default confirmation (RunOptions.confirm_se; tests/test_coverage.py pins they agree)


def resolution(fit: Any, n: int) -> dict[str, Any] | None:
    """How finely a fit tells its items apart, where more than a fifth of them tie: a complete matrix of M
    models x T trials scores an item in at most M x T + 1 ways, so items share a difficulty, and ties (with
    the error of each z) read as unevenness: on matrices whose true difficulties were evenly spread, the DDM
    and the max gap came out up to several times the truth, and P(observed > uniform), which takes each z as
    exact, passed 0.95 in most draws where the true z's did in 0 to 10% (``bench/bench_gap_bias.py --shape
    uniform``). The prior's pull at the ends (``wide_spread``) works the other way, on the end gaps. (The
    fit's standard errors are not used: each holds the location all difficulties and abilities share,
    which min-max normalization takes out, so they overstate how far an item's z can move.)"""
    if n < 3:
        return None
    z = np.asarray(fit.z, dtype=float)
    levels = int(np.unique(np.round(z[np.isfinite(z)], 9)).size)
    if levels >= 0.8 * n:
        return None
    return {"levels": levels, "ties": n - levels,
            "said": (f"the fit places these {n} items on only {levels} distinct difficulties (M models x T trials "
                     "score an item in at most M x T + 1 ways). Ties and each z's error read as unevenness: of "
                     "evenly spread items they can make the DDM and the largest gaps twice the truth or more (a "
                     "narrow true gap can hide among them), and P(observed > uniform), which takes each z as "
                     "exact, 1.000; more models or more trials per model narrow it (bench/bench_gap_bias.py "
                     "--shape uniform)")}


def fit_notes(fit: Any, report: CoverageReport) -> dict[str, Any]:
    """What a fit's figures cannot see, as the report's notes (the CLI prints them; a library caller reads them):

    - ``resolution`` where more than a fifth of the items tie, which reads as unevenness;
    - ``difficulty_sd``, and ``wide_spread`` where it passes ``WIDE`` under the N(0, 1) prior, which then draws
      the least-measured items at the ends in, so the gap figures are likely small (a hierarchical fit's
      estimated prior, ``difficulty_prior``, in its place);
    - ``narrower_than_confirmation``: the gaps (by rank) whose half-width is below a run's default
      confirmation se, which a run could fill only by chance;
    - ``beyond_models``: the gaps whose midpoint lies outside the span of the fit's models' abilities, where
      a run's probes would all sit on one side of an item placed there."""
    sd = round(float(np.std(np.asarray(fit.difficulty, dtype=float))), 4)
    notes: dict[str, Any] = {"difficulty_sd": sd}
    said = getattr(fit, "diagnostics", None) or {}
    if said.get("prior") == "hierarchical":  # the prior's spread is the items' own: nothing drawn in past it
        notes["difficulty_prior"] = {"mean": said.get("difficulty_prior_mean"), "sd": said.get("difficulty_prior_sd")}
    elif sd > WIDE:
        notes["wide_spread"] = (f"the difficulties spread wider (sd {sd:.2f}) than their N(0, 1) prior, which draws "
                                "the least-measured items at the ends in toward the middle: these gap figures are "
                                "likely small; a fit under the hierarchical prior (prior='hierarchical') estimates "
                                "the spread instead")
    res = resolution(fit, report.n_items)
    if res is not None:
        notes["resolution"] = res
    # Gaps of width 0 are not counted: nothing fits in them (the end gaps 0 -> easiest and hardest -> 1
    # that min-max normalization always makes, and items tied in difficulty).
    notes["narrower_than_confirmation"] = {
        "confirm_se": CONFIRM_SE,
        "gaps": [i for i, g in enumerate(report.gaps, start=1) if 1e-12 < g.width and g.width / 2 < CONFIRM_SE]}
    ability_z = fit.normalize(np.asarray(fit.ability, dtype=float))
    if ability_z.size:
        lo, hi = float(ability_z.min()), float(ability_z.max())
        notes["beyond_models"] = {
            "ability_z": [lo, hi],
            "gaps": [i for i, g in enumerate(report.gaps, start=1)
                     if 1e-12 < g.width and not lo <= (g.left + g.right) / 2 <= hi]}
    return notes
