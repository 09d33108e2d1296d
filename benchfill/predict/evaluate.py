"""How well predicted difficulty recovers the fitted one (the paper's section 4).

Splits: K-fold (in distribution), leave-one-group-out over benchmarks (LOBO) or over a large
benchmark's categories (leave-one-category-out). Metrics per held-out fold: Spearman rho against z(beta)
and within-benchmark pairwise accuracy (eq. 2: the share of same-benchmark pairs ordered alike, ties in
either ordering counted as misses); mean and sd over folds. The response AUC (eq. 3) is here to show why
it misleads: a constant prediction still scores P(theta_a > theta_a') (eq. 4).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchfill.errors import ConfigError
from benchfill.predict.features import FeatureBlock
from benchfill.predict.models import DifficultyModel

SPLITS = ("kfold", "lobo", "category")


def _paired(pred, target) -> tuple[np.ndarray, np.ndarray]:
    """Predictions and targets as float arrays of one length (a longer one was silently cut before)."""
    pred, target = np.asarray(pred, float).ravel(), np.asarray(target, float).ravel()
    if pred.shape != target.shape:
        raise ValueError(f"pred has {pred.size} values, target {target.size}: they must pair item for item")
    return pred, target


def spearman(pred: np.ndarray, target: np.ndarray) -> float:
    from scipy.stats import spearmanr

    pred, target = _paired(pred, target)
    if len(pred) < 3 or np.ptp(pred) == 0 or np.ptp(target) == 0:
        return float("nan")
    return float(spearmanr(pred, target).statistic)


def pairwise_accuracy(pred: np.ndarray, target: np.ndarray, groups: Sequence[str] | None = None) -> float:
    """Eq. 2: (1/|P|) sum over same-group pairs of 1[(p_i - p_j)(q_i - q_j) > 0]."""
    pred, target = _paired(pred, target)
    g = np.asarray(groups) if groups is not None else np.zeros(len(pred))
    if g.shape != pred.shape:
        raise ValueError(f"groups: {g.size} labels for {pred.size} items")
    hits = pairs = 0
    for grp in np.unique(g):
        idx = np.flatnonzero(g == grp)
        p, q = pred[idx], target[idx]
        n = len(idx)
        for start in range(0, n, 512):  # rows in chunks: the full n x n sign matrix of 12k items is too big
            sl = slice(start, min(start + 512, n))
            prod = (p[sl, None] - p[None, :]) * (q[sl, None] - q[None, :])
            upper = np.arange(sl.start, sl.stop)[:, None] < np.arange(n)[None, :]
            hits += int(((prod > 0) & upper).sum())
        pairs += n * (n - 1) // 2
    return hits / pairs if pairs else float("nan")


def response_auc(ability: np.ndarray, difficulty: np.ndarray, correct: np.ndarray, trials: np.ndarray) -> float:
    """AUC of the IRT score theta_a - beta_t for telling successes from failures over observed trials.

    Mann-Whitney with counts as weights: P(score of a success > score of a failure), ties count 1/2.
    """
    score = np.asarray(ability, float)[:, None] - np.asarray(difficulty, float)[None, :]
    s = score.ravel()
    pos = np.asarray(correct, float).ravel()
    neg = (np.asarray(trials, float) - np.asarray(correct, float)).ravel()
    keep = (pos + neg) > 0
    s, pos, neg = s[keep], pos[keep], neg[keep]
    order = np.argsort(s, kind="mergesort")
    s, pos, neg = s[order], pos[order], neg[order]
    _, start, counts = np.unique(s, return_index=True, return_counts=True)
    pos_t = np.add.reduceat(pos, start)
    neg_t = np.add.reduceat(neg, start)
    neg_below = np.concatenate([[0.0], np.cumsum(neg_t)[:-1]])
    total = pos.sum() * neg.sum()
    return float((pos_t * (neg_below + 0.5 * neg_t)).sum() / total) if total else float("nan")


def make_splits(kind: str, n: int, *, groups: Sequence[Any] | None = None, folds: int = 10,
                seed: int = 0, min_test: int = 3) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, train rows, test rows) for each fold. ``min_test``: the fewest held-out items a K-fold fold
    may have (3 by default: ``spearman`` gives a fold of fewer no rank correlation, and a mean over the
    folds that have one would rest on a few of them; 1 where only the out-of-fold predictions are used)."""
    if kind == "kfold":
        most = n // min_test
        if most < 2:  # "need 2 <= K <= 1" said the same, in a form nobody could act on
            raise ConfigError(f"{n} items are too few for K-fold: it needs at least {2 * min_test} (two folds of "
                              f"{min_test} held-out items or more)")
        if folds < 2 or folds > most:
            raise ConfigError(f"--folds: need 2 <= K <= {most} for {n} items (each fold holds out at least "
                              f"{min_test}), got {folds}")
        perm = np.random.default_rng(seed).permutation(n)
        parts = np.array_split(perm, folds)
        return [(f"fold{k}", np.sort(np.concatenate(parts[:k] + parts[k + 1:])), np.sort(parts[k]))
                for k in range(folds)]
    if kind not in SPLITS:
        raise ConfigError(f"--split: unknown split {kind!r}; choose from {', '.join(SPLITS)}")
    if groups is None or any(g is None for g in groups):
        what = "benchmark" if kind == "lobo" else "category"
        raise ConfigError(f"--split {kind}: every item needs a {what} (an item has none)")
    g = np.asarray([str(x) for x in groups])
    names = sorted(set(g.tolist()))
    if len(names) < 2:
        raise ConfigError(f"--split {kind}: needs at least two groups, got {names}")
    return [(name, np.flatnonzero(g != name), np.flatnonzero(g == name)) for name in names]


