"""The Bayesian 1PL on mmlu-pro: benchfill's NUTS on CPU cores beside NumPyro's NUTS on a GPU.

The paper's recipe on the largest real matrix of ../shared/data (mmlu-pro: 12,032 items x 29 models,
chance 0.1, 12,061 parameters): 4 chains, 1,000 warm-up, 1,000 draws, target acceptance 0.95, N(0, 1)
priors, P(correct) = g + (1 - g) sigmoid(theta_j - b_i). Both samplers' draws go through the same
diagnostics (benchfill.irt.convergence: max R-hat, min bulk ESS), and the posterior means and sds of
b are compared item by item. benchfill runs its chains in parallel processes on the CPU (numba);
NumPyro runs its 4 chains vectorized on one GPU, in float64 (jax_enable_x64), as JAX compiles them.

NumPyro and a CUDA build of JAX are not benchfill dependencies: this script is for a GPU host that has
them (it says so and stops where they are missing). `--skip-numpyro` times benchfill alone.

    python bench/bench_fit_gpu.py [--seed 0] [--skip-numpyro] [--skip-benchfill] [--save means.npz]
    python bench/bench_fit_gpu.py --skip-numpyro --compare gpu_means.npz   # the GPU host's --save, compared here
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import shared_data  # noqa: E402

RECIPE = dict(chains=4, warmup=1000, draws=1000, target_accept=0.95)


def load():
    from benchfill.data import read_responses

    return read_responses(shared_data() / "mmlu-pro" / "responses.csv").with_chance(0.1)


def run_benchfill(matrix, seed: int):
    from benchfill.irt import fit
    from benchfill.irt.nuts_kernel import warm_up  # noqa: F401  (import cost outside the clock)

    t0 = time.perf_counter()
    f = fit(matrix, engine="nuts", seed=seed, **RECIPE)
    seconds = time.perf_counter() - t0
    d = f.diagnostics
    return (
        f.difficulty,
        f.difficulty_se,
        seconds,
        d["max_rhat"],
        d["min_ess_bulk"],
        d["divergences"],
        d.get("mean_tree_depth", float("nan")),
    )


def run_numpyro(matrix, seed: int):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    from benchfill.irt.convergence import ess_bulk, rhat

    jj, ii = np.nonzero(matrix.trials > 0)
    n_models, n_items = matrix.n_models, matrix.n_items
    data = dict(
        jj=jnp.asarray(jj),
        ii=jnp.asarray(ii),
        n=jnp.asarray(matrix.trials[jj, ii], dtype=jnp.float64),
        y=jnp.asarray(matrix.correct[jj, ii], dtype=jnp.float64),
        g=jnp.asarray(matrix.chance[ii], dtype=jnp.float64),
    )

    def model(jj, ii, n, y, g):
        theta = numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([n_models]))
        b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([n_items]))
        p = g + (1 - g) * jax.nn.sigmoid(theta[jj] - b[ii])
        numpyro.sample("y", dist.Binomial(total_count=n, probs=p), obs=y)

    def sample(warmup: int, draws: int):
        mcmc = MCMC(
            NUTS(model, target_accept_prob=RECIPE["target_accept"]),
            num_warmup=warmup,
            num_samples=draws,
            num_chains=RECIPE["chains"],
            chain_method="vectorized",
            progress_bar=False,
        )
        t0 = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), extra_fields=("diverging", "num_steps"), **data)
        b = np.asarray(mcmc.get_samples(group_by_chain=True)["b"])  # forces the device work to finish
        return mcmc, b, time.perf_counter() - t0

    _, _, t_short = sample(10, 10)  # compile + fixed costs, with a run too short to matter
    mcmc, b, seconds = sample(RECIPE["warmup"], RECIPE["draws"])
    theta = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"])
    draws = np.concatenate([theta, b], axis=2)  # (chains, draws, parameters), as benchfill's diagnostics take
    extra = mcmc.get_extra_fields(group_by_chain=True)
    depth = float(np.mean(np.log2(np.asarray(extra["num_steps"]) + 1)))
    flat = b.reshape(-1, n_items)
    return (
        flat.mean(axis=0),
        flat.std(axis=0, ddof=1),
        seconds,
        float(np.max(rhat(draws))),
        float(np.min(ess_bulk(draws))),
        int(np.asarray(extra["diverging"]).sum()),
        depth,
        t_short,
        str(jax.devices()[0]),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-numpyro", action="store_true")
    ap.add_argument("--skip-benchfill", action="store_true")
    ap.add_argument(
        "--warmup", type=int, default=RECIPE["warmup"], help="warm-up iterations per chain (default 1000)"
    )
    ap.add_argument("--draws", type=int, default=RECIPE["draws"], help="draws per chain (default 1000)")
    ap.add_argument(
        "--save", metavar="FILE.npz", help="also write each sampler's posterior means and sds of b"
    )
    ap.add_argument("--compare", metavar="FILE.npz",
                    help="compare the posterior of b with another run's --save (a GPU host's, say)")
    args = ap.parse_args()
    RECIPE.update(warmup=args.warmup, draws=args.draws)
    matrix = load()
    print(
        f"mmlu-pro: {matrix.n_items} items x {matrix.n_models} models, {int((matrix.trials > 0).sum())} observed "
        f"cells, chance 0.1; {RECIPE['chains']} chains x ({RECIPE['warmup']} warm-up + {RECIPE['draws']} draws), "
        f"target {RECIPE['target_accept']}; cpus {len(os.sched_getaffinity(0))}",
        flush=True,
    )
    rows = {}
    head = f"{'sampler':<40}{'wall s':>9}{'max R-hat':>11}{'min bulk ESS':>14}{'ESS/s':>8}{'diverg.':>9}{'tree depth':>12}"

    def row(name: str, r: tuple) -> None:  # each row as it comes
        rows[name] = r
        if args.save:  # rewritten after each row, so a run cut short keeps what it finished
            np.savez(
                args.save,
                **{f"{k.split()[0]}_{q}": v[i] for k, v in rows.items() for i, q in ((0, "mean"), (1, "sd"))},
            )
        _, _, s, rh, ess, div, depth = r
        print(f"{name:<40}{s:>9.1f}{rh:>11.4f}{ess:>14.0f}{ess / s:>8.1f}{div:>9}{depth:>12.2f}", flush=True)

    print(head)
    if not args.skip_benchfill:  # first: its chains fork, which JAX's threads make unsafe once it is loaded
        row(f"benchfill NUTS (CPU, {RECIPE['chains']} processes)", run_benchfill(matrix, args.seed))
    if not args.skip_numpyro:
        try:
            import jax  # noqa: F401
            import numpyro  # noqa: F401
        except ImportError as e:
            sys.exit(f"bench_fit_gpu: needs numpyro and jax ({e}); or --skip-numpyro")
        r = run_numpyro(matrix, args.seed)
        print(f"  (NumPyro's 10 + 10 iteration run, its compile and fixed costs: {r[7]:.1f} s)", flush=True)
        row(f"NumPyro NUTS ({r[8]})", r[:7])
    pairs = []
    if len(rows) == 2:
        (n1, (m1, s1, t1, *_)), (n2, (m2, s2, t2, *_)) = rows.items()
        print(f"ratio (benchfill wall / NumPyro wall): {t1 / t2:.2f}x")
        pairs.append((n1, m1, s1, n2, m2, s2))
    if args.compare:
        other = np.load(args.compare)
        for key in (k for k in other.files if k.endswith("_mean")):
            name = key[: -len("_mean")]
            pairs += [(n, r[0], r[1], f"{name} ({args.compare})", other[key], other[f"{name}_sd"])
                      for n, r in rows.items()]
    for n1, m1, s1, n2, m2, s2 in pairs:
        print(f"{n1} vs {n2}: posterior means of b: corr {np.corrcoef(m1, m2)[0, 1]:.5f}, max |diff| "
              f"{np.max(np.abs(m1 - m2)):.3f}, rms diff {np.sqrt(np.mean((m1 - m2) ** 2)):.4f} (median sd "
              f"{np.median(s1):.3f}); sds: mean ratio {np.mean(s1 / s2):.4f}, max |diff| {np.max(np.abs(s1 - s2)):.3f}")


if __name__ == "__main__":
    main()
