"""Item-level structural profiles along an ordered model axis (BSDProbe, sections 3.2-3.3).

Every item gets four numbers read from its correctness trajectory along the shared model axis:

- position x: where the isotonic fit crosses the midpoint of its rise (Q_0.50),
- width w: the distance between its 25% and 75% crossings (Q_0.75 - Q_0.25),
- validity v in [0, 1]: how well the transition is supported,
  v = gain * gamma * concentration (see docs/profiles.md),
- order consistency o: the Monte Carlo p-value of the monotone-vs-free likelihood ratio
  (benchfill.measure.order_test); o <= alpha flags the item for review.

Items whose fit does not rise (flat) get the paper's treatment: position from their mean
correctness through a reference function built from the rising items, width 1, and they are
left out of the position and width summaries. ``profile`` is the library entry point; the CLI
(``benchfill profile``) and other tools read its typed result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import betaln

from benchfill.errors import ConfigError, DataError
from benchfill.irt.fit import IrtFit
from benchfill.matrix import ResponseMatrix
from benchfill.measure.order_test import DEFAULT_DRAWS, MAX_DRAWS, calibration, lr_statistic
from benchfill.measure.trajectory import (
    ModelAxis,
    answer_entropy,
    crossings,
    isotonic_fit,
    match_answers,
    model_axis,
)

FLAT_TOLERANCE = 1e-9  # a fitted rise below this is no rise
TOP_SHARE = 0.25  # "the strongest models" whose answer concentration enters validity


@dataclass(frozen=True)
class ItemProfile:
    item_id: str
    position: float  # x; for a flat item the reference-function estimate
    width: float  # w; 1 for a flat item
    validity: float  # v in [0, 1]
    order_consistency: float  # o, Monte Carlo p-value (add-one corrected)
    statistic: float  # D
    flagged: bool  # o <= alpha
    flat: bool  # isotonic fit does not rise (gain 0)
    gain: float  # c~_n - c~_1
    gamma: float  # Pr(theta_n > theta_1 | k_1, k_n), uniform Beta priors
    concentration: float | None  # 1 - mean normalized entropy of the strongest models; None if unknown
    mean_correct: float  # a_q, mean of c_i over the models that tried the item
    correctness: tuple[float, ...]  # c_i along the axis (NaN where a model did not try the item)
    fitted: tuple[float, ...]  # isotonic fit along the axis (NaN likewise)
    trials: tuple[int, ...]
    entropy: tuple[float, ...] | None = None  # normalized entropy trajectory, when answers are known

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("correctness", "fitted", "entropy"):
            if d[key] is not None:
                d[key] = [None if math.isnan(v) else round(v, 6) for v in d[key]]
        for key in ("position", "width", "validity", "order_consistency", "statistic", "gain", "gamma",
                    "mean_correct", "concentration"):
            if isinstance(d[key], float):
                d[key] = round(d[key], 6)
        return d


@dataclass(frozen=True)
class BenchmarkProfile:
    axis: ModelAxis
    items: tuple[ItemProfile, ...]
    alpha: float
    draws: int
    seed: int
    source: str = ""
    unprofiled: tuple[str, ...] = ()  # items fewer than two models tried
    # items whose panel and trials cannot reach o <= alpha however reversed their answers (five models with
    # one trial each: a full reversal scores o 0.135), and the least o the most common such panel reaches
    powerless: int = 0
    least_o: float = float("nan")
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __getitem__(self, item_id: str) -> ItemProfile:
        if not self._index:
            self._index.update({p.item_id: i for i, p in enumerate(self.items)})
        return self.items[self._index[item_id]]

    @property
    def order_anomaly_rate(self) -> float:
        return float(np.mean([p.flagged for p in self.items])) if self.items else float("nan")

    def flagged(self) -> list[ItemProfile]:
        """Items for review, most anomalous first: smallest o, then largest D."""
        return sorted((p for p in self.items if p.flagged), key=lambda p: (p.order_consistency, -p.statistic))

    def ranked(self) -> list[ItemProfile]:
        """All items in the review order (flagged ones first)."""
        return sorted(self.items, key=lambda p: (p.order_consistency, -p.statistic))

    def summary(self, bins: int = 10) -> dict[str, Any]:
        rising = [p for p in self.items if not p.flat]
        x = np.array([p.position for p in rising])
        w = np.array([p.width for p in rising])
        v = np.array([p.validity for p in self.items])
        vr = np.array([p.validity for p in rising])
        edges = np.linspace(0.0, 1.0, bins + 1)
        out: dict[str, Any] = {
            "n_items": len(self.items),
            "n_models": self.axis.n,
            "unprofiled": len(self.unprofiled),
            "flat_share": 1.0 - len(rising) / len(self.items) if self.items else float("nan"),
            "order_anomaly_rate": self.order_anomaly_rate,
            "n_flagged": sum(p.flagged for p in self.items),
            "alpha": self.alpha,
            "powerless": self.powerless,
            "least_o": self.least_o,
            "position": _describe(x, edges),
            "width": _describe(w, edges),
            "validity": _describe(v, edges),
        }
        if vr.sum() > 0:  # validity-weighted transitions, only when the weight is positive (3.3)
            out["position_weighted_mean"] = float(np.average(x, weights=vr))
            out["width_weighted_mean"] = float(np.average(w, weights=vr))
        return out

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        flagged = self.flagged()
        return {
            "source": self.source,
            "axis": self.axis.to_dict(),
            "calibration": {"draws": self.draws, "seed": self.seed, "alpha": self.alpha},
            "summary": _round(self.summary()),
            "flagged": [p.to_dict() for p in (flagged if top is None else flagged[:top])],
            "items": [p.to_dict() for p in self.items],
            "unprofiled": list(self.unprofiled),
        }


def min_draws(alpha: float) -> int:
    """The fewest Monte Carlo draws whose smallest o, 1/(draws + 1), is at most ``alpha`` (19 for .05)."""
    b = max(math.ceil(1.0 / alpha) - 1, 1)
    while 1.0 / (b + 1.0) > alpha:  # float rounding of 1/alpha, either way
        b += 1
    while b > 1 and 1.0 / b <= alpha:
        b -= 1
    return b


def check_settings(alpha: Any, draws: Any, seed: Any = 0, name: Callable[[str], str] = str) -> None:
    """Refuse an order test no profile can run, naming the setting as ``name`` gives it (the CLI: its flag).
    An alpha outside (0, 1) flags every item or none; fewer than 19 draws cannot reach a p of .05, and more
    than MAX_DRAWS resolve p below 1e-4, finer than any alpha. Draws too few for alpha (1/(draws + 1) > alpha,
    so no o can reach it) are refused too, naming the fewest that resolve it."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ConfigError(f"{name('alpha')} must be in (0, 1), got {alpha!r}")
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or not 19 <= draws <= MAX_DRAWS:
        raise ConfigError(f"{name('draws')} must be a whole number in 19..{MAX_DRAWS}, got {draws!r}")
    # o is never below 1/(draws + 1): an alpha under it flags no item, which would read as "no anomaly"
    if 1.0 / (draws + 1.0) > alpha:
        if 1.0 / (MAX_DRAWS + 1.0) > alpha:
            raise ConfigError(f"{name('alpha')} {alpha!r}: no item can be flagged, as o is never below "
                              f"1/({MAX_DRAWS} + 1) even at the most {name('draws')}; give {name('alpha')} "
                              f"{1.0 / (MAX_DRAWS + 1.0):g} or more")
        raise ConfigError(f"{name('alpha')} {alpha!r} with {name('draws')} {draws}: no item can be flagged, as o is "
                          f"never below 1/({draws} + 1); give {name('draws')} {min_draws(alpha)} or more")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"{name('seed')} must be a non-negative whole number, got {seed!r}")


