"""Does a confirmation on fresh rollouts undo the selection's winner's curse when probes agree with themselves?

The search chooses the child whose annotated z lies nearest the target, and then places it by a confirmation:
fresh rollouts, so that the error the choice favoured is not the error it is scored by. That holds when a
placement's error is sampling. Where each probe has its own offset on an item (the world's ``pair_sd``; real
models' answers agree with themselves far beyond the IRT curve, bench/bench_pair_effect.py), fresh rollouts
come from the same probes, with the same offsets: that part of the annotation's error is the confirmation's too.

This places each of the demo's 48 items twice through the run's annotator (the fixed protocol, 8 answers per
probe, two request keys: an annotation and a confirmation) and prints, per world, the correlation of the two
placements' errors against the world's truth (each error a residual about one line of placement on true b,
fitted over both), and the winner's curse that survives: among random sets of items, the one annotated nearest a
random target, how far its confirmation and its true b lie from that target.

    python bench/bench_confirm_offsets.py [--seeds 3] [--pair-sd 0 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import numpy as np
from _common import ROOT

sys.path.insert(0, str(ROOT))


def placements(pair_sd: float, seed: int):
    """(true b, annotated b, confirmed b) per item of the demo, in one world."""
    from benchfill.benchmarks import get_benchmark
    from benchfill.engine.backend import panel_probes
    from benchfill.irt.engine import fit as irt_fit
    from benchfill.search.annotate import Annotator
    from benchfill.sim import World
    from benchfill.sim.direct import WorldServices

    bench = get_benchmark("demo")
    spec, items = bench.spec, bench.items
    world = World.from_items(items, evaluator=spec.evaluator, text_field=spec.text_field,
                             answer_field=spec.answer_field, seed=seed, n_probes=12, pair_sd=pair_sd)
    services = WorldServices(world, spec, seed)
    fit = irt_fit(services.panel_matrix(items, trials=8), engine="map", seed=seed)
    probes = panel_probes(fit, [(p, 8) for p in world.probes])
    ann = Annotator(services, probes, float(np.median(fit.chance)), fit.b_min, fit.b_max, "fixed")
    rows = []
    for it in items:
        a = asyncio.run(ann.fixed(it["id"], it, f"annotate:{it['id']}"))
        c = asyncio.run(ann.fixed(it["id"], it, f"confirm:{it['id']}"))
        if "no_finite_mle" in a.flags or "no_finite_mle" in c.flags:
            continue
        rows.append((world.true_difficulty(it["id"]), a.difficulty, c.difficulty))
    return np.array(rows)


def curse(rows: np.ndarray, true: np.ndarray, rng: np.random.Generator, pick: int = 8,
          draws: int = 4000) -> tuple[float, float, float]:
    """Mean |annotated - target|, |confirmed - target| and |true - target| (``true``: the truth on the placement's
    scale) of the item annotated nearest a random target among ``pick`` random items."""
    out = np.zeros(3)
    for _ in range(draws):
        idx = rng.choice(len(rows), size=pick, replace=False)
        target = rng.uniform(true.min(), true.max())
        k = idx[np.argmin(np.abs(rows[idx, 1] - target))]
        out += np.abs([rows[k, 1] - target, rows[k, 2] - target, true[k] - target])
    return tuple(out / draws)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--pair-sd", type=float, nargs="+", default=[0.0, 5.0], metavar="SD")
    args = ap.parse_args()
    print("demo, 48 items, 12 probes x 8 answers each placing; errors are residuals about the line of placement "
          "on true b (logits)")
    print(f"{'pair_sd':>7} {'seed':>4} {'items':>5} {'sd err ann':>10} {'sd err conf':>11} {'corr':>6} "
          f"{'chosen: |ann-t|':>15} {'|conf-t|':>8} {'|true-t|':>8}")
    for sd in args.pair_sd:
        corrs, curses = [], []
        for seed in range(args.seeds):
            rows = placements(sd, seed)
            true = np.polyval(np.polyfit(rows[:, 0], rows[:, 1:].mean(axis=1), 1), rows[:, 0])
            err = rows[:, 1:] - true[:, None]
            r = float(np.corrcoef(err[:, 0], err[:, 1])[0, 1])
            c = curse(rows, true, np.random.default_rng([seed, 7]))
            corrs.append(r)
            curses.append(c)
            print(f"{sd:>7g} {seed:>4} {len(rows):>5} {err[:, 0].std():>10.3f} {err[:, 1].std():>11.3f} {r:>6.2f} "
                  f"{c[0]:>15.3f} {c[1]:>8.3f} {c[2]:>8.3f}")
        m = np.mean(curses, axis=0)
        print(f"{sd:>7g} mean over seeds: correlation {np.mean(corrs):.2f}; the chosen item's distance from the target "
              f"annotated {m[0]:.3f}, confirmed {m[1]:.3f}, true {m[2]:.3f} logits")


if __name__ == "__main__":
    main()
