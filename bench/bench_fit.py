"""IRT engines side by side: MAP on mmlu-pro, NUTS on a simulated 1,299 x 12 x 4 matrix.

(a) MAP fit of mmlu-pro (12,032 items x 29 models, chance 0.1): benchfill's arrowhead Newton
    vs a plain scipy L-BFGS on the same joint posterior (file reading excluded).
(b) NUTS with the paper's recipe (4 chains, 1,000 warm-up, 1,000 draws, target 0.95):
    benchfill's sampler vs PyMC's pm.sample on the same simulated data; wall seconds, max
    R-hat, min bulk ESS, divergences, and agreement of posterior means and sds.
(c) Online calibration of one new item (``online_calibrate``: 12 probes x 8 trials, chance 0.1), as the
    search places each child: 1,000 items, benchfill's Newton vs scipy's bounded scalar minimiser of the
    same likelihood (xatol 1e-8), ms a call and the largest difference in b.

    python bench/bench_fit.py [--skip-pymc] [--skip-map] [--skip-nuts] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from _common import shared_data

ROOT = Path(__file__).resolve().parent.parent




def bench_map() -> None:
    from scipy.optimize import minimize

    from benchfill.data import read_responses
    from benchfill.irt import fit
    from benchfill.irt.likelihood import Posterior

    matrix = read_responses(shared_data() / "mmlu-pro" / "responses.csv").with_chance(0.1)
    fit(matrix)  # warm caches and imports for both contenders
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        ours = fit(matrix)
        times.append(time.perf_counter() - t0)
    post = Posterior(matrix, guessing=True)

    def neg(x: np.ndarray) -> tuple[float, np.ndarray]:
        lp, g = post.logp_grad(x)
        return -lp, -g

    t0 = time.perf_counter()
    res = minimize(neg, np.zeros(post.dim), jac=True, method="L-BFGS-B", options={"maxiter": 10000})
    t_lbfgs = time.perf_counter() - t0
    x_ours = np.concatenate([ours.ability, ours.difficulty])
    t_ours = min(times)
    print(f"(a) MAP mmlu-pro {matrix.n_items} items x {matrix.n_models} models, chance 0.1")
    print(f"    benchfill Newton  {t_ours:7.3f} s  ({ours.diagnostics['iterations']} iterations, best of 3)")
    print(f"    scipy L-BFGS      {t_lbfgs:7.3f} s  ({res.nit} iterations)")
    print(f"    ratio             {t_lbfgs / t_ours:7.1f}x")
    print(f"    log posterior     ours {-neg(x_ours)[0]:.3f}  L-BFGS {-res.fun:.3f}; max |diff b| {np.max(np.abs(res.x - x_ours)):.2e}")


def pymc_fit(matrix, seed: int):
    import pymc as pm

    jj, ii = np.nonzero(matrix.trials > 0)
    with pm.Model():
        theta = pm.Normal("theta", 0.0, 1.0, shape=matrix.n_models)
        b = pm.Normal("b", 0.0, 1.0, shape=matrix.n_items)
        g = matrix.chance[ii]
        p = g + (1 - g) * pm.math.sigmoid(theta[jj] - b[ii])
        pm.Binomial("y", n=matrix.trials[jj, ii], p=p, observed=matrix.correct[jj, ii])
        t0 = time.perf_counter()
        idata = pm.sample(draws=1000, tune=1000, chains=4, target_accept=0.95, random_seed=seed, progressbar=False)
        seconds = time.perf_counter() - t0
    return idata, seconds


def jit_seconds(seed: int) -> float:
    """Seconds a fresh process with an empty numba cache spends compiling the NUTS kernels
    (it also leaves the cache warm for the timed run)."""
    import subprocess
    import tempfile

    code = (
        "import time, numpy as np\n"
        "from benchfill.irt.simulate import simulate_responses\n"
        "from benchfill.irt.likelihood import Posterior\n"
        "from benchfill.irt.sampling import Whitened\n"
        f"m = simulate_responses(12, 1299, 4, difficulty_sd=1.5, seed={seed}).matrix\n"
        "post = Posterior(m)\n"
        "w = Whitened(post, np.zeros(post.dim))\n"
        "t0 = time.perf_counter()\n"
        "from benchfill.irt.nuts_kernel import warm_up\n"
        "warm_up(w.compiled_data(), post.dim)\n"
        "print(time.perf_counter() - t0)\n"
    )
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "NUMBA_CACHE_DIR": cache},
                             check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def bench_nuts(seed: int, skip_pymc: bool) -> None:
    from benchfill.irt import fit
    from benchfill.irt.convergence import ess_bulk, rhat
    from benchfill.irt.simulate import simulate_responses

    sim = simulate_responses(12, 1299, 4, difficulty_sd=1.5, seed=seed)
    t_jit = jit_seconds(seed)
    t0 = time.perf_counter()
    ours = fit(sim.matrix, engine="nuts", seed=seed)
    t_ours = time.perf_counter() - t0
    d = ours.diagnostics
    print("(b) NUTS 1,299 items x 12 models x 4 trials, 4 chains x (1,000 warm-up + 1,000 draws), target 0.95")
    print(f"    benchfill NUTS  {t_ours:7.1f} s  max R-hat {d['max_rhat']:.4f}  min bulk ESS {d['min_ess_bulk']:.0f}"
          f"  ({d['min_ess_bulk'] / t_ours:.0f} per second)  divergences {d['divergences']}"
          f"  mean tree depth {d['mean_tree_depth']:.2f}")
    print(f"    numba JIT on a cold cache (fresh process, empty NUMBA_CACHE_DIR) {t_jit:.1f} s; the run above"
          " found the cache warm (cache=True: paid once per machine)")
    print(f"    corr(posterior mean b, true b) {np.corrcoef(ours.difficulty, sim.difficulty)[0, 1]:.4f}")
    if skip_pymc:
        return
    idata, t_pymc = pymc_fit(sim.matrix, seed)
    post = idata.posterior
    draws = np.concatenate([post["theta"].values, post["b"].values], axis=2)  # (chains, draws, p)
    b_mean = post["b"].values.mean(axis=(0, 1))
    b_sd = post["b"].values.reshape(-1, sim.matrix.n_items).std(axis=0, ddof=1)
    divergent = int(idata.sample_stats["diverging"].values.sum())
    print(f"    PyMC pm.sample  {t_pymc:7.1f} s  max R-hat {np.max(rhat(draws)):.4f}  min bulk ESS"
          f" {np.min(ess_bulk(draws)):.0f}  ({np.min(ess_bulk(draws)) / t_pymc:.0f} per second)  divergences {divergent}")
    print(f"    ratio           {t_pymc / t_ours:7.1f}x (PyMC seconds / benchfill seconds, wall, both caches warm)")
    print(f"    ratio, cold JIT {t_pymc / (t_ours + t_jit):7.1f}x (benchfill seconds + its cold-cache compile)")
    print(f"    posterior means: max |diff b| {np.max(np.abs(b_mean - ours.difficulty)):.3f}, "
          f"corr {np.corrcoef(b_mean, ours.difficulty)[0, 1]:.5f}; sds: max |diff| "
          f"{np.max(np.abs(b_sd - ours.difficulty_se)):.3f}, mean ratio {np.mean(ours.difficulty_se / b_sd):.3f}")


def bench_online(seed: int) -> None:
    from scipy.optimize import minimize_scalar

    from benchfill.irt import online_calibrate

    theta, chance = np.linspace(-2.0, 2.5, 12), 0.1
    k = np.full(12, 8)
    rng = np.random.default_rng(seed)
    b_true = rng.uniform(-1.5, 2.0, 1000)  # inside the panel's reach: every item has a finite MLE
    p = chance + (1 - chance) / (1 + np.exp(b_true[:, None] - theta[None, :]))
    cs = rng.binomial(k, p)
    online_calibrate(cs[0], k, theta, chance=chance)  # imports and first-call costs out of the timing
    t0 = time.perf_counter()
    ours = [online_calibrate(c, k, theta, chance=chance) for c in cs]
    t_ours = time.perf_counter() - t0

    def negll(b, c):
        q = chance + (1 - chance) / (1 + np.exp(b - theta))
        return -np.sum(c * np.log(q) + (k - c) * np.log1p(-q))

    t0 = time.perf_counter()
    ref = [minimize_scalar(negll, bounds=(-10, 10), args=(c,), method="bounded", options={"xatol": 1e-8}) for c in cs]
    t_ref = time.perf_counter() - t0
    finite = [i for i, e in enumerate(ours) if e.finite_mle]
    diff = max(abs(ours[i].difficulty - ref[i].x) for i in finite)
    print(f"online_calibrate, 1,000 items x 12 probes x 8 trials: {1e3 * t_ours / len(cs):.3f} ms a call; "
          f"scipy bounded minimize_scalar {1e3 * t_ref / len(cs):.3f} ms ({t_ref / t_ours:.1f}x); "
          f"max |b difference| {diff:.1e} over the {len(finite)} items with a finite MLE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-pymc", action="store_true", help="only benchfill's NUTS (quick runs)")
    ap.add_argument("--skip-map", action="store_true")
    ap.add_argument("--skip-nuts", action="store_true")
    ap.add_argument("--skip-online", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"cpus available: {len(os.sched_getaffinity(0))}, load average: {os.getloadavg()[0]:.1f}")
    if not args.skip_map:
        bench_map()
    if not args.skip_nuts:
        bench_nuts(args.seed, args.skip_pymc)
    if not args.skip_online:
        bench_online(args.seed)


if __name__ == "__main__":
    main()