def profile(
    matrix: ResponseMatrix,
    *,
    fit: IrtFit | None = None,
    fit_source: str | Path | None = None,
    order: Sequence[str] | None = None,
    answers: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
    n_states: Mapping[str, int] | None = None,
    alpha: float = 0.05,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    cache_dir: str | Path | None | bool = None,
    progress: Callable[[str], None] | None = None,
) -> BenchmarkProfile:
    """Profile every item of a response matrix along its model axis.

    The axis is the models ordered by empirical performance, or by ``fit``'s abilities
    (``fit_source``: the fit's file, for messages), or as ``order`` gives them. ``answers`` maps
    (model, item_id) to counts of the answer states the responses gave; with it, entropy
    trajectories and answer concentration enter the profile, and ``n_states`` may give each item's
    number of answer states M (default: the number seen). Answers that match no (model, item) of
    the matrix, or outnumber a pair's trials, are refused (``match_answers``); pairs the matrix
    does not know are otherwise ignored. ``progress`` receives a line per order calibration (one
    per distinct trials vector). A matrix in which no item was tried by two models is refused.
    """
    check_settings(alpha, draws, seed)
    if answers:
        match_answers(answers, matrix)
    axis = model_axis(matrix, fit=fit, order=order, fit_source=fit_source)
    rows = [matrix.models.index(m) for m in axis.models]
    k_all = matrix.correct[rows].T.astype(np.int64)  # items x n, weakest model first
    t_all = matrix.trials[rows].T.astype(np.int64)
    n_items, n = k_all.shape
    pos = axis.positions

    fitted = np.full((n_items, n), np.nan)
    stat = np.full(n_items, np.nan)
    pval = np.full(n_items, np.nan)
    q = np.full((n_items, 3), np.nan)
    patterns, inverse = np.unique(t_all > 0, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    # the calibrations the loop will run: one per trials vector of an item two or more models tried
    n_vectors, done = len(np.unique(t_all[(t_all > 0).sum(axis=1) >= 2], axis=0)), 0
    powerless, powerless_biggest, least_o = 0, 0, float("nan")
    for g, present in enumerate(patterns):
        members = np.flatnonzero(inverse == g)
        if present.sum() < 2:
            continue
        cols = np.flatnonzero(present)
        k, t = k_all[np.ix_(members, cols)], t_all[np.ix_(members, cols)]
        f = isotonic_fit(k, t)
        fitted[np.ix_(members, cols)] = f
        q[members] = crossings(f, pos[cols], (0.25, 0.5, 0.75))
        d = lr_statistic(k, t, f)
        stat[members] = d
        # one calibration per trials vector (not just per set of models tried)
        tv, tinv = np.unique(t, axis=0, return_inverse=True)
        for j, tvec in enumerate(tv):
            sel = np.flatnonzero(tinv.ravel() == j)
            done += 1
            if progress is not None:
                progress(f"order calibration {done}/{n_vectors}: {len(tvec)} models, trials {_budget(tvec)}, "
                         f"{sel.size} items")
            cal = calibration(tvec, draws=draws, seed=seed, cache_dir=cache_dir)
            pval[members[sel]] = cal.p_value(d[sel])
            least = _least_o(tvec, cal)
            if least > alpha:
                powerless += sel.size
                if sel.size > powerless_biggest:
                    powerless_biggest, least_o = sel.size, least

    ok = np.isfinite(stat)
    if n_items and not ok.any():  # nothing to profile: refused rather than a profile of NaN rates
        raise DataError(f"{matrix.source or 'responses'}: no item was tried by two or more models")
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(t_all > 0, k_all / np.maximum(t_all, 1), np.nan)
    first = np.where(ok, np.argmax(t_all > 0, axis=1), 0)
    last = np.where(ok, n - 1 - np.argmax((t_all > 0)[:, ::-1], axis=1), 0)
    ar = np.arange(n_items)
    lo, hi = fitted[ar, first], fitted[ar, last]
    gain = np.where(ok, np.maximum(hi - lo, 0.0), np.nan)
    flat = ok & (gain <= FLAT_TOLERANCE)
    gain = np.where(flat, 0.0, gain)
    with _quiet():  # an item no model tried has no mean; it is listed as unprofiled
        mean_c = np.nanmean(np.where(ok[:, None], c, np.nan), axis=1) if n_items else np.zeros(0)
    gamma = endpoint_evidence(k_all[ar, first], t_all[ar, first], k_all[ar, last], t_all[ar, last])

    position, width = q[:, 1].copy(), q[:, 2] - q[:, 0]
    rising = ok & ~flat
    h = reference_function(mean_c[rising], position[rising])
    position[flat] = h(mean_c[flat])
    width[flat] = 1.0

    entropy, concentration = _entropy(axis, matrix.item_ids, answers, n_states) if answers else (None, None)
    conc = concentration if concentration is not None else np.ones(n_items)
    validity = np.where(flat, 0.0, gain * gamma * np.nan_to_num(conc, nan=1.0))

    items = []
    for i in np.flatnonzero(ok):
        items.append(ItemProfile(
            item_id=matrix.item_ids[i],
            position=float(position[i]), width=float(width[i]), validity=float(np.clip(validity[i], 0, 1)),
            order_consistency=float(pval[i]), statistic=float(stat[i]), flagged=bool(pval[i] <= alpha),
            flat=bool(flat[i]), gain=float(gain[i]), gamma=float(gamma[i]),
            concentration=None if concentration is None or np.isnan(concentration[i]) else float(concentration[i]),
            mean_correct=float(mean_c[i]),
            correctness=tuple(float(x) for x in c[i]), fitted=tuple(float(x) for x in fitted[i]),
            trials=tuple(int(x) for x in t_all[i]),
            entropy=None if entropy is None else tuple(float(x) for x in entropy[i]),
        ))
    unprofiled = tuple(matrix.item_ids[i] for i in np.flatnonzero(~ok))
    return BenchmarkProfile(axis, tuple(items), alpha, draws, seed, matrix.source, unprofiled, powerless, least_o)


def _least_o(tvec: np.ndarray, cal: Any) -> float:
    """The least o an item with these trials can score: its answers reversed, every trial of the weaker
    models right and of the stronger ones wrong, at the split that scores the largest D. Above alpha, the
    test cannot flag such an item at all: "no item flagged" is then no finding."""
    t = np.asarray(tvec, dtype=np.int64)
    steps = np.array([np.where(np.arange(t.size) < s, t, 0) for s in range(1, t.size)])
    return float(np.min(cal.p_value(lr_statistic(steps, np.broadcast_to(t, steps.shape)))))


def endpoint_evidence(k1: np.ndarray, t1: np.ndarray, kn: np.ndarray, tn: np.ndarray) -> np.ndarray:
    """gamma = Pr(theta_n > theta_1) for theta ~ Beta(1 + k, 1 + T - k), exactly.

    The closed form for integer Beta parameters (a sum over the strongest model's successes):
    Pr(X_B > X_A) = sum_{i < a_B} B(a_A + i, b_A + b_B) / ((b_B + i) B(1 + i, b_B) B(a_A, b_A)).
    """
    a_a, b_a = 1.0 + np.asarray(k1, float), 1.0 + np.asarray(t1, float) - np.asarray(k1, float)
    a_b, b_b = 1.0 + np.asarray(kn, float), 1.0 + np.asarray(tn, float) - np.asarray(kn, float)
    total = np.zeros(np.broadcast(a_a, a_b).shape)
    for i in range(int(np.max(a_b, initial=0))):
        term = np.exp(betaln(a_a + i, b_a + b_b) - np.log(b_b + i) - betaln(1.0 + i, b_b) - betaln(a_a, b_a))
        total += np.where(i < a_b, term, 0.0)
    return np.clip(total, 0.0, 1.0)


def reference_function(mean_correct: np.ndarray, position: np.ndarray):
    """h(a): the position a flat item with mean correctness a would have (Appendix B).

    Built from the rising items: a non-increasing isotonic fit of position on mean correctness
    (an easier item turns earlier), anchored at h(0) = 1 and h(1) = 0, read by linear
    interpolation and kept in [0, 1]. With no rising item it is h(a) = 1 - a. Items that share a
    mean correctness are pooled first (their mean position, weighted by their number in the fit),
    so h does not depend on the order of the rows.
    """
    from scipy.optimize import isotonic_regression

    a = np.concatenate([[0.0], np.asarray(mean_correct, float), [1.0]])
    x = np.concatenate([[1.0], np.asarray(position, float), [0.0]])
    ua, inv = np.unique(a, return_inverse=True)
    counts = np.bincount(inv).astype(float)
    ux = isotonic_regression(np.bincount(inv, weights=x) / counts, weights=counts, increasing=False).x
    return lambda v: np.clip(np.interp(np.asarray(v, float), ua, ux), 0.0, 1.0)


def _entropy(axis: ModelAxis, item_ids: Sequence[str], answers, n_states) -> tuple[np.ndarray, np.ndarray]:
    n_items, n = len(item_ids), axis.n
    ent = np.full((n_items, n), np.nan)
    col = {item: i for i, item in enumerate(item_ids)}
    seen: dict[str, set[str]] = {}
    for (_model, item), counts in answers.items():
        if item in col:
            seen.setdefault(item, set()).update(s for s, v in counts.items() if v > 0)
    row = {m: j for j, m in enumerate(axis.models)}
    for (model, item), counts in answers.items():
        if item in col and model in row:
            m_states = (n_states or {}).get(item, max(len(seen.get(item, ())), 2))
            ent[col[item], row[model]] = answer_entropy(counts, m_states)
    top = max(1, math.ceil(TOP_SHARE * n))
    with np.errstate(invalid="ignore"), _quiet():
        conc = 1.0 - np.nanmean(ent[:, -top:], axis=1)
    return ent, conc


class _quiet:
    """np.nanmean warns on all-NaN rows (items without answers); NaN is the right answer there."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def _budget(tvec: np.ndarray) -> str:
    lo, hi = int(tvec.min()), int(tvec.max())
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _describe(v: np.ndarray, edges: np.ndarray) -> dict[str, Any]:
    if v.size == 0:
        return {"n": 0}
    hist, _ = np.histogram(np.clip(v, 0.0, 1.0), bins=edges)
    return {"n": int(v.size), "mean": float(v.mean()), "median": float(np.median(v)),
            "q25": float(np.quantile(v, 0.25)), "q75": float(np.quantile(v, 0.75)),
            "histogram": {"edges": [round(e, 4) for e in edges.tolist()], "counts": hist.tolist()}}


def _round(obj: Any) -> Any:
    if isinstance(obj, float):
        return round(obj, 6)
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return obj
