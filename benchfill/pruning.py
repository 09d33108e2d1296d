"""Calibration by pruning (Appendix D, Algorithm 1): keep k items whose measure matches a target.

The target is reached by greedy quantile matching: for t = 1..k, take the unused
item nearest to Q((t - 1/2) / k). With responses, the pruned benchmark's model
ranking is compared (Spearman, Kendall) with a reference ranking, next to the
average of random subsets of the same size, so that a user can tell whether the
better-matched measure also ranks models more like the reference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchfill.coverage import FIT_OR_Z, Target, check_k, check_spread, ddm, parse_target, z_of
from benchfill.errors import ConfigError, DataError
from benchfill.matrix import ResponseMatrix


def prune_to_target(z: Any, k: int, target: Target | str | None = None) -> np.ndarray:
    """Indices of the k items chosen by Algorithm 1, in the order of the target quantiles.

    Ties in distance go to the lowest index, so the result is deterministic.
    """
    z = np.asarray(z, dtype=float)
    if not 1 <= k <= z.size:
        raise ConfigError(f"k: must lie in 1..{z.size} (the number of items), got {k}")
    q = parse_target(target).grid(k)
    used = np.zeros(z.size, dtype=bool)
    chosen = np.empty(k, dtype=np.int64)
    for t in range(k):
        dist = np.where(used, np.inf, np.abs(z - q[t]))
        i = int(np.argmin(dist))
        chosen[t] = i
        used[i] = True
    return chosen


def model_scores(matrix: ResponseMatrix, items: np.ndarray | None = None) -> np.ndarray:
    """Each model's benchmark score: the mean over items of its success rate (untried pairs skipped);
    NaN for a model that tried none of ``items``."""
    rate = matrix.success_rate if items is None else matrix.success_rate[:, items]
    tried = ~np.isnan(rate)
    n = tried.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):  # nanmean would warn on a model with no pair
        return np.where(n > 0, np.where(tried, rate, 0.0).sum(axis=1) / np.maximum(n, 1), np.nan)


def read_reference(path: str | Path, models: tuple[str, ...]) -> np.ndarray:
    """Reference scores per model from JSON ``{model: score}`` or CSV/TSV lines ``model,score``."""
    from benchfill.data import read_reference_scores

    path = Path(path)
    scores = read_reference_scores(path)  # each line checked: a model twice, a boolean, a third column
    missing = [m for m in models if m not in scores]
    if missing:
        raise DataError(f"{path}: no reference score for model {missing[0]!r}")
    ref = np.array([scores[m] for m in models])
    bad = [m for m, v in zip(models, ref, strict=True) if not np.isfinite(v)]
    if bad:
        raise DataError(f"{path}: the score of model {bad[0]!r} is not a finite number")
    if np.ptp(ref) == 0:  # a rank correlation with a constant does not exist
        raise DataError(f"{path}: every model has the same score; there is no ranking to agree with")
    return ref


MIN_RANKED = 3  # with two models a rank correlation is +1 or -1 whatever the scores: no evidence


def _agreement(scores: np.ndarray, reference: np.ndarray) -> tuple[float, float, str | None]:
    """(Spearman, Kendall, None) over the models with a score, or (NaN, NaN, why) where the
    correlations are undefined: too few such models, or no spread on one side. Decided here, not
    left to scipy, which warns on stderr and returns NaN without a reason."""
    from scipy.stats import kendalltau, spearmanr

    has = ~np.isnan(scores)
    s, r = scores[has], reference[has]
    if s.size < MIN_RANKED:
        return np.nan, np.nan, f"{s.size} model(s) with responses, {MIN_RANKED} needed"
    if np.ptp(s) == 0 or np.ptp(r) == 0:
        return np.nan, np.nan, "every model scores the same" + (" on the kept items" if np.ptp(s) == 0 else
                                                          " in the reference")
    return float(spearmanr(s, r).statistic), float(kendalltau(s, r).statistic), None


@dataclass
class CalibrationResult:
    k: int
    n_items: int
    target: str
    selected: list[str]  # item ids kept, in the order of the target quantiles
    ddm_before: float
    ddm_after: float
    ddm_random: float | None = None  # mean over random subsets of size k
    ranking: dict[str, Any] | None = None  # spearman/kendall for full, calibrated, random; NaN where undefined
    seed: int = 0
    notes: list[str] = field(default_factory=list)  # one line each: what the ranking left out or could not do

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def calibrate(
    fit_or_z: Any,
    k: int,
    *,
    target: Target | str | None = None,
    item_ids: Any = None,
    matrix: ResponseMatrix | None = None,
    reference: str | Path | np.ndarray | None = None,
    n_random: int = 30,
    seed: int = 0,
) -> CalibrationResult:
    """Prune to k items matching ``target`` and report what it changed.

    ``fit_or_z`` is an ``IrtFit`` or normalized difficulties. With ``matrix``
    (the responses the difficulties came from, same item order) the model
    rankings are compared with ``reference``: a file of model scores, an array
    of scores in ``matrix.models`` order, or, when None, the full benchmark. Each ranking leaves out
    the models with no responses on its items; with fewer than three models there is no ranking
    (``ranking`` stays None). ``notes`` says, a line each, what was left out or undefined. ``n_random``
    random subsets of k items give the baseline (``ddm_random``, ``ranking["random"]``); 0 leaves it out (both
    None), which the CLI, printing it, does not offer.
    """
    k = check_k(k, at_least_one=False)  # its range, 1..n, is prune_to_target's to check
    # a negative count drew no subset and said nothing (as 0 does, on purpose); numpy refused a negative seed
    # with its own ValueError
    for arg, value in (("n_random", n_random), ("seed", seed)):
        if check_k(value, arg, at_least_one=False) < 0:
            raise ConfigError(f"{arg}: must be 0 or more, got {value}")
    if hasattr(fit_or_z, "z") and hasattr(fit_or_z, "item_ids"):
        # a scale with no spread (every item solved by every model) has no distribution to match: the CLI and
        # diagnose refused it, and the library reported a DDM that moved on floating-point noise
        check_spread(fit_or_z, matrix)
        z = np.asarray(fit_or_z.z, dtype=float)
        item_ids = fit_or_z.item_ids if item_ids is None else item_ids
    else:
        z = z_of(fit_or_z, "fit_or_z", FIT_OR_Z, vector=True)
    ids = [str(i) for i in (item_ids if item_ids is not None else range(z.size))]
    if len(ids) != z.size:  # (an IndexError deep in the selection otherwise; diagnose refuses it alike)
        raise DataError(f"item_ids: {len(ids)} item ids for {z.size} difficulties")
    tgt = parse_target(target)
    chosen = prune_to_target(z, k, tgt)
    rng = np.random.default_rng(seed)
    randoms = [rng.choice(z.size, size=k, replace=False) for _ in range(n_random)]
    result = CalibrationResult(
        k=k,
        n_items=z.size,
        target=tgt.describe(),
        selected=[ids[i] for i in chosen],
        ddm_before=ddm(z, tgt),
        ddm_after=ddm(z[chosen], tgt),
        ddm_random=float(np.mean([ddm(z[r], tgt) for r in randoms])) if randoms else None,
        seed=seed,
    )
    if matrix is None:
        if reference is not None:  # a ranking needs the models' responses; saying nothing would drop it
            raise ConfigError("reference: ranking agreement needs the responses (--responses or --benchmark)")
        return result
    source = matrix.source or "responses"
    if tuple(matrix.item_ids) != tuple(ids):
        raise DataError(f"{source}: items differ from the fitted items")
    if reference is None:
        ref, ref_name = model_scores(matrix), "full benchmark"
    elif isinstance(reference, (str, Path)):
        ref, ref_name = read_reference(reference, matrix.models), str(reference)
    else:
        ref, ref_name = np.asarray(reference, dtype=float), "given scores"
        if ref.shape != (matrix.n_models,) or not np.all(np.isfinite(ref)):
            raise ConfigError(f"reference: {ref.size} scores for {matrix.n_models} models; give one finite "
                              "score per model, in matrix.models order")
    if matrix.n_models < MIN_RANKED:  # the pruning stands on its own; only the ranking figure is skipped
        result.notes.append(f"{source}: rank agreement needs at least {MIN_RANKED} models, found "
                            f"{matrix.n_models}; not computed")
        return result
    full = _agreement(model_scores(matrix), ref)
    kept = model_scores(matrix, chosen)
    cal = _agreement(kept, ref)
    absent = [m for m, v in zip(matrix.models, kept, strict=True) if np.isnan(v)]
    if absent:
        result.notes.append(f"calibrated: {len(absent)} model(s) with no responses on the kept items are left out "
                            f"of its ranking: {', '.join(absent[:10])}{' ...' if len(absent) > 10 else ''}")
    for name, (_, _, why) in (("full", full), ("calibrated", cal)):
        if why:
            result.notes.append(f"{name}: rank agreement undefined ({why})")
    rnd = [_agreement(model_scores(matrix, r), ref) for r in randoms]
    defined = [a for a in rnd if a[2] is None]
    result.ranking = {
        "reference": ref_name,
        "full": {"spearman": full[0], "kendall": full[1]},
        "calibrated": {"spearman": cal[0], "kendall": cal[1]},
        "random": None if not randoms else {
            "spearman": float(np.mean([a[0] for a in defined])) if defined else np.nan,
            "kendall": float(np.mean([a[1] for a in defined])) if defined else np.nan,
            "n": n_random,
            "undefined": len(rnd) - len(defined),  # subsets that tie every model: left out of the means
        },
    }
    return result
