"""Item profiles (BSDProbe) on every real matrix in ../shared/data, in one run.

Prints, side by side:
1. speed on mmlu-pro (12,032 items x 29 models): profiling with a cold calibration (every trials
   vector simulated once), with the calibration on disk, and in memory, against what one
   calibration per item would cost (the time of one calibration x the number of items);
2. the order-anomaly rate (share of items with o <= 0.05) of every matrix with >= 8 models, on
   the axis of models ordered by empirical performance;
3. the five most anomalous items of livecodebench-codegen and cruxeval (10 trials each), with
   their correctness trajectories (one digit per model, weakest first: 0 = 0-9%, 9 = 90-100%);
4. response-budget sensitivity (Appendix H.1) on the 10-trial matrices: half of each pair's responses
   drawn without replacement (hypergeometric on the counts), five repetitions; agreement of the review
   flags with the full budget, and the mean absolute change of x and w on items rising in both;
5. profile-guided subsets against random ones of the same size (NDR and Kendall tau-b), on an
   eight-model axis (models evenly spaced in strength, as the paper's short axes), in sample
   (selected and evaluated on those eight) and out of sample (evaluated on all other models).

Usage: nice -n 10 .venv/bin/python bench/bench_profiles.py [--only NAME ...] [--skip-subsets]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("BENCHFILL_SHARED_DATA") or ROOT.parent / "shared" / "data")
TOP5 = ("livecodebench-codegen", "cruxeval-input", "cruxeval-output")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", help="matrix folders to run (default: all)")
    ap.add_argument("--skip-subsets", action="store_true")
    ap.add_argument("--subset-size", type=int, default=100)
    args = ap.parse_args()
    from benchfill.data import read_responses
    from benchfill.measure import order_test
    from benchfill.measure.profiles import profile

    cache = tempfile.mkdtemp(prefix="bench-profiles-")
    os.environ["BENCHFILL_CACHE_DIR"] = cache  # cold start, and nothing left in the user's cache
    names = sorted(p.parent.name for p in DATA.glob("*/responses.csv"))
    if args.only:
        names = [n for n in names if n in args.only]

    if "mmlu-pro" in names:
        m = read_responses(DATA / "mmlu-pro" / "responses.csv")
        order_test.clear_memory_cache()
        t0 = time.perf_counter()
        bp = profile(m)
        cold = time.perf_counter() - t0
        order_test.clear_memory_cache()
        t0 = time.perf_counter()
        profile(m)
        disk = time.perf_counter() - t0
        t0 = time.perf_counter()
        profile(m)
        warm = time.perf_counter() - t0
        n_cal = len(np.unique(m.trials.T[:, m.trials.sum(axis=1) > 0], axis=0))
        t0 = time.perf_counter()
        order_test.calibration([1] * m.n_models, seed=12345, cache_dir=False)
        one = time.perf_counter() - t0
        print(f"== speed: mmlu-pro, {m.n_items} items x {m.n_models} models, {n_cal} trials vectors")
        print(f"  cold calibration {cold:6.2f} s | calibration on disk {disk:6.2f} s | in memory {warm:6.2f} s")
        print(f"  one calibration {one:.2f} s; one per item would take ~{one * m.n_items / 60:.0f} min "
              f"({one * m.n_items / cold:.0f}x the cold run, {one * m.n_items / warm:.0f}x the warm run)")
        print(f"  order-anomaly rate {bp.order_anomaly_rate:.1%}")

    print("\n== order-anomaly rates (o <= 0.05), models ordered by empirical performance")
    print(f"  {'matrix':<24} {'models':>6} {'items':>6} {'trials':>7} {'anomaly':>8} {'flat':>6} {'time s':>7}")
    profiles = {}
    for name in names:
        m = read_responses(DATA / name / "responses.csv")
        if m.n_models < 8:
            print(f"  {name:<24} {m.n_models:>6} {m.n_items:>6}  (fewer than 8 models: skipped)")
            continue
        t0 = time.perf_counter()
        bp = profile(m)
        dt = time.perf_counter() - t0
        profiles[name] = (m, bp)
        tv = np.unique(m.trials[m.trials > 0])
        trials = str(tv[0]) if tv.size == 1 else f"{tv.min()}-{tv.max()}"
        s = bp.summary()
        print(f"  {name:<24} {m.n_models:>6} {m.n_items:>6} {trials:>7} {s['order_anomaly_rate']:>8.1%} "
              f"{s['flat_share']:>6.1%} {dt:>7.2f}")
        sys.stdout.flush()

    for name in TOP5:
        if name not in profiles:
            continue
        m, bp = profiles[name]
        print(f"\n== {name}: five most anomalous items (axis weakest -> strongest, {m.n_models} models)")
        for p in bp.ranked()[:5]:
            traj = "".join("." if c != c else str(min(int(c * 10), 9)) for c in p.correctness)
            print(f"  {p.item_id:<22} o={p.order_consistency:.4f} D={p.statistic:7.1f} gain={p.gain:.2f}  {traj}")

    _budget(profiles)
    if not args.skip_subsets:
        _subsets(profiles, args.subset_size)


def _budget(profiles: dict) -> None:
    from benchfill.matrix import ResponseMatrix
    from benchfill.measure.profiles import profile

    names = [n for n in TOP5 if n in profiles]
    if not names:
        return
    print("\n== response-budget sensitivity: half the responses (T -> ceil(T/2)), 5 repetitions")
    print(f"  {'matrix':<24} {'flag agreement':>15} {'x MAE':>7} {'w MAE':>7} {'anomaly rate':>13}")
    for name in names:
        m, full = profiles[name]
        rng = np.random.default_rng(0)
        agree, xe, we, rate = [], [], [], []
        for _ in range(5):
            half = np.ceil(m.trials / 2).astype(np.int64)
            k = np.where(m.trials > 0, rng.hypergeometric(m.correct, m.trials - m.correct, np.maximum(half, 1)), 0)
            sub = profile(ResponseMatrix(m.models, m.item_ids, k, half, m.chance, m.source), order=full.axis.models)
            a = np.array([(p.flagged, p.flat, p.position, p.width) for p in full.items], dtype=float)
            b = np.array([(p.flagged, p.flat, p.position, p.width) for p in sub.items], dtype=float)
            both = (a[:, 1] == 0) & (b[:, 1] == 0)
            agree.append(np.mean(a[:, 0] == b[:, 0]))
            xe.append(np.mean(np.abs(a[both, 2] - b[both, 2])))
            we.append(np.mean(np.abs(a[both, 3] - b[both, 3])))
            rate.append(sub.order_anomaly_rate)
        print(f"  {name:<24} {np.mean(agree):>15.1%} {np.mean(xe):>7.3f} {np.mean(we):>7.3f} {np.mean(rate):>13.1%}")
        sys.stdout.flush()


def _subsets(profiles: dict, size: int) -> None:
    from benchfill.measure.profiles import profile
    from benchfill.measure.profiles_subset import evaluate_subsets

    print(f"\n== subsets of {size} items (20 draws each): profile-guided vs random, mean NDR / Kendall tau-b")
    print("   eight-model axis (evenly spaced in strength); 'held out' = scores of all other models")
    print(f"  {'matrix':<24} {'':9} {'profile NDR':>12} {'random NDR':>11} {'profile tau':>12} {'random tau':>11}")
    for name, (m, full_bp) in profiles.items():
        k = min(size, m.n_items // 3)
        axis = full_bp.axis.models
        pick = np.round(np.linspace(0, len(axis) - 1, 8)).astype(int)
        short = [axis[i] for i in pick]
        rest = [mdl for mdl in axis if mdl not in short]
        keep = np.array([mdl in short for mdl in m.models])
        sub = m.drop_models(keep)
        bp = profile(sub, order=short)
        for label, ref, mat in (("in sample", short, sub), ("held out", rest, m)):
            r = evaluate_subsets(bp, mat, k, reference_models=ref, repeats=20)
            print(f"  {name:<24} {label:9} {r.ndr_profile[0]:>12.3f} {r.ndr_random[0]:>11.3f} "
                  f"{r.tau_profile[0]:>12.3f} {r.tau_random[0]:>11.3f}   (k={k})")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
