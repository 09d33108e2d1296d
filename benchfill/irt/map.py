"""MAP engine: the posterior mode with Laplace standard errors.

1PL: Newton on the joint posterior (Fisher scoring as a fallback under a guessing floor). The
information matrix is an arrowhead: diagonal in theta, diagonal in b, and a dense
models x items cross block W. Eliminating b leaves an m x m Schur complement
S = D_theta - W D_b^-1 W^T over the few models, so one step costs a few passes over the
matrix and an m x m solve; the same factorisation gives the standard errors at the end. With more
models than items, theta is eliminated instead (an n x n complement).

2PL: L-BFGS on the joint posterior (used for model comparison, where speed matters less).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from benchfill.irt.fit import IrtFit
from benchfill.irt.likelihood import LOG_DISCRIMINATION_SD, Posterior
from benchfill.matrix import ResponseMatrix

MAX_ITER = 100
TOL = 1e-7


class ConvergenceWarning(UserWarning):
    """The optimiser stopped before its step size fell below tolerance."""


def _newton_step(
    post: Posterior, x: np.ndarray, r: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, tuple[bool, np.ndarray, np.ndarray, np.ndarray]] | None:
    """Newton direction for information w (None if that information is not positive definite), plus the
    factors of the inverse information the standard errors need (``_laplace_se_1pl``).

    The system is D_theta s_theta - W s_b = g_theta, -W^T s_theta + D_b s_b = g_b. The smaller side stays:
    eliminating b leaves an m x m Schur complement over the models, eliminating theta an n x n one over
    the items. A benchmark has few models and many items; a matrix of 10,000 models and 5 items, eliminated
    the usual way, took an m x m Cholesky and inverse (minutes, 3 GB) where a 5 x 5 one does."""
    m = post.m
    theta, b = x[:m], x[m:]
    g_theta = r.sum(axis=1) - theta
    g_b = -r.sum(axis=0) - post.b_prec * (b - post.b_mean)
    d_theta = w.sum(axis=1) + 1.0
    d_b = w.sum(axis=0) + post.b_prec
    by_models = m <= w.shape[1]
    # (kept, eliminated): the side whose Schur complement is solved, and the side divided out
    if by_models:
        d_keep, d_out, g_keep, g_out, cross = d_theta, d_b, g_theta, g_b, w
    else:
        d_keep, d_out, g_keep, g_out, cross = d_b, d_theta, g_b, g_theta, w.T
    if np.any(d_out <= 0):
        return None
    over = cross / d_out[None, :]
    schur = np.diag(d_keep) - over @ cross.T
    try:
        chol = np.linalg.cholesky(schur)
    except np.linalg.LinAlgError:
        return None
    rhs = g_keep + over @ g_out
    step_keep = np.linalg.solve(chol.T, np.linalg.solve(chol, rhs))
    step_out = (g_out + cross.T @ step_keep) / d_out
    step = np.concatenate([step_keep, step_out] if by_models else [step_out, step_keep])
    return step, (by_models, schur, d_out, over)


def _laplace_se_1pl(factors: tuple[bool, np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal of the inverse arrowhead information (block inverse through the Schur complement): the kept
    side's variances are the diagonal of S^-1; an eliminated one's 1/d_k + (w_k/d_k)^T S^-1 (w_k/d_k).
    Returns (se of the abilities, se of the difficulties)."""
    by_models, schur, d_out, over = factors
    s_inv = np.linalg.inv(schur)
    var_keep = np.diag(s_inv)
    var_out = 1.0 / d_out + np.einsum("ji,ji->i", over, s_inv @ over)
    se_keep, se_out = np.sqrt(var_keep), np.sqrt(var_out)
    return (se_keep, se_out) if by_models else (se_out, se_keep)


