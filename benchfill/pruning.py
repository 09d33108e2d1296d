"""Calibration by pruning (Appendix D, Algorithm 1): keep k items whose measure matches a target.

The target is reached by greedy quantile matching: for t = 1..k, take the unused
item nearest to Q((t - 1/2) / k). With responses, the pruned benchmark's model
ranking is compared (Spearman, Kendall) with a reference ranking, next to the
average of random subsets of the same size, so that a user can tell whether the
better-matched measure also ranks models more like the reference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchfill.coverage import Target, ddm, parse_target
from benchfill.errors import ConfigError, DataError
from benchfill.matrix import ResponseMatrix


def prune_to_target(z: Any, k: int, target: Target | str | None = None) -> np.ndarray:
    """Indices of the k items chosen by Algorithm 1, in the order of the target quantiles.

    Ties in distance go to the lowest index, so the result is deterministic.
    """
    z = np.asarray(z, dtype=float)
    if not 1 <= k <= z.size:
        raise ConfigError(f"size: k must lie in 1..{z.size} (the number of items), got {k}")
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
    """Each model's benchmark score: the mean over items of its success rate (untried pairs skipped)."""
    rate = matrix.success_rate if items is None else matrix.success_rate[:, items]
    with np.errstate(invalid="ignore"):
        return np.nanmean(rate, axis=1)


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


def _agreement(scores: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    from scipy.stats import kendalltau, spearmanr

    return float(spearmanr(scores, reference).statistic), float(kendalltau(scores, reference).statistic)


@dataclass
class CalibrationResult:
    k: int
    n_items: int
    target: str
    selected: list[str]  # item ids kept, in the order of the target quantiles
    ddm_before: float
    ddm_after: float
    ddm_random: float | None = None  # mean over random subsets of size k
    ranking: dict[str, Any] | None = None  # spearman/kendall for full, calibrated, random
    seed: int = 0

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
    of scores in ``matrix.models`` order, or, when None, the full benchmark.
    """
    if hasattr(fit_or_z, "z") and hasattr(fit_or_z, "item_ids"):
        z = np.asarray(fit_or_z.z, dtype=float)
        item_ids = fit_or_z.item_ids if item_ids is None else item_ids
    else:
        z = np.asarray(fit_or_z, dtype=float)
    ids = [str(i) for i in (item_ids if item_ids is not None else range(z.size))]
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
    if tuple(matrix.item_ids) != tuple(ids):
        raise DataError(f"{matrix.source or 'responses'}: items differ from the fitted items")
    if matrix.n_models < 3:
        raise DataError(f"{matrix.source or 'responses'}: rank agreement needs at least three models")
    if reference is None:
        ref, ref_name = model_scores(matrix), "full benchmark"
    elif isinstance(reference, (str, Path)):
        ref, ref_name = read_reference(reference, matrix.models), str(reference)
    else:
        ref, ref_name = np.asarray(reference, dtype=float), "given scores"
        if ref.shape != (matrix.n_models,) or not np.all(np.isfinite(ref)):
            raise ConfigError(f"reference: {ref.size} scores for {matrix.n_models} models; give one finite "
                              "score per model, in matrix.models order")
    full = _agreement(model_scores(matrix), ref)
    cal = _agreement(model_scores(matrix, chosen), ref)
    rnd = np.array([_agreement(model_scores(matrix, r), ref) for r in randoms]) if randoms else None
    result.ranking = {
        "reference": ref_name,
        "full": {"spearman": full[0], "kendall": full[1]},
        "calibrated": {"spearman": cal[0], "kendall": cal[1]},
        "random": None
        if rnd is None
        else {"spearman": float(np.nanmean(rnd[:, 0])), "kendall": float(np.nanmean(rnd[:, 1])), "n": n_random},
    }
    return result
