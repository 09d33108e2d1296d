"""Checks around a fit: response-matrix diagnostics, leave-one-model-out, 1PL vs 2PL by BIC.

Matrix diagnostics follow the paper's Appendix C.3: model and item information
(mean of 4 p (1 - p) over models / items, >= 0.3) and model and item inversion rates
(fraction of ordered pairs out of the order implied by the marginal rates, <= 0.3).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchfill.matrix import ResponseMatrix

THRESHOLD = 0.3


def _check(value: float, *, at_least: bool) -> dict[str, Any]:
    passed = bool(value >= THRESHOLD) if at_least else bool(value <= THRESHOLD)
    return {"value": float(value), "threshold": THRESHOLD, "passed": passed}


def _discordant(order: np.ndarray, values: np.ndarray) -> tuple[int, int]:
    """(pairs with order_a > order_b and values_a < values_b, pairs with order_a != order_b).

    Counted in O(n log n) from Kendall's tau-b: with n0 = n(n-1)/2 pairs, n1 / n2 tied in
    ``order`` / ``values``, n3 tied in both, C + D = n0 - n1 - n2 + n3 and
    C - D = tau_b * sqrt((n0 - n1)(n0 - n2)).
    """
    from scipy.stats import kendalltau

    n = len(order)
    n0 = n * (n - 1) // 2

    def tied(*cols: np.ndarray) -> int:
        _, counts = np.unique(np.stack(cols, axis=1), axis=0, return_counts=True)
        return int(np.sum(counts * (counts - 1) // 2))

    n1, n2, n3 = tied(order), tied(values), tied(order, values)
    untied = n0 - n1 - n2 + n3
    if untied == 0:
        return 0, n0 - n1
    tau = kendalltau(order, values).statistic
    diff = tau * np.sqrt(float(n0 - n1) * float(n0 - n2))
    return int(round((untied - diff) / 2)), n0 - n1


def check_loo(matrix: ResponseMatrix) -> None:
    """Refuse a matrix leave-one-model-out cannot run on (``DataError``): each refit needs two models, a
    correlation two items. Callers that announce the work check first, so the error stays one line."""
    from benchfill.errors import DataError

    if matrix.n_models < 3 or matrix.n_items < 2:
        raise DataError(f"{matrix.source}: leave-one-model-out needs at least 3 models and 2 items, "
                        f"found {matrix.n_models} and {matrix.n_items}")


PAIR_LOOP_MODELS = 300  # up to this many models the pairs are compared directly, one item axis pass each


def _model_inversions(p: np.ndarray, seen: np.ndarray, rate: np.ndarray, *, pairs: bool | None = None) -> tuple[int, int]:
    """(model pairs inverted on an item, model pairs ordered and both seen on it), summed over items; given
    the matrix transposed, the same for item pairs over models.

    A few rows (a benchmark's models) are compared pair by pair, each pair over every column at once (m^2
    vector passes). Many (10,000 models: 10^8 pairs, minutes; a benchmark's 12,000 items) are counted column
    by column in O(m log m) from Kendall's tau-b (``_discordant``). ``pairs`` forces one way (tests)."""
    m = p.shape[0]
    if pairs if pairs is not None else m <= PAIR_LOOP_MODELS:
        inverted = ordered = 0
        for j in range(m):
            for k in range(m):
                if not rate[j] > rate[k]:
                    continue
                both = seen[j] & seen[k]
                ordered += int(both.sum())
                inverted += int(np.sum(p[j, both] < p[k, both]))
        return inverted, ordered
    inverted = ordered = 0
    for i in range(p.shape[1]):
        rows = seen[:, i] & ~np.isnan(rate)
        if rows.sum() < 2:
            continue
        d, o = _discordant(rate[rows], p[rows, i])
        inverted += d
        ordered += o
    return inverted, ordered


def matrix_checks(matrix: ResponseMatrix) -> dict[str, dict[str, Any]]:
    """The four response-matrix diagnostics, each {value, threshold, passed}.

    p_ji = correct / trials; pairs never tried are left out of every average and pair.
    Inversions: a model pair is ordered by the models' mean success rates; on an item it is
    inverted when the stronger model's rate there is strictly lower. Pairs tied in the mean
    rate have no order and are left out of the denominator; a tie on the item is no inversion.
    Item pairs likewise, ordered by the items' mean solve rates and compared model by model.
    """
    from benchfill.irt.engine import require_matrix

    require_matrix(matrix)
    p = matrix.success_rate
    seen = ~np.isnan(p)
    with np.errstate(invalid="ignore"):
        p_model = np.nanmean(np.where(seen, p, np.nan), axis=1)
        p_item = np.nanmean(np.where(seen, p, np.nan), axis=0)
    p_model = p_model[~np.isnan(p_model)]
    p_item = p_item[~np.isnan(p_item)]
    model_info = float(np.mean(4 * p_model * (1 - p_model))) if p_model.size else 0.0
    item_info = float(np.mean(4 * p_item * (1 - p_item))) if p_item.size else 0.0

    rate_model = np.nanmean(p, axis=1) if p.size else np.array([])
    inverted, ordered = _model_inversions(p, seen, rate_model)
    model_inv = inverted / ordered if ordered else 0.0

    rate_item = np.nanmean(p, axis=0) if p.size else np.array([])
    inverted, ordered = _model_inversions(p.T, seen.T, rate_item)  # the same count with items for models
    item_inv = inverted / ordered if ordered else 0.0
    return {
        "model_information": _check(model_info, at_least=True),
        "item_information": _check(item_info, at_least=True),
        "model_inversion_rate": _check(model_inv, at_least=False),
        "item_inversion_rate": _check(item_inv, at_least=False),
    }


def leave_one_model_out(matrix: ResponseMatrix, *, engine: str = "map",
                        progress: Callable[[str], None] | None = None, **fit_kwargs: Any) -> dict[str, Any]:
    """Refit without each model in turn; correlate difficulties with the full fit. ``progress``: given a line
    of the refits done every PROGRESS_EVERY_S seconds (minutes of refits at 100 models x 20,000 items).

    Returns mean and min Pearson and Spearman correlations over the refits, and the
    per-model values (keyed by the model left out). A refit whose difficulties are all
    equal (the models left cannot tell the items apart) has no correlation: its values are
    NaN, left out of the means and minima and counted in ``undefined`` (all undefined: NaN).
    """
    import warnings

    from scipy.stats import ConstantInputWarning, pearsonr, spearmanr

    from benchfill.irt.engine import fit, require_matrix
    from benchfill.irt.sampling import PROGRESS_EVERY_S  # (here: it brings numba, which a check needs not)

    require_matrix(matrix)
    check_loo(matrix)
    full = fit(matrix, engine=engine, **fit_kwargs).difficulty
    per_model: dict[str, dict[str, float]] = {}
    last = time.monotonic()
    for j, name in enumerate(matrix.models):
        if progress is not None and j and time.monotonic() - last >= PROGRESS_EVERY_S:
            progress(f"refits {j}/{matrix.n_models} done")
            last = time.monotonic()
        keep = np.ones(matrix.n_models, dtype=bool)
        keep[j] = False
        rest = matrix.drop_models(keep)
        # an item only this model tried has no difficulty without it (fit refuses to place it by the prior):
        # the refit and the comparison are over the items the others tried
        tried = np.flatnonzero(rest.trials.sum(axis=0) > 0)
        if tried.size < 2:
            per_model[name] = {"pearson": float("nan"), "spearman": float("nan")}
            continue
        b = fit(rest.select_items(tried), engine=engine, **fit_kwargs).difficulty
        with warnings.catch_warnings():  # constant difficulties: NaN, counted below, not a warning per refit
            warnings.simplefilter("ignore", ConstantInputWarning)
            per_model[name] = {
                "pearson": float(pearsonr(full[tried], b).statistic),
                "spearman": float(spearmanr(full[tried], b).statistic),
            }
    pear = np.array([v["pearson"] for v in per_model.values()])
    spear = np.array([v["spearman"] for v in per_model.values()])

    def over_defined(x: np.ndarray, how: Any) -> float:
        x = x[~np.isnan(x)]
        return float(how(x)) if x.size else float("nan")

    return {
        "engine": engine,
        "pearson_mean": over_defined(pear, np.mean),
        "pearson_min": over_defined(pear, np.min),
        "spearman_mean": over_defined(spear, np.mean),
        "spearman_min": over_defined(spear, np.min),
        "undefined": int(np.sum(np.isnan(pear) | np.isnan(spear))),
        "refits": len(per_model),
        "per_model": per_model,
    }


def compare_models(matrix: ResponseMatrix, *, guessing: bool = True) -> dict[str, Any]:
    """1PL vs 2PL MAP fits by BIC = k ln(n) - 2 ln L (lower is better).

    k counts free parameters (abilities + difficulties, + discriminations for 2PL) and n the
    Bernoulli observations, i.e. total trials. ln L is the binomial log likelihood at the
    posterior mode, which stands in for the maximum likelihood as in the paper's comparison.
    delta_bic = bic_2pl - bic_1pl, so positive values favour 1PL.
    """
    from benchfill.irt.map import fit_map_1pl, fit_map_2pl

    n_obs = int(np.sum(matrix.trials))
    if n_obs == 0:
        raise ValueError("no trials in the response matrix")
    f1 = fit_map_1pl(matrix, guessing=guessing)
    f2 = fit_map_2pl(matrix, guessing=guessing)
    k1 = matrix.n_models + matrix.n_items
    k2 = k1 + matrix.n_items
    bic1 = k1 * np.log(n_obs) - 2 * f1.log_likelihood
    bic2 = k2 * np.log(n_obs) - 2 * f2.log_likelihood
    return {
        "bic_1pl": float(bic1),
        "bic_2pl": float(bic2),
        "delta_bic": float(bic2 - bic1),
        "selected": "1pl" if bic2 > bic1 else "2pl",
        "k_1pl": k1,
        "k_2pl": k2,
        "n_observations": n_obs,
        "log_likelihood_1pl": f1.log_likelihood,
        "log_likelihood_2pl": f2.log_likelihood,
    }
