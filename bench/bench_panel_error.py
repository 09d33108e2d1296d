"""How far the probe panel's fitted abilities sit from the world's truth, and what that does to a placement.

Every child is placed through the probes' fitted abilities. An item placed through one probe inherits
that probe's ability error one for one, whatever the number of rollouts, so this script takes the limit
of infinitely many rollouts (the expected answers, solved for b): an item truly at each top-3 gap's
midpoint, placed through the two probes nearest it (what the annotator did before it knew the probes'
ability errors) and through all of them. Side by side, per set over seeds:

  ability rms    rms of (fitted theta - the world's theta mapped onto the fit), logits
  shared         rms over seeds of that error's mean over the panel: the part all probes share (an offset of
                 the whole panel), which no number of probes averages away
  fit's se       rms of the fit's Laplace standard errors of those abilities
  2 nearest      rms placement error (z) of a midpoint item through the two probes nearest it
  all probes     the same through all the probes (information-weighted)
  share ceiling  the share of the oracle's true top-3 reduction (bench_search.py's) that a search reaches
                 when each gap's chosen item is placed EXACTLY on its target through all the probes: its
                 true z then sits off the target by that placement error. It is the limit of the 1PL's
                 placement of an item of latent slope 1; the annotator weighs the slopes by the answers,
                 and where the fitted scale is compressed against the latent one (bench_search.py
                 --world-matrix) a search has reached more (docs/sim-rewriter.md, "Where issue 10's bars
                 stand").
  half-width     the top-3 gaps' mean half-width (z), against which the placement errors count: on a
                 whole set (a large --max-items) the gaps are narrower than on bench_search.py's subsample

    python bench/bench_panel_error.py            # demo, aime25, humaneval; seeds 0-5; at most 60 items; 12x8
    python bench/bench_panel_error.py --panel 12x8 24x8 48x8   # panels side by side, in one run
    python bench/bench_panel_error.py --sets demo aime25 humaneval mbpp livecodebench-codegen \
        cruxeval-output chembench --max-items 150    # the full sweep's sets
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from _common import ROOT

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def placed_b(world, probes, chance: float, b_true: float, used) -> float:
    """The placement with infinite rollouts: the online calibration's MLE at the expected answers of
    the ``used`` probes (one trial each, answered with their TRUE probability of being right)."""
    from benchfill.irt import online_calibrate

    th_true = np.array([world.abilities[q.name] for q in probes])[used]
    th_hat = np.array([q.ability for q in probes])[used]
    expected = chance + (1 - chance) / (1 + np.exp(-(th_true - b_true)))
    return float(online_calibrate(expected, np.ones_like(expected), th_hat, chance=chance).difficulty)


def main() -> None:
    import bench_search as bs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="*", default=["demo", "aime25", "humaneval"])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--max-items", type=int, default=60, help="subsample larger sets (bench_search: 60 quick, 150)")
    ap.add_argument("--panel", type=bs.panel_arg, nargs="+", default=[(12, 8)], metavar="NxK",
                    help="the probe panel: N probes, K trials (default 12x8); several: each in turn, and their "
                         "share ceilings side by side at the end")
    args = ap.parse_args()
    ceilings: dict[tuple[int, int], dict[str, float]] = {}
    for panel in args.panel:
        bs.PANEL = panel
        print(f"panel {panel[0]}x{panel[1]}")
        ceilings[panel] = panel_rows(bs, args.sets, args.seeds, args.max_items)
    if len(args.panel) > 1:
        labels = [f"{n}x{k}" for n, k in args.panel]
        print("\nshare ceiling by panel")
        print(f"{'set':<24}" + "".join(f"{x:>10}" for x in labels))
        for name in args.sets:
            print(f"{name:<24}" + "".join(f"{ceilings[p][name]:>10.2f}" for p in args.panel))
        print(f"{'mean':<24}" + "".join(f"{np.mean(list(ceilings[p].values())):>10.2f}" for p in args.panel))


def panel_rows(bs, sets: list[str], seeds: int, max_items: int) -> dict[str, float]:
    """The table's rows for the panel ``bs.PANEL`` holds; each set's share ceiling."""
    from benchfill import coverage
    from benchfill.search import oracle_fill
    from benchfill.sim.truth import true_scale

    print(f"{'set':<24}{'items':>6}{'ability rms':>13}{'shared':>8}{'fit se':>9}{'2 nearest (z)':>15}{'all probes (z)':>16}"
          f"{'share ceiling':>15}{'half-width':>12}")
    ceiling = {}
    for name in sets:
        resid, shared, ses, near2, every, red_ceiling, red_oracle, half = [], [], [], [], [], [], [], []
        for seed in range(seeds):
            bench, _ = bs.load_set(name, max_items, seed)
            sim = bs.sim_setup(bench, "realistic", {}, seed)
            scale = true_scale(sim.world, sim.fit)
            se = dict(zip(sim.fit.models, sim.fit.ability_se, strict=True))
            probes = sorted(sim.probes, key=lambda q: q.name)
            resid += [q.ability - scale.fitted_b(sim.world.abilities[q.name]) for q in probes]
            shared.append(float(np.mean(resid[-len(probes):])))
            ses += [se[q.name] for q in probes]
            span = sim.fit.b_max - sim.fit.b_min
            th_hat = np.array([q.ability for q in probes])
            truly_at = []  # where an item placed exactly on each target truly lies
            for g in coverage.gaps(sim.z, k=3, item_ids=sim.ids):
                mid = (g.left + g.right) / 2
                half.append((g.right - g.left) / 2)
                b_mid = sim.fit.b_min + mid * span
                b_latent = (b_mid - scale.intercept) / scale.slope  # the item truly at the midpoint
                nearest = np.argsort(np.abs(th_hat - b_mid), kind="stable")[:2]
                near2.append((placed_b(sim.world, probes, sim.chance, b_latent, nearest) - b_mid) / span)
                every.append((placed_b(sim.world, probes, sim.chance, b_latent, np.arange(len(probes))) - b_mid) / span)
                truly_at.append(mid - every[-1])  # to first order: placed at mid + e when truly at mid
            before = coverage.top_k_gap_sum(sim.z, 3)
            red_ceiling.append(1 - coverage.top_k_gap_sum(np.concatenate([sim.z, truly_at]), 3) / before)
            red_oracle.append(1 - coverage.top_k_gap_sum(np.concatenate([sim.z, oracle_fill(sim.z, 3)]), 3) / before)

        def rms(x):
            return float(np.sqrt(np.mean(np.square(x))))

        ceiling[name] = float(np.mean(red_ceiling) / np.mean(red_oracle))
        print(f"{name:<24}{len(sim.ids):>6}{rms(resid):>13.3f}{rms(shared):>8.3f}{rms(ses):>9.3f}{rms(near2):>15.4f}{rms(every):>16.4f}"
              f"{ceiling[name]:>15.2f}{np.mean(half):>12.4f}", flush=True)
    return ceiling


if __name__ == "__main__":
    main()
