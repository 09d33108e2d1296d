"""Do one model's repeated answers to one item agree with each other more than the IRT curve says?

Real matrices with several trials per (model, item) against the simulated world's panel answering the same
items as often, at several sizes of the world's (probe, item) offset (`World.pair_sd`, logits). For each
matrix, a 2PL MAP fit of that very matrix gives the curve p; the Pearson dispersion
phi = mean (c - n p)^2 / (n p (1 - p)) over cells with 0.02 < p < 0.98 and n >= 2 is 1 for answers drawn
independently around the curve, and phi - 1 = (n - 1) x the correlation of two answers of one pair.
The real rows are those of the models the world's 12 probes stand for; the world's rows are drawn through
`World.p_correct`, each probe answering each item as often as its model did.

Beside the dispersion, two figures say whether the world's rows are as informative as the real ones: the sd
of the probes' abilities in a 1PL MAP fit of the rows (how far apart the fit can tell the models: a world
whose curves are flatter than the real ones fits them closer together) and the share of cells (n >= 2)
answered all right or all wrong. Each offset size is drawn twice, with the offsets about the latent curve
(the world's default, `--pair-curve average`) and added to it (`added`, the world before s48).

Usage: .venv/bin/python bench/bench_pair_effect.py [--sets livecodebench-codegen cruxeval-output]
       [--pair-sd 0 1 2 3 4] [--curves average added]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import load_set  # noqa: E402

from benchfill.irt import fit as irt_fit  # noqa: E402
from benchfill.matrix import ResponseMatrix  # noqa: E402
from benchfill.sim import World  # noqa: E402
from benchfill.sim.world import PAIR_CURVES  # noqa: E402


def dispersion(m: ResponseMatrix) -> float:
    f = irt_fit(m, engine="map", model="2pl")
    x = f.discrimination[None, :] * (f.ability[:, None] - f.difficulty[None, :])
    g = f.chance[None, :]
    p = g + (1 - g) / (1 + np.exp(-x))
    n, c = m.trials.astype(float), m.correct.astype(float)
    ok = (n >= 2) & (p > 0.02) & (p < 0.98)
    return float(((c - n * p) ** 2 / (n * p * (1 - p)))[ok].mean())


def spread(m: ResponseMatrix) -> tuple[float, float]:
    """(sd of the 1PL MAP abilities, share of cells with n >= 2 all right or all wrong)."""
    f = irt_fit(m, engine="map", model="1pl")
    n, c = m.trials, m.correct
    many = n >= 2
    return float(np.std(f.ability)), float((((c == 0) | (c == n)) & many).sum() / max(many.sum(), 1))


def figures(m: ResponseMatrix) -> str:
    sd, whole = spread(m)
    return f"{dispersion(m):.2f} / {sd:.2f} / {whole:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["livecodebench-codegen", "cruxeval-output"])
    ap.add_argument("--pair-sd", nargs="+", type=float, default=[0.0, 1.0, 2.0, 3.0, 4.0])
    ap.add_argument("--curves", nargs="+", choices=PAIR_CURVES, default=list(PAIR_CURVES))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in args.sets:
        t0 = time.perf_counter()
        bench, _ = load_set(name, 10**6, args.seed)
        m, spec = bench.given_matrix(), bench.spec
        if m.trials.max() < 2:
            print(f"{name}: one trial per cell, nothing to measure")
            continue
        print(f"{name} ({m.n_items} items, trials {'/'.join(map(str, np.unique(m.trials)))}): dispersion / 1PL "
              "ability sd / all-or-none share", flush=True)
        real = None
        for curve in args.curves:
            for sd in args.pair_sd:
                if curve == "added" and sd == 0:  # no offsets: the two worlds are one
                    continue
                w = World.from_items(bench.items, evaluator=spec.evaluator, text_field=spec.text_field,
                                     answer_field=spec.answer_field, matrix=m, seed=args.seed, n_probes=12,
                                     pair_sd=sd, pair_curve=curve)
                rows = [m.models.index(w.source_models[p]) for p in w.probes]
                if real is None:
                    real = ResponseMatrix(tuple(w.probes), m.item_ids, m.correct[rows], m.trials[rows], m.chance,
                                          "real")
                    print(f"  the real rows          {figures(real)}", flush=True)
                items = [w.lookup(i) for i in m.item_ids]
                p = np.array([[w.p_correct(q, it) for it in items] for q in w.probes])
                drawn = np.random.default_rng(args.seed).binomial(m.trials[rows], p)
                sim = ResponseMatrix(tuple(w.probes), m.item_ids, drawn, m.trials[rows], m.chance, "world")
                print(f"  world {sd:>3g}, {curve:<8s}      {figures(sim)}", flush=True)
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
