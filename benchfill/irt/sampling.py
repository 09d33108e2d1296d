"""NUTS engine: the full posterior of the IRT model, chains in parallel processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable

import numpy as np

from benchfill.irt.convergence import MIN_DRAWS, ess_bulk, rhat
from benchfill.irt.fit import IrtFit
from benchfill.irt.likelihood import LOG_DISCRIMINATION_SD, Posterior
from benchfill.irt.nuts import ChainResult, sample_chain
from benchfill.matrix import ResponseMatrix
from benchfill.workers import owned_pool

_TARGET = None  # the Whitened posterior, set before forking so workers inherit it without pickling
# Iterations done per chain, shared with forked workers (a chain on mmlu-pro runs for minutes: its progress
# is said every PROGRESS_EVERY_S seconds, where before nothing was printed until a chain ended)
_DONE = None
PROGRESS_EVERY_S = 15.0
_ONE_FIT = threading.Lock()


class Whitened:
    """The posterior in coordinates y where its Laplace approximation is N(0, I).

    x = x_mode + L^-T y with L L^T the posterior precision at the mode. For (theta, b) the
    precision is the arrowhead [[D_theta, -W], [-W^T, D_b]], factored through its m x m Schur
    complement, so both maps cost one matrix-vector product with W. This is NUTS with a dense
    mass matrix fixed from the Laplace approximation: it removes the strong correlation of all
    abilities and difficulties along their shared location, which a diagonal metric cannot, and
    leaves the posterior itself unchanged (the map is affine; its Jacobian is a constant).
    The 2PL log-discriminations get their own diagonal precision (cross terms dropped).
    """

    def __init__(self, post: Posterior, mode: np.ndarray) -> None:
        self.post, self.mode, self.m, self.n = post, mode, post.m, post.n
        _, _, w, eta = post.terms(mode, observed=post.model == "1pl")
        theta, b, log_a = post.split(mode)
        if log_a is not None:
            a = np.exp(log_a)
            w_ab = w * a[None, :] ** 2
            self.sd_log_a = 1.0 / np.sqrt((w * eta**2).sum(axis=0) + 1.0 / LOG_DISCRIMINATION_SD**2)
        else:
            w_ab = w
            self.sd_log_a = None
        d_b = w_ab.sum(axis=0) + post.b_prec  # the difficulties' prior precision (1 under N(0, 1))
        schur = np.diag(w_ab.sum(axis=1) + 1.0) - (w_ab / d_b) @ w_ab.T
        try:
            if np.any(d_b <= 0):
                raise np.linalg.LinAlgError
            chol = np.linalg.cholesky(schur)
        except np.linalg.LinAlgError:  # observed information not positive definite: use Fisher
            w_ab = post.terms(mode)[2] * (1.0 if log_a is None else np.exp(log_a)[None, :] ** 2)
            d_b = w_ab.sum(axis=0) + post.b_prec
            chol = np.linalg.cholesky(np.diag(w_ab.sum(axis=1) + 1.0) - (w_ab / d_b) @ w_ab.T)
        self.w = w_ab
        self.inv_sqrt_d = 1.0 / np.sqrt(d_b)
        self.inv_d = 1.0 / d_b
        self.chol_inv = np.linalg.inv(chol)

    def compiled_data(self) -> tuple | None:
        """The arrays ``nuts_kernel.logp_grad`` reads, or None where it does not apply (2PL)."""
        post, m = self.post, self.m
        if post.model != "1pl":
            return None
        guessing = post.chance is not None
        zeros = np.zeros(self.n)
        c = np.ascontiguousarray
        return (
            c(self.mode[:m]), c(self.mode[m:]), c(self.chol_inv), c(self.w * self.inv_d[None, :]),
            c(self.inv_sqrt_d), c(post.trials), c(post.correct), c(post._wrong),
            c(post.chance) if guessing else zeros, c(post._log1m_chance) if guessing else zeros,
            c(post._correct_per_model), c(post._correct_per_item), c(post._wrong_per_model),
            c(post._wrong_per_item), guessing, post.b_mean, post.b_prec,
        )

    def to_x(self, y: np.ndarray) -> np.ndarray:
        m, n = self.m, self.n
        d_theta = self.chol_inv.T @ y[:m]
        x = self.mode.copy()
        x[:m] += d_theta
        x[m : m + n] += self.inv_sqrt_d * y[m : m + n] + self.inv_d * (d_theta @ self.w)
        if self.sd_log_a is not None:
            x[m + n :] += self.sd_log_a * y[m + n :]
        return x

    def logp_grad(self, y: np.ndarray) -> tuple[float, np.ndarray]:
        m, n = self.m, self.n
        lp, g = self.post.logp_grad(self.to_x(y))
        out = np.empty_like(g)
        g_b = g[m : m + n]
        out[m : m + n] = self.inv_sqrt_d * g_b
        out[:m] = self.chol_inv @ (g[:m] + self.w @ (self.inv_d * g_b))
        if self.sd_log_a is not None:
            out[m + n :] = self.sd_log_a * g[m + n :]
        return lp, out


def _python_logp_grad(y: np.ndarray, grad: np.ndarray, target: Whitened) -> float:
    lp, g = target.logp_grad(y)
    grad[:] = g
    return lp


def _run_chain(args: tuple[int, int, int, int, float]) -> ChainResult:
    seed, chain, warmup, draws, target_accept = args
    target = _TARGET
    # Starts spread over +-2 Laplace sds around the mode, a different one per chain
    # (overdispersed, so that R-hat can detect chains that fail to meet).
    y0 = np.random.default_rng([seed, chain, 1]).uniform(-2.0, 2.0, target.post.dim)
    data = target.compiled_data()
    done = _DONE

    def on_step(n: int) -> None:
        if done is not None:
            done[chain] = n

    kw = dict(seed=(seed, chain), warmup=warmup, draws=draws, target_accept=target_accept, on_step=on_step)
    if data is not None:  # 1PL: the compiled density, so the whole tree runs compiled
        from benchfill.irt.nuts_kernel import logp_grad, transition

        result = sample_chain(logp_grad, y0, data=data, tree=transition, **kw)
    else:
        result = sample_chain(_python_logp_grad, y0, data=target, **kw)
    result.draws = np.array([target.to_x(y) for y in result.draws])
    return result


def _chains_in_workers(jobs: list, n_workers: int, total: int, progress: Callable[[str], None] | None
                       ) -> list[ChainResult]:
    """The chains in ``n_workers`` forked processes, in chain order. Their iterations are said every
    PROGRESS_EVERY_S seconds; a stop (Ctrl-C, SIGTERM) ends the workers at once: the pool's own shutdown
    waited for every queued chain to run to its end (minutes each on a large benchmark)."""
    from concurrent.futures import FIRST_COMPLETED, wait

    pool = owned_pool(n_workers, "fork")
    try:
        futures = [pool.submit(_run_chain, job) for job in jobs]
        pending, told, last = set(futures), 0, time.monotonic()
        while pending:
            _, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            finished = len(futures) - len(pending)
            if progress and finished > told:
                progress(f"nuts chain {finished}/{len(jobs)} done")
                told, last = finished, time.monotonic()
            elif progress and time.monotonic() - last >= PROGRESS_EVERY_S:
                progress("nuts iterations " + ", ".join(f"{_DONE[c]}/{total}" for c in range(len(jobs)))
                         + f" (chains 1-{len(jobs)}; warm-up first)")
                last = time.monotonic()
        return [f.result() for f in futures]
    except BaseException:
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()  # a chain has nothing to clean up
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)


def _workers(chains: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(chains, cpus))


def fit_nuts(
    matrix: ResponseMatrix,
    *,
    model: str = "1pl",
    guessing: bool = True,
    seed: int = 0,
    chains: int = 4,
    warmup: int = 1000,
    draws: int = 1000,
    target_accept: float = 0.95,
    progress: Callable[[str], None] | None = None,
    b_prior: tuple[float, float] = (0.0, 1.0),
) -> IrtFit:
    """``b_prior``: (mean, sd) of the difficulties' prior, N(0, 1) unless the hierarchical prior's estimate is
    given (1PL only: ``fit(engine="nuts", prior="hierarchical")`` passes it)."""
    # One fit at a time in a process: the posterior reaches the forked workers through this module's globals,
    # and a second thread's fit replaced the first's before it forked (each got the other's posterior back,
    # or a reshape error). A fit uses every core anyway.
    with _ONE_FIT:
        return _fit_nuts(matrix, model=model, guessing=guessing, seed=seed, chains=chains, warmup=warmup,
                         draws=draws, target_accept=target_accept, progress=progress, b_prior=b_prior)


def _fit_nuts(matrix: ResponseMatrix, *, model: str, guessing: bool, seed: int, chains: int, warmup: int,
              draws: int, target_accept: float, progress: Callable[[str], None] | None,
              b_prior: tuple[float, float]) -> IrtFit:
    global _TARGET
    from benchfill.irt.map import fit_map_1pl, fit_map_2pl

    if model != "1pl" and tuple(b_prior) != (0.0, 1.0):
        raise ValueError("b_prior: the 2PL posterior keeps N(0, 1) on the difficulties")
    post = Posterior(matrix, model=model, guessing=guessing, b_prior=b_prior)
    if model == "1pl":
        mode_fit = fit_map_1pl(matrix, guessing=guessing, seed=seed, b_prior=b_prior)
        mode = np.concatenate([mode_fit.ability, mode_fit.difficulty])
    else:
        mode_fit = fit_map_2pl(matrix, guessing=guessing, seed=seed)
        mode = np.concatenate([mode_fit.ability, mode_fit.difficulty, np.log(mode_fit.discrimination)])
    _TARGET = Whitened(post, mode)
    data = _TARGET.compiled_data()
    if data is not None:  # compile (or load from numba's cache) once here, not in every worker
        from benchfill.irt.nuts_kernel import warm_up

        warm_up(data, post.dim)
    jobs = [(seed, c, warmup, draws, target_accept) for c in range(chains)]
    start = time.perf_counter()
    n_workers = _workers(chains)
    global _DONE
    _DONE = mp.get_context("fork").Array("l", chains, lock=False) if "fork" in mp.get_all_start_methods() else None
    try:
        if n_workers > 1 and _DONE is not None:
            results = _chains_in_workers(jobs, n_workers, warmup + draws, progress)
        else:
            results = []
            for c, job in enumerate(jobs):
                results.append(_run_chain(job))
                if progress:
                    progress(f"nuts chain {c + 1}/{chains} done")
    finally:
        _DONE = None
    seconds = time.perf_counter() - start
    stacked = np.stack([r.draws for r in results])  # (chains, draws, dim)
    r_hat = rhat(stacked) if draws >= MIN_DRAWS else np.full(post.dim, np.nan)
    ess = ess_bulk(stacked) if draws >= MIN_DRAWS else np.full(post.dim, np.nan)
    flat = stacked.reshape(-1, post.dim)
    theta, b, log_a = post.split(flat.T)
    mean = flat.mean(axis=0)
    theta_mean, b_mean, log_a_mean = post.split(mean)
    return IrtFit(
        model=model,
        engine="nuts",
        models=matrix.models,
        item_ids=matrix.item_ids,
        ability=theta_mean.copy(),
        ability_se=theta.std(axis=1, ddof=1),
        difficulty=b_mean.copy(),
        difficulty_se=b.std(axis=1, ddof=1),
        chance=np.asarray(matrix.chance, dtype=float).copy() if guessing else np.zeros(matrix.n_items),
        discrimination=None if log_a is None else np.exp(log_a).mean(axis=1),
        difficulty_draws=np.ascontiguousarray(b.T),
        ability_draws=np.ascontiguousarray(theta.T),
        log_likelihood=post.log_likelihood(mean),
        diagnostics={
            "max_rhat": _extreme(np.nanmax, r_hat),
            "min_ess_bulk": _extreme(np.nanmin, ess),
            "divergences": int(sum(r.divergences for r in results)),
            "chains": chains,
            "warmup": warmup,
            "draws": draws,
            "target_accept": target_accept,
            "seconds": seconds,
            "step_size": [r.step_size for r in results],
            "mean_tree_depth": float(np.mean([r.mean_tree_depth for r in results])),
            "leapfrog_steps": int(sum(r.n_leapfrog for r in results)),
        },
        seed=seed,
    )


def _extreme(reduce: Callable[[np.ndarray], float], values: np.ndarray) -> float:
    """The largest R-hat or least ESS over parameters, NaN where none is defined (numpy would warn
    "All-NaN slice" on the way); a saved fit writes it as null."""
    finite = values[~np.isnan(values)]
    return float(reduce(finite)) if finite.size else float("nan")