def _mean_sd(values: np.ndarray) -> tuple[float, float]:
    """Mean and sd over the folds that have a figure; NaN, without numpy's warning, when none has one
    (every fold's predictions tied: texts whose features do not vary)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return (float(v.mean()), float(v.std())) if v.size else (float("nan"), float("nan"))


@dataclass
class CrossValidation:
    families: list[str]
    split: str
    fold_names: list[str]
    fold_rho: np.ndarray
    fold_pacc: np.ndarray
    oof: np.ndarray  # out-of-fold prediction of every item that was held out once
    pooled_rho: float = float("nan")
    pooled_pacc: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rho(self) -> tuple[float, float]:
        return _mean_sd(self.fold_rho)

    @property
    def pacc(self) -> tuple[float, float]:
        return _mean_sd(self.fold_pacc)

    def residual_sd(self, target: np.ndarray) -> float:
        ok = ~np.isnan(self.oof)
        return float(np.std(np.asarray(target)[ok] - self.oof[ok]))

    def summary(self) -> dict[str, Any]:
        return {"families": self.families, "split": self.split, "folds": len(self.fold_names),
                "rho_mean": self.rho[0], "rho_sd": self.rho[1], "pacc_mean": self.pacc[0],
                "pacc_sd": self.pacc[1], "pooled_rho": self.pooled_rho, "pooled_pacc": self.pooled_pacc,
                "per_fold": {n: {"rho": float(r), "pacc": float(p)}
                             for n, r, p in zip(self.fold_names, self.fold_rho, self.fold_pacc, strict=True)}}


def cross_validate(
    blocks: Sequence[FeatureBlock],
    target: np.ndarray,
    benchmark: Sequence[str],
    splits: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    make_model: Callable[[], DifficultyModel] = DifficultyModel,
    split_name: str = "kfold",
    progress: Callable[[str], None] | None = None,
) -> CrossValidation:
    """Fit on each fold's training rows, predict its held-out rows, score them against z(beta)."""
    target = np.asarray(target, float)
    bench = np.asarray(benchmark)
    oof = np.full(len(target), np.nan)
    rhos, paccs, names = [], [], []
    for k, (name, train, test) in enumerate(splits):
        model = make_model().fit([b.rows(train) for b in blocks], target[train])
        pred = model.predict([b.rows(test) for b in blocks])
        oof[test] = pred
        names.append(name)
        rhos.append(spearman(pred, target[test]))
        paccs.append(pairwise_accuracy(pred, target[test], bench[test]))
        if progress:
            progress(f"  {split_name} {k + 1}/{len(splits)} {name}: rho {rhos[-1]:.3f}")
    ok = ~np.isnan(oof)
    return CrossValidation(
        families=[b.family for b in blocks], split=split_name, fold_names=names, fold_rho=np.array(rhos),
        fold_pacc=np.array(paccs), oof=oof, pooled_rho=spearman(oof[ok], target[ok]),
        pooled_pacc=pairwise_accuracy(oof[ok], target[ok], bench[ok]),
    )


def auc_table(labelled, oof: np.ndarray | None = None) -> list[dict[str, Any]]:
    """Section 4.2 / Table 2 on each benchmark: oracle beta, a constant, and (given) out-of-fold predictions.

    Predictions of z are put back on the b scale (b = mean + sd * z) before the AUC, as a fitted model would.
    """
    rows = []
    for name, irt in labelled.fits.items():
        m = labelled.matrices[name]
        sel = np.array([b == name for b in labelled.benchmark])
        b = labelled.difficulty[sel]
        cands = {"oracle (fitted beta)": b, "constant (eq. 4: P(theta_a > theta_a'))": np.zeros_like(b)}
        if oof is not None and not np.any(np.isnan(oof[sel])):
            sc = labelled.scales[name]
            cands["predicted (out of fold)"] = sc["mean"] + sc["sd"] * oof[sel]
        for label, d in cands.items():
            rows.append({"benchmark": name, "predictor": label,
                         "auc": response_auc(irt.ability, d, m.correct, m.trials),
                         "rho": spearman(d, b), "pacc": pairwise_accuracy(d, b)})
    return rows