def fit_map_1pl(
    matrix: ResponseMatrix,
    *,
    guessing: bool = True,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    b_prior: tuple[float, float] = (0.0, 1.0),
    start: np.ndarray | None = None,
) -> IrtFit:
    """``b_prior``: (mean, sd) of the difficulties' prior (the paper's N(0, 1) unless the hierarchical fit
    sets it); ``start``: abilities then difficulties to start from (zeros by default)."""
    post = Posterior(matrix, model="1pl", guessing=guessing, b_prior=b_prior)
    x = np.zeros(post.dim) if start is None else np.array(start, dtype=float)
    # Under a guessing floor the observed information gives quadratic convergence near the
    # mode; far from it, where it may not be positive definite, fall back to Fisher scoring.
    ll, r, h, _ = post.terms(x, observed=True)
    lp = ll + post.log_prior(x)
    converged = False
    for it in range(1, MAX_ITER + 1):
        newton = _newton_step(post, x, r, h)
        if newton is None:
            newton = _newton_step(post, x, r, post.terms(x)[2])
        step = newton[0]
        scale = 1.0
        while True:  # step halving keeps the ascent monotone
            x_new = x + scale * step
            ll_new, r_new, h_new, _ = post.terms(x_new, observed=True)
            lp_new = ll_new + post.log_prior(x_new)
            if lp_new >= lp - 1e-12 * abs(lp) or scale < 1e-6:
                break
            scale *= 0.5
        x, r, h, lp = x_new, r_new, h_new, lp_new
        if progress:
            progress(f"map iteration {it}: log posterior {lp:.4f}, max step {np.max(np.abs(step)):.2e}")
        if np.max(np.abs(scale * step)) < TOL:
            converged = True
            break
    if not converged:
        warnings.warn(f"MAP fit did not converge in {MAX_ITER} iterations", ConvergenceWarning, stacklevel=2)
    final = _newton_step(post, x, r, h) or _newton_step(post, x, r, post.terms(x)[2])
    se_theta, se_b = _laplace_se_1pl(final[1])
    theta, b, _ = post.split(x)
    # Kept to 1e-10: the last digits of the optimum move with the number of BLAS threads (one ULP on
    # mmlu-pro), and a search or a ranking that met such a near-tie would differ between a laptop and
    # the one-CPU workers of a cluster. No decision rests on digits below this.
    return IrtFit(
        model="1pl",
        engine="map",
        models=matrix.models,
        item_ids=matrix.item_ids,
        ability=np.round(theta, 10),
        ability_se=np.round(se_theta, 10),
        difficulty=np.round(b, 10),
        difficulty_se=np.round(se_b, 10),
        chance=_used_chance(matrix, guessing),
        log_likelihood=post.log_likelihood(x),
        diagnostics={"converged": converged, "iterations": it, "log_posterior": lp},
        seed=seed,
    )


def fit_map_2pl(
    matrix: ResponseMatrix,
    *,
    guessing: bool = True,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    log_a_prior: tuple[float, float] = (0.0, LOG_DISCRIMINATION_SD),
    start: np.ndarray | None = None,
) -> IrtFit:
    """2PL posterior mode; discriminations a_i carry a lognormal(0, 0.5) prior (``log_a_prior``: its
    mean and sd on log a). ``start``, a flat (theta, b, log a), warm-starts the optimiser.

    Standard errors are conditional ones (each parameter's own Fisher information plus its
    prior, others held at the mode): cheap, and slightly narrower than the joint Laplace ones.
    """
    from scipy.optimize import minimize

    post = Posterior(matrix, model="2pl", guessing=guessing, log_a_prior=log_a_prior)
    if start is None:
        first = fit_map_1pl(matrix, guessing=guessing, seed=seed)
        x0 = np.concatenate([first.ability, first.difficulty, np.full(matrix.n_items, post.log_a_mean)])
    else:
        x0 = np.asarray(start, dtype=float)

    def neg(x: np.ndarray) -> tuple[float, np.ndarray]:
        lp, g = post.logp_grad(x)
        return -lp, -g

    res = minimize(neg, x0, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-6})
    if not res.success and np.max(np.abs(res.jac)) > 1e-3:
        warnings.warn(f"2PL MAP fit did not converge: {res.message}", ConvergenceWarning, stacklevel=2)
    if progress:
        progress(f"2pl map: {res.nit} L-BFGS iterations, log posterior {-res.fun:.4f}")
    x = res.x
    theta, b, log_a = post.split(x)
    a = np.exp(log_a)
    _, _, w, _ = post.terms(x)
    se_theta = 1.0 / np.sqrt((w * a[None, :] ** 2).sum(axis=1) + 1.0)
    se_b = 1.0 / np.sqrt(a**2 * w.sum(axis=0) + 1.0)
    return IrtFit(
        model="2pl",
        engine="map",
        models=matrix.models,
        item_ids=matrix.item_ids,
        ability=theta.copy(),
        ability_se=se_theta,
        difficulty=b.copy(),
        difficulty_se=se_b,
        chance=_used_chance(matrix, guessing),
        discrimination=a,
        log_likelihood=post.log_likelihood(x),
        diagnostics={
            "converged": bool(res.success),
            "iterations": int(res.nit),
            "log_posterior": float(-res.fun),
            "log_discrimination_prior_sd": post.log_a_sd,
            "log_discrimination_prior_mean": post.log_a_mean,
        },
        seed=seed,
    )


def _used_chance(matrix: ResponseMatrix, guessing: bool) -> np.ndarray:
    return np.asarray(matrix.chance, dtype=float).copy() if guessing else np.zeros(matrix.n_items)
