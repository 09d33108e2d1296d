"""How far the fit's gap figures sit from the truth when difficulties spread wider than their prior.

The 1PL fit puts a N(0, 1) prior on every difficulty (benchfill/irt/likelihood.py). Real benchmarks fitted
under it come out wider (MAP difficulty sd 1.6 on humaneval, 2.1 on cruxeval-input, 2.7 on
livecodebench-codegen), so the prior binds where an item is least measured: at the ends of the axis, where
the largest gaps lie. This script draws response matrices from a known 1PL at difficulty spreads from the
prior's own (sd 1) to wider than real fits show, fits each with benchfill's MAP fit, and prints, side by
side, the mean over draws of the fitted and the true figures: max gap, top-3 gap sum and DDM, each on the
min-max scale (so no alignment of the two scales is needed), and the fitted / true ratio, for the fit under
the paper's N(0, 1) prior and, beside it on the same draws, under the hierarchical prior
(``fit(prior="hierarchical")``, benchfill/irt/hierarchical.py), whose spread is estimated from the items.

    python bench/bench_gap_bias.py                      # 49 models x 164 items, one trial (humaneval's shape)
    python bench/bench_gap_bias.py --models 37 --items 300 --trials 10    # cruxeval-like
    python bench/bench_gap_bias.py --draws 200
    python bench/bench_gap_bias.py --slopes 0.5 --chance 0.25   # a 2PL world with a guessing floor (MMLU-Pro-like)
    python bench/bench_gap_bias.py --engine nuts --spreads 1 2.2 --draws 10   # the posterior's intervals too
    python bench/bench_gap_bias.py --shape uniform --models 12 --items 1000 --trials 4 --spreads 1.15 --draws 20

``--shape uniform`` draws the true difficulties evenly spread (uniform, of the sd given), where the truth has
no gap to speak of: the figures then show what ties and measurement error alone make of evenly spread items,
and the last column (``P>0.95``) the share of draws where diagnose's P(observed > uniform) passed 0.95 on the
fit's z, against that share on the true z (about 0.05).

The fit is a 1PL either way; ``--slopes`` draws each item's discrimination as exp(N(0, SD^2)) and ``--chance``
gives every item that guessing floor (the fit is told it, as a multiple-choice benchmark's fit is), so the claim
can be tried on matrices that are not the 1PL the fit assumes.

With ``--engine nuts`` (the paper's sampler, at its defaults: 4 chains of 1,000 + 1,000) the figures are the
posterior means over the draws, each draw normalized by its own min and max as diagnose does, and each row adds
how often the 90% interval that diagnose prints (the draws' 5% and 95% quantiles) holds the true max gap and
DDM, and the share of items whose 90% interval of z holds their true z. Under the hierarchical prior the draws
are taken under the estimated N(mu_b, sigma_b^2) (empirical Bayes).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from _common import ROOT

sys.path.insert(0, str(ROOT))


def main() -> None:
    from benchfill.coverage import ddm, max_gap, prob_max_gap_exceeds_uniform, top_k_gap_sum
    from benchfill.irt import fit
    from benchfill.irt.simulate import simulate_responses

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=49)
    ap.add_argument("--items", type=int, default=164)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--ability-sd", type=float, default=1.2)
    ap.add_argument("--spreads", type=float, nargs="+", default=[1.0, 1.5, 2.2, 3.0], help="sd of the true difficulties")
    ap.add_argument("--shape", choices=("normal", "uniform"), default="normal",
                    help="how the true difficulties spread (default normal; uniform: evenly, no gap)")
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--slopes", type=float, default=0.0, metavar="SD",
                    help="sd of the items' log discrimination (default 0: every slope 1, the 1PL the fit assumes)")
    ap.add_argument("--chance", type=float, default=0.0, metavar="G", help="every item's guessing floor (default 0)")
    ap.add_argument("--engine", choices=("map", "nuts"), default="map",
                    help="map (default) or nuts: posterior draws, and how often their 90%% intervals hold the truth")
    args = ap.parse_args()
    if args.slopes < 0:
        ap.error(f"--slopes: expected an sd >= 0, got {args.slopes}")
    if not 0 <= args.chance < 1:
        ap.error(f"--chance: expected a floor in [0, 1), got {args.chance}")
    warnings.simplefilter("ignore")  # a draw's extreme items warn of their priors; the figures say enough
    print(f"bench_gap_bias: {args.models} models x {args.items} items, {args.trials} trial(s) each, ability sd "
          f"{args.ability_sd:g}; {args.shape} difficulties; log slope sd {args.slopes:g}; guessing floor {args.chance:g}; {args.draws} draws per "
          f"spread; {'NUTS posterior (4 chains of 1,000 + 1,000)' if args.engine == 'nuts' else 'MAP'} 1PL fit; "
          "figures on the min-max scale, mean over draws")
    nuts = args.engine == "nuts"
    cover = f"   {'90% holds: max gap':>18} {'DDM':>5} {'item z':>6}" if nuts else ""
    print(f"{'b sd':>5} {'prior':>12} {'fitted b sd':>12}   {'max gap fit/true':>20} {'ratio':>6}   "
          f"{'top-3 sum fit/true':>20} {'ratio':>6}   {'DDM fit/true':>18} {'ratio':>6}   {'r(b)':>6}   "
          f"{'P>0.95 fit/true':>15}{cover}")
    t0 = time.perf_counter()
    for sd in args.spreads:
        rows: dict[str, list] = {"normal": [], "hierarchical": []}
        for d in range(args.draws):
            # The slopes from a stream of their own, so that --slopes 0 draws exactly the matrices it always did.
            slopes = np.exp(np.random.default_rng([10_000 + d, 0x5109E]).normal(0.0, args.slopes, args.items))
            sim = simulate_responses(args.models, args.items, args.trials, ability_sd=args.ability_sd,
                                     difficulty_sd=sd, seed=10_000 + d, chance=args.chance,
                                     discrimination=slopes if args.slopes else None, difficulty_shape=args.shape)
            zt = (sim.difficulty - sim.difficulty.min()) / np.ptp(sim.difficulty)
            for prior, got in rows.items():
                f = fit(sim.matrix, prior=prior, engine=args.engine)
                zf = np.asarray(f.z, dtype=float)
                if nuts:  # the posterior means over the draws, as diagnose gives them
                    zd = f.z_draws
                    gap_d = np.array([max_gap(r) for r in zd])
                    ddm_d = np.array([ddm(r) for r in zd])
                    figures = (float(np.mean(gap_d)), float(np.mean([top_k_gap_sum(r, 3) for r in zd])),
                               float(np.mean(ddm_d)))
                    lo, hi = np.quantile(zd, [0.05, 0.95], axis=0)
                    holds = (_within(gap_d, max_gap(zt)), _within(ddm_d, ddm(zt)),
                             float(np.mean((zt >= lo) & (zt <= hi))))
                else:
                    figures, holds = (max_gap(zf), top_k_gap_sum(zf, 3), ddm(zf)), ()
                # diagnose's P(observed > uniform) on the fit's point z (n - 2 free points between the fixed ends)
                p_fit = prob_max_gap_exceeds_uniform(max_gap(zf), args.items - 2)
                p_true = prob_max_gap_exceeds_uniform(max_gap(zt), args.items - 2)
                got.append((float(np.std(f.difficulty)), figures[0], max_gap(zt), figures[1], top_k_gap_sum(zt, 3),
                            figures[2], ddm(zt), np.corrcoef(f.difficulty, sim.difficulty)[0, 1], *holds,
                            float(p_fit > 0.95), float(p_true > 0.95)))
        for prior, got in rows.items():
            m = np.mean(got, axis=0)
            held = f"   {m[8]:>18.2f} {m[9]:>5.2f} {m[10]:>6.2f}" if nuts else ""
            shares = f"   {m[-2]:>6.2f} / {m[-1]:<6.2f}"
            print(f"{sd:>5.1f} {prior:>12} {m[0]:>12.2f}   {m[1]:>9.4f} / {m[2]:<8.4f} {m[1] / m[2]:>6.2f}   "
                  f"{m[3]:>9.4f} / {m[4]:<8.4f} {m[3] / m[4]:>6.2f}   {m[5]:>8.4f} / {m[6]:<7.4f} {m[5] / m[6]:>6.2f}   "
                  f"{m[7]:>6.3f}{shares}{held}", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")


def _within(draws: np.ndarray, truth: float) -> float:
    """1 where ``truth`` lies in the draws' 90% interval (their 5% and 95% quantiles, as diagnose prints it)."""
    lo, hi = np.quantile(draws, [0.05, 0.95])
    return float(lo <= truth <= hi)


if __name__ == "__main__":
    main()
