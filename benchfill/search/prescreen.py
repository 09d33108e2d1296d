"""The pre-screen: skip the rollouts of a child whose text says it will land far outside its gap.

A difficulty predictor (``benchfill.predict``) is trained once per run on the benchmark's original
items, with their fitted difficulties on the search's normalized scale z. Before a judged-valid
child is annotated, its text is scored (about a millisecond); a child whose prediction interval
lies wholly outside the gap is not annotated: it keeps its verdict, gets the flag ``prescreened``
and a flag with its prediction (``predicted_z=0.812+-0.051``), is counted in the spend
(``Spend.prescreened``), and never enters the memory, the steering or the selection.

Why the originals' fit alone cannot decide: a regression trained on the originals predicts
E[z | text] for an item drawn like the originals, and children are not. A rewriter writes in its
own style (every simulated child gains a lead and a closing sentence, which the structural
features read as "harder"), and a child whose difficulty moved while its wording barely did keeps
its parent's prediction. Measured in the simulated world at signal 0.8: the originals' calibration
put children 0.3-0.4 z too high, and skipped 14% of the children that truly lay inside the gap.

So the interval comes from the children themselves. Each gap's first ``warmup`` round (1) is
annotated in full; from the next round on, a child's raw prediction p is mapped through the forward
regression of the gap's annotated children of earlier rounds, their z on their p (ordinary least
squares, refitted each round, since parents and asks move as the search goes), zhat = alpha + beta p.
Skipping depends on p alone, and selecting on the regressor leaves a regression of z on p unbiased,
so the children the screen let through calibrate it as well as a full sample would. The predictive sd is
s * sqrt(1 + 1/n + (p - pbar)^2 / Sxx), s the residual sd. s keeps the annotation noise, so it errs
wide: removing that noise by the annotator's stated se gave 0.12 where the error against the truth
was 0.14. A child is skipped when zhat +- k sd misses the gap, i.e.
|zhat - target| > (right - left) / 2 + k sd. Of the children so skipped, the share whose true z lies
inside the gap is at most Phi(-k) under the regression's normal errors (2.3% at k = 2);
``bench/bench_search.py`` counts them against the world's truth.

No signal, no skip: the screen is off for the run unless the predictor's out-of-fold predictions on
the originals rise with z at ``min_t`` (3) standard errors, and off in a gap unless its warm-up
children's slope beta is positive at ``GAP_MIN_T`` (2) standard errors (weaker evidence, since the
slope's uncertainty already widens every interval) with at least ``MIN_CHILDREN`` (8) children.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

K = 2.0  # interval half-width in predictive sds: at most Phi(-K) = 2.3% of skipped children lie inside the gap
MIN_T = 3.0  # a slope must be this many standard errors above zero, or the screen stays off
MIN_ITEMS = 20  # fewer labelled originals than this: no screen (the cross-validation would say nothing)
WARMUP = 1  # rounds of each gap annotated in full, whose children calibrate the screen
MIN_CHILDREN = 8  # annotated warm-up children a gap needs before its screen can skip anything
GAP_MIN_T = 2.0  # the gap's own slope: weaker evidence suffices, its uncertainty widens every interval


@dataclass(frozen=True)
class Line:
    """Least squares y = intercept + slope (x - xbar), with what a prediction interval needs."""

    intercept: float
    slope: float
    xbar: float
    sxx: float
    s: float  # residual sd (n - 2 degrees of freedom)
    n: int

    @property
    def se_slope(self) -> float:
        return self.s / math.sqrt(self.sxx) if self.sxx > 0 else math.inf

    @property
    def t(self) -> float:
        se = self.se_slope
        return self.slope / se if se > 0 else (math.inf if self.slope > 0 else 0.0)

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray) -> Line:
        x, y = np.asarray(x, float), np.asarray(y, float)
        xbar = float(x.mean())
        dx = x - xbar
        sxx = float(dx @ dx)
        slope = float(dx @ (y - y.mean()) / sxx) if sxx > 0 else 0.0
        resid = y - y.mean() - slope * dx
        s = float(np.sqrt(resid @ resid / max(len(x) - 2, 1)))
        return cls(float(y.mean()), slope, xbar, sxx, s, len(x))

    def predict(self, x: float) -> tuple[float, float]:
        """(yhat, its predictive sd for a new point: residual and fit uncertainty together)."""
        lever = 1 / self.n + ((x - self.xbar) ** 2 / self.sxx if self.sxx > 0 else 0.0)
        return self.intercept + self.slope * (x - self.xbar), self.s * math.sqrt(1 + lever)


@dataclass
class Screening:
    """What the screen said of one child."""

    item_id: str
    gap_index: int
    round: int
    predicted: float  # the predictor's raw z (trained on the originals)
    z: float | None  # the gap's calibrated prediction (None in the warm-up or without a usable fit)
    sd: float | None
    skipped: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PreScreen:
    """``predict`` maps a child's fields to the predictor's raw z; ``originals`` is its out-of-fold
    fit on the originals (None = switched off)."""

    predict: Callable[[dict[str, Any]], float]
    originals: Line | None
    k: float = K
    min_t: float = MIN_T
    warmup: int = WARMUP
    reason: str = ""  # why the screen is on or off, for the run's log
    log: list[Screening] = field(default_factory=list)
    _seen: dict[int, list[tuple[Any, float]]] = field(default_factory=dict, repr=False)  # gap -> (child, p)
    _fits: dict[tuple[int, int], Line | None] = field(default_factory=dict, repr=False)  # (gap, round) -> fit

    @property
    def active(self) -> bool:
        o = self.originals
        return o is not None and o.slope > 0 and o.t >= self.min_t

    def gap_fit(self, gap_index: int, rnd: int) -> Line | None:
        """The gap's forward calibration for round ``rnd``, on every annotated child of its earlier
        rounds (all of them annotated by then: rounds run one after another); None = no skips."""
        key = (gap_index, rnd)
        if key not in self._fits:
            pairs = [(p, c.annotation.z) for c, p in self._seen.get(gap_index, [])
                     if c.round < rnd and c.annotation is not None]
            fit = Line.fit(*map(np.array, zip(*pairs, strict=True))) if len(pairs) >= MIN_CHILDREN else None
            ok = fit is not None and fit.slope > 0 and fit.t >= GAP_MIN_T
            self._fits[key] = fit if ok else None
        return self._fits[key]

    def screen(self, child, gap_index: int, left: float, right: float) -> Screening | None:
        """Score one child and decide; None (no prediction made) when the screen is off for the run."""
        if not self.active:
            return None
        raw = float(self.predict(child.item))
        self._seen.setdefault(gap_index, []).append((child, raw))
        z = sd = None
        skipped = False
        fit = self.gap_fit(gap_index, child.round) if child.round > self.warmup else None
        if fit is not None:
            z, sd = fit.predict(raw)
            skipped = abs(z - (left + right) / 2) > (right - left) / 2 + self.k * sd
        s = Screening(child.item_id, gap_index, child.round, raw, z, sd, skipped)
        self.log.append(s)
        return s

    def skips(self, child, gap) -> bool:
        """The search's hook, between the judge and the annotation: True = do not annotate ``child``
        (flagged ``prescreened`` with its prediction, so it is recorded, never silently dropped)."""
        s = self.screen(child, gap.gap_index, gap.left, gap.right)
        if s is None or not s.skipped:
            return False
        child.flags += ["prescreened", f"predicted_z={s.z:.3f}+-{s.sd:.3f}"]
        return True

    def summary(self) -> dict[str, Any]:
        o = self.originals
        out: dict[str, Any] = {"active": self.active, "k": self.k, "warmup_rounds": self.warmup,
                               "reason": self.reason, "screened": len(self.log),
                               "skipped": sum(s.skipped for s in self.log),
                               "gaps_calibrated": sorted({g for (g, _), f in self._fits.items() if f is not None})}
        if o is not None:
            out.update({"originals_slope": o.slope, "originals_slope_t": o.t, "items": o.n})
        return out


def train_prescreen(
    items: dict[str, dict[str, Any]],
    z: dict[str, float],
    *,
    text_field: str | None = None,
    options_field: str | None = None,
    families: tuple[str, ...] | None = None,
    k: float = K,
    min_t: float = MIN_T,
    warmup: int = WARMUP,
    seed: int = 0,
) -> PreScreen:
    """Train the predictor on the benchmark's items and their fitted z (the search's scale); its
    out-of-fold predictions (K-fold inside ``benchfill.predict.train``) decide whether it is on."""
    from benchfill.predict import DEFAULT_FAMILIES, labelled_items, train

    ids = [i for i in items if i in z]
    if len(ids) < MIN_ITEMS:
        return PreScreen(lambda item: 0.0, None, k, min_t, warmup, f"off: {len(ids)} labelled items (< {MIN_ITEMS})")
    zs = np.array([z[i] for i in ids], dtype=float)
    labelled = labelled_items("benchmark", [items[i] for i in ids], zs, text_field=text_field,
                              options_field=options_field, b_min=0.0, b_max=1.0)
    pred, cv = train(labelled, families or DEFAULT_FAMILIES, embedder="hashing", seed=seed,
                     text_field=text_field, options_field=options_field)
    sc = labelled.scales["benchmark"]
    ok = ~np.isnan(cv.oof)
    line = Line.fit(zs[ok], sc["mean"] + sc["sd"] * cv.oof[ok])  # out-of-fold prediction against z

    def predict(item: dict[str, Any]) -> float:
        return float(pred.predict_item(item, "benchmark").axis)

    screen = PreScreen(predict, line, k, min_t, warmup)
    screen.reason = (f"on: out-of-fold predictions rise with z (slope {line.slope:.3f}, {line.t:.1f} se); "
                     f"each gap calibrates on its first {warmup} rounds" if screen.active else
                     f"off: no usable text signal (slope {line.slope:.3f}, {line.t:.1f} se; needs {min_t:g})")
    return screen
