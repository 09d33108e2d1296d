"""How much the order test's o depends on the size of its reference family.

BSDProbe (Appendix D.3) maximises o over 217 monotone reference vectors for n = 6 models and T = 20
trials and does not list them; benchfill's family (`reference_profiles`) has 86 at n = 6. o is a maximum
over the family, so a larger family can only raise it and flag fewer items. This run prints, side by side,
the flags at --alpha of the default family and of a superset with every level grid about three times
denser (951 vectors at n = 6), on the same items and the same statistic: monotone, shuffled and reversed
correctness profiles drawn at n models x T trials.

Usage: .venv/bin/python bench/bench_order_family.py [--models 6] [--trials 20] [--items 3000] [--draws 999]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import benchfill.measure.order_test as ot


def _items(rng: np.random.Generator, n: int, trials: int, count: int) -> np.ndarray:
    rows = []
    for i in range(count):
        p = np.sort(rng.uniform(0.05, 0.95, n))
        kind = i % 3  # a third each: monotone, shuffled (some reversal), fully reversed
        p = p if kind == 0 else p[rng.permutation(n)] if kind == 1 else p[::-1]
        rows.append(rng.binomial(trials, p))
    return np.array(rows)


def _o(trials: np.ndarray, stat: np.ndarray, draws: int) -> tuple[int, np.ndarray]:
    ot.clear_memory_cache()
    cal = ot.calibration(trials, draws=draws, seed=0, cache_dir=False)
    return len(cal.references), cal.p_value(stat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=6)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--items", type=int, default=3000)
    ap.add_argument("--draws", type=int, default=999)
    ap.add_argument("--alpha", type=float, default=0.05)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    trials = np.full(args.models, args.trials)
    correct = _items(rng, args.models, args.trials, args.items)
    stat = ot.lr_statistic(correct, np.broadcast_to(trials, correct.shape))

    t0 = time.perf_counter()
    n_default, o_default = _o(trials, stat, args.draws)
    t1 = time.perf_counter()
    saved = ot.FLAT_LEVELS, ot.LINEAR_LEVELS, ot.STEP_LEVELS
    try:  # a superset: the default levels and a denser grid, so o can only rise
        ot.FLAT_LEVELS = tuple(sorted(set(ot.FLAT_LEVELS) | set(np.round(np.linspace(0.01, 0.99, 50), 3))))
        ot.LINEAR_LEVELS = tuple(sorted(set(ot.LINEAR_LEVELS) | set(np.round(np.linspace(0.01, 0.99, 15), 3))))
        ot.STEP_LEVELS = tuple(sorted(set(ot.STEP_LEVELS) | set(np.round(np.linspace(0.02, 0.98, 13), 3))))
        n_dense, o_dense = _o(trials, stat, args.draws)
    finally:
        ot.FLAT_LEVELS, ot.LINEAR_LEVELS, ot.STEP_LEVELS = saved
    t2 = time.perf_counter()

    a = args.alpha
    print(f"{args.items} items, {args.models} models x {args.trials} trials, {args.draws} draws, alpha {a}")
    print(f"{'family':<10}{'vectors':>9}{'flagged':>9}{'mean o':>9}{'seconds':>9}")
    print(f"{'default':<10}{n_default:>9}{int((o_default <= a).sum()):>9}{o_default.mean():>9.4f}{t1 - t0:>9.2f}")
    print(f"{'dense':<10}{n_dense:>9}{int((o_dense <= a).sum()):>9}{o_dense.mean():>9.4f}{t2 - t1:>9.2f}")
    print(f"flags that differ: {int(((o_default <= a) != (o_dense <= a)).sum())}; "
          f"largest rise of o: {float((o_dense - o_default).max()):.4f}; ratio of vectors {n_dense / n_default:.1f}x")


if __name__ == "__main__":
    main()
