"""``fit()``: one entry point over the IRT engines (MAP, NUTS) and models (1PL, 2PL)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from benchfill.errors import ConfigError, DataError
from benchfill.irt.fit import IrtFit
from benchfill.matrix import ResponseMatrix

ENGINES = ("map", "nuts")
MODELS = ("1pl", "2pl")
PRIORS = ("normal", "hierarchical")  # the difficulties' prior: N(0, 1), or N(mu_b, sigma_b^2) estimated


def require_matrix(matrix: Any, arg: str = "matrix") -> None:
    """Refuse anything but a ResponseMatrix, naming ``arg``: a path or None would otherwise fail deep inside
    as an AttributeError, which reads as a bug in benchfill rather than in the call."""
    if not isinstance(matrix, ResponseMatrix):
        raise ConfigError(f"{arg}: expected a ResponseMatrix, got {type(matrix).__name__} "
                          "(read one with benchfill.read_responses)")


def _on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fit(
    matrix: ResponseMatrix,
    *,
    engine: str = "map",
    model: str = "1pl",
    guessing: bool = True,
    seed: int = 0,
    chains: int = 4,
    warmup: int = 1000,
    draws: int = 1000,
    target_accept: float = 0.95,
    progress: Callable[[str], None] | bool | None = None,
    prior: str = "normal",
) -> IrtFit:
    """Fit P(Y=1) = g_i + (1 - g_i) sigmoid(theta_j - b_i) (or a_i (theta_j - b_i) for 2PL).

    ``guessing`` uses ``matrix.chance`` as the per-item floor g_i (zeros give the plain model).
    Priors: theta_j, b_i ~ N(0, 1); for 2PL log a_i ~ N(0, 0.5^2) (a lognormal discrimination).
    "map" returns the posterior mode with Laplace standard errors; "nuts" returns posterior
    means and sds with all chains' draws stacked and the convergence diagnostics
    (max_rhat, min_ess_bulk, divergences). Both record the log likelihood (for BIC) and ``seed``.

    ``prior``: "normal", the paper's N(0, 1) on every difficulty, or "hierarchical", the paper's
    N(mu_b, sigma_b^2) with both estimated from the items (``irt.hierarchical``; the 1PL only), which draws
    the least-measured items at the ends in only as far as the benchmark's own spread warrants. Under NUTS the
    draws are taken under the estimated prior (empirical Bayes): mu_b and sigma_b are not sampled, so their
    own uncertainty is left out of the intervals.

    ``seed`` fixes the draws (and MAP's start; None under NUTS draws a fresh one, which the fit records so
    that its draws can be made again); ``chains``, ``warmup``, ``draws`` and ``target_accept`` (the
    NUTS step size's aim) are NUTS's only. ``progress``: a callable given each progress line, or True for
    the lines on stderr (as ``run`` and ``run_sweep`` take ``progress=True``); None or False for none.
    """
    require_matrix(matrix)
    if isinstance(progress, (bool, np.bool_)):  # (numpy's bool too)
        progress = _on_stderr if progress else None
    elif progress is not None and not callable(progress):
        raise ConfigError(f"progress: a callable taking each line, or True/False, got {type(progress).__name__}")
    if engine not in ENGINES:
        raise ConfigError(f"engine: unknown IRT engine {engine!r} (choose one of {', '.join(ENGINES)})")
    if model not in MODELS:
        raise ConfigError(f"model: unknown IRT model {model!r} (choose one of {', '.join(MODELS)})")
    if prior not in PRIORS:
        raise ConfigError(f"prior: unknown difficulty prior {prior!r} (choose one of {', '.join(PRIORS)})")
    if prior == "hierarchical" and model != "1pl":
        raise ConfigError(f"prior: hierarchical is fitted for the 1PL only, not model {model!r}")
    if matrix.n_models == 0 or matrix.n_items == 0:
        raise ConfigError(f"{matrix.source or 'responses'}: the response matrix is empty")
    if not matrix.trials.any():  # the priors alone would place every model and item: numbers that mean nothing
        raise DataError(f"{matrix.source or 'responses'}: no model tried any item (every trial count is 0)")
    # So would they place an item no model tried, or a model that tried none (a pivot's missing cells filled
    # with 0): read_responses leaves such out, listing them; from a caller's arrays they came back as figures
    # (the item at z 0.67, a gap's edge in diagnose)
    for axis, what in ((0, "item(s) no model tried"), (1, "model(s) that tried no item")):
        idle = np.flatnonzero(matrix.trials.sum(axis=axis) == 0)
        if idle.size:
            names = matrix.item_ids if axis == 0 else matrix.models
            shown = ", ".join(repr(names[i]) for i in idle[:3]) + (", ..." if idle.size > 3 else "")
            raise DataError(f"{matrix.source or 'responses'}: {idle.size} {what} ({shown}): the prior alone would "
                            "place them; leave them out of the matrix (read_responses does, listing them in "
                            "untried / untried_models)")  # fmt: skip
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise ConfigError(f"seed: a whole number (or None), got {seed!r}")
    # as the CLI's --seed refuses: NUTS seeds numpy's generators with it, which fail on a negative one with a
    # ValueError of their own (MAP, deterministic, only recorded it)
    if seed is not None and seed < 0:
        raise ConfigError(f"seed: must be 0 or more (or None), got {seed}")
    if engine == "map":
        from benchfill.irt.map import fit_map_1pl, fit_map_2pl

        if prior == "hierarchical":
            from benchfill.irt.hierarchical import fit_hierarchical_1pl

            return fit_hierarchical_1pl(matrix, guessing=guessing, seed=seed, progress=progress)
        fn = fit_map_1pl if model == "1pl" else fit_map_2pl
        return fn(matrix, guessing=guessing, seed=seed, progress=progress)
    from benchfill.irt.convergence import MIN_DRAWS

    if chains < 1:
        raise ConfigError(f"chains: must be at least 1, got {chains}")
    if draws < MIN_DRAWS:  # fewer leave split R-hat and the bulk ESS undefined (NaN)
        raise ConfigError(f"draws: must be at least {MIN_DRAWS} (split R-hat needs two in each half of a chain), "
                          f"got {draws}")
    if warmup < 0:
        raise ConfigError(f"warmup: must be non-negative, got {warmup}")
    if not 0.0 < target_accept < 1.0:
        raise ConfigError(f"target_accept: must lie in (0, 1), got {target_accept}")
    try:
        import numba  # noqa: F401
    except ImportError:
        raise ConfigError("engine nuts: needs numba, an optional extra: pip install 'benchfill[nuts]'") from None
    from benchfill.irt.convergence import warn_unconverged
    from benchfill.irt.sampling import fit_nuts

    if seed is None:  # the chains' generators need a number; this one is recorded with the fit
        seed = int(np.random.SeedSequence().entropy % 2**31)

    b_prior, hyper = (0.0, 1.0), {}
    if prior == "hierarchical":  # the prior's estimate first (the MAP EM), then the draws under it
        from benchfill.irt.hierarchical import fit_hierarchical_1pl

        est = fit_hierarchical_1pl(matrix, guessing=guessing, seed=seed, progress=progress).diagnostics
        hyper = {k: est[k] for k in ("prior", "difficulty_prior_mean", "difficulty_prior_sd", "em_rounds")}
        b_prior = (est["difficulty_prior_mean"], est["difficulty_prior_sd"])
    f = fit_nuts(
        matrix,
        model=model,
        guessing=guessing,
        seed=seed,
        chains=chains,
        warmup=warmup,
        draws=draws,
        target_accept=target_accept,
        progress=progress,
        b_prior=b_prior,
    )
    f.diagnostics.update(hyper)
    warn_unconverged(f.diagnostics)  # a library caller is told too, not only the CLI's reader
    return f
