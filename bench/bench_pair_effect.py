"""Do one model's repeated answers to one item agree with each other more than the IRT curve says?

Real matrices with several trials per (model, item) against the simulated world's panel answering the same
items as often, at several sizes of the world's (probe, item) offset (`World.pair_sd`, logits). For each
matrix, a 2PL MAP fit of that very matrix gives the curve p; the Pearson dispersion
phi = mean (c - n p)^2 / (n p (1 - p)) over cells with 0.02 < p < 0.98 and n >= 2 is 1 for answers drawn
independently around the curve, and phi - 1 = (n - 1) x the correlation of two answers of one pair.
The real rows are those of the models the world's 12 probes stand for; the world's rows are drawn through
`World.p_correct`, each probe answering each item as often as its model did.

Usage: .venv/bin/python bench/bench_pair_effect.py [--sets livecodebench-codegen cruxeval-output]
       [--pair-sd 0 1 2 3 4]
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


def dispersion(m: ResponseMatrix) -> float:
    f = irt_fit(m, engine="map", model="2pl")
    x = f.discrimination[None, :] * (f.ability[:, None] - f.difficulty[None, :])
    g = f.chance[None, :]
    p = g + (1 - g) / (1 + np.exp(-x))
    n, c = m.trials.astype(float), m.correct.astype(float)
    ok = (n >= 2) & (p > 0.02) & (p < 0.98)
    return float(((c - n * p) ** 2 / (n * p * (1 - p)))[ok].mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["livecodebench-codegen", "cruxeval-output"])
    ap.add_argument("--pair-sd", nargs="+", type=float, default=[0.0, 1.0, 2.0, 3.0, 4.0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in args.sets:
        t0 = time.perf_counter()
        bench, _ = load_set(name, 10**6, args.seed)
        m, spec = bench.given_matrix(), bench.spec
        if m.trials.max() < 2:
            print(f"{name}: one trial per cell, nothing to measure")
            continue
        row = [f"{name} ({m.n_items} items, trials {'/'.join(map(str, np.unique(m.trials)))}): real {{}}"]
        real = None
        for sd in args.pair_sd:
            w = World.from_items(bench.items, evaluator=spec.evaluator, text_field=spec.text_field,
                                 answer_field=spec.answer_field, matrix=m, seed=args.seed, n_probes=12, pair_sd=sd)
            rows = [m.models.index(w.source_models[p]) for p in w.probes]
            if real is None:
                real = dispersion(ResponseMatrix(tuple(w.probes), m.item_ids, m.correct[rows], m.trials[rows],
                                                 m.chance, "real"))
            items = [w.lookup(i) for i in m.item_ids]
            p = np.array([[w.p_correct(q, it) for it in items] for q in w.probes])
            drawn = np.random.default_rng(args.seed).binomial(m.trials[rows], p)
            sim = ResponseMatrix(tuple(w.probes), m.item_ids, drawn, m.trials[rows], m.chance, "world")
            row.append(f"pair_sd {sd:g}: {dispersion(sim):.2f}")
        print(row[0].format(f"{real:.2f}") + "; world " + ", ".join(row[1:]) + f"  ({time.perf_counter() - t0:.0f} s)",
              flush=True)


if __name__ == "__main__":
    main()
