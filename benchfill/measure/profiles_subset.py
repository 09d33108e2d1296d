"""Profile-guided subset selection and its evaluation (BSDProbe, section 4.4).

Selection: drop the items the order screen flags, stratify the rest by boundary position
(one stratum per interval between adjacent models on the axis, so that every adjacent pair of
models has transitions between them), give the strata equal shares of the subset, and sample
within a stratum without replacement with weights (1 - w) v: sharp, well-supported transitions
first. Evaluation: the normalized discrimination ratio

    NDR(S) = sum_i [s_{i+1}(S) - s_i(S)]_+ / sum_i |s_{i+1}(Q) - s_i(Q)|

over adjacent models of the reference axis (s = mean correctness, Q the full benchmark), and
Kendall's tau-b between the models' scores on S and on Q; random subsets of the same size are
the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchfill.coverage import check_k
from benchfill.errors import ConfigError, DataError
from benchfill.matrix import ResponseMatrix
from benchfill.measure.profiles import BenchmarkProfile
from benchfill.pruning import MIN_RANKED


def select_subset(bp: BenchmarkProfile, size: int, *, seed: int = 0) -> list[str]:
    """``size`` item ids chosen by position stratification with weights (1 - w) v after screening."""
    items = list(bp.items)
    size = _check_size(size, len(items))
    rng = np.random.default_rng(seed)
    n_strata = max(1, bp.axis.n - 1)
    weight = np.array([0.0 if p.flagged or p.flat else max(0.0, (1.0 - p.width) * p.validity) for p in items])
    stratum = np.minimum((np.clip([p.position for p in items], 0, 1) * n_strata).astype(int), n_strata - 1)
    pools = [np.flatnonzero((stratum == s) & (weight > 0)) for s in range(n_strata)]
    quota = _allocate(size, [len(p) for p in pools])
    chosen: list[int] = []
    for pool, q in zip(pools, quota, strict=True):
        if q:
            chosen += rng.choice(pool, size=q, replace=False, p=weight[pool] / weight[pool].sum()).tolist()
    if len(chosen) < size:
        # Not enough screened, rising items: fill from the unflagged rest, then from the flagged.
        taken = set(chosen)
        for tier in ([i for i, p in enumerate(items) if not p.flagged], list(range(len(items)))):
            rest = [i for i in tier if i not in taken]
            extra = rng.choice(rest, size=min(size - len(chosen), len(rest)), replace=False).tolist() if rest else []
            chosen += extra
            taken.update(extra)
            if len(chosen) == size:
                break
    return [items[i].item_id for i in chosen]


def _check_size(size: object, n_items: int) -> int:
    """``size`` as an int in 1..n_items, refused by its keyword otherwise (the CLI checks --subset itself): a
    ValueError, or numpy's TypeError for "3" or 1.5, had named nothing."""
    size = check_k(size, "size", at_least_one=False)
    if not 0 < size <= n_items:
        raise ConfigError(f"size: must lie in 1..{n_items} (the profiled items), got {size}")
    return size


def _allocate(size: int, capacity: Sequence[int]) -> list[int]:
    """Equal shares per stratum, capped by what each holds; the rest goes to strata with room."""
    quota = [0] * len(capacity)
    left = min(size, sum(capacity))
    while left > 0:
        open_ = [s for s, c in enumerate(capacity) if quota[s] < c]
        share = max(1, left // len(open_))
        for s in open_:
            add = min(share, capacity[s] - quota[s], left)
            quota[s] += add
            left -= add
            if left == 0:
                break
    return quota


def model_scores(matrix: ResponseMatrix, models: Sequence[str], item_ids: Sequence[str] | None = None) -> np.ndarray:
    """Mean correctness of each model (in the given order) over the given items."""
    rows = [matrix.models.index(m) for m in models]
    if item_ids is None:
        cols: slice | list[int] = slice(None)
    else:  # by a map, not a search of the ids per item: K x items for every draw of every method before
        at = {i: k for k, i in enumerate(matrix.item_ids)}
        cols = [at[i] for i in item_ids]
    k, t = matrix.correct[rows][:, cols], matrix.trials[rows][:, cols]
    tried = (t > 0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN for a model that tried none; nanmean would warn
        rate = np.where(t > 0, k / np.maximum(t, 1), 0.0)
        return np.where(tried > 0, rate.sum(axis=1) / np.maximum(tried, 1), np.nan)


def ndr(subset_scores: np.ndarray, full_scores: np.ndarray) -> float:
    """Normalized discrimination ratio; both score vectors ordered along the reference axis."""
    gaps_s = np.diff(np.asarray(subset_scores, float))
    gaps_q = np.diff(np.asarray(full_scores, float))
    denom = np.abs(gaps_q).sum()
    return float(np.clip(gaps_s, 0, None).sum() / denom) if denom > 0 else float("nan")


def kendall_tau_b(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b; NaN where it is undefined (fewer than two values, or one side all tied), decided
    here rather than by scipy, which warns on stderr."""
    from scipy.stats import kendalltau

    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(kendalltau(a, b, variant="b").statistic)


@dataclass(frozen=True)
class SubsetEvaluation:
    size: int
    repeats: int
    ndr_profile: tuple[float, float]  # mean, sd over repeats
    tau_profile: tuple[float, float]
    ndr_random: tuple[float, float]
    tau_random: tuple[float, float]
    notes: tuple[str, ...] = ()  # one line each: models left out of draws, figures undefined in some draws

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def evaluate_subsets(
    bp: BenchmarkProfile,
    matrix: ResponseMatrix,
    size: int,
    *,
    reference_models: Sequence[str] | None = None,
    repeats: int = 20,
    seed: int = 0,
) -> SubsetEvaluation:
    """Profile-guided against random subsets of ``size`` items, on a reference model axis.

    ``reference_models`` (weakest first) default to the profile's own axis; pass models the
    profile did not see to evaluate out of sample. A draw compares only the models with responses
    on its items (a sparse matrix leaves some without); a figure undefined in a draw (fewer than two
    such models, or all tied) is left out of its mean and sd, NaN when no draw defines it; ``notes``
    says so. Refused (DataError) when the models all score the same on the full benchmark.
    """
    size = _check_size(size, len(bp.items))
    repeats = check_k(repeats, "repeats")  # none would give figures of no draw: NaN, with no note
    ref = list(reference_models) if reference_models is not None else list(bp.axis.models)
    full = model_scores(matrix, ref)
    ref = [ref[i] for i in np.argsort(full, kind="stable")]  # the reference axis: full-benchmark order
    full = np.sort(full, kind="stable")
    if np.ptp(full) == 0:
        raise DataError(f"{matrix.source or 'responses'}: every model has the same score on the full benchmark; "
                        "there is no ranking for a subset to keep")
    pool = [p.item_id for p in bp.items]
    rng = np.random.default_rng(seed)
    out = {"p": ([], []), "r": ([], [])}
    absent: dict[str, set[str]] = {"p": set(), "r": set()}
    for r in range(repeats):
        for key, ids in (("p", select_subset(bp, size, seed=seed + r)),
                         ("r", rng.choice(pool, size=size, replace=False).tolist())):
            s = model_scores(matrix, ref, ids)
            has = ~np.isnan(s)
            absent[key].update(m for m, h in zip(ref, has, strict=True) if not h)
            out[key][0].append(ndr(s[has], full[has]) if has.sum() >= 2 else float("nan"))
            # with two models tau-b is +1 or -1 whatever the scores (pruning.MIN_RANKED): no evidence
            out[key][1].append(kendall_tau_b(s[has], full[has]) if has.sum() >= MIN_RANKED else float("nan"))

    def ms(v: list[float]) -> tuple[float, float]:
        d = [x for x in v if not np.isnan(x)]
        return (float(np.mean(d)), float(np.std(d))) if d else (float("nan"), float("nan"))

    notes = []
    for key, method in (("p", "profile-guided"), ("r", "random")):
        if absent[key]:
            names = sorted(absent[key])
            notes.append(f"{method}: {len(names)} model(s) with no responses on some subsets are left out of those "
                         f"subsets' comparison: {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}")
        for figure, values in (("NDR", out[key][0]), ("tau-b", out[key][1])):
            undefined = int(np.isnan(values).sum())
            if undefined:
                fewest = 2 if figure == "NDR" else MIN_RANKED
                notes.append(f"{method}: {figure} undefined in {undefined} of {repeats} draws (fewer than {fewest} "
                             "models with responses, or all tied); left out of its mean and sd")  # fmt: skip
    return SubsetEvaluation(size, repeats, ms(out["p"][0]), ms(out["p"][1]), ms(out["r"][0]), ms(out["r"][1]),
                            tuple(notes))
