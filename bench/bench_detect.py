"""Why gaps matter: detecting a localized improvement, after the BenchFill paper's Table 12.

In the simulated world (benchfill.sim.World over a real benchmark's items; difficulties from a
fit of its real responses where the data has them, else the world's seeded draw), one probe model
gets a localized improvement: its logit rises by a shift (each of --shifts) only on items whose true
difficulty z lies inside the benchmark's largest gap. Over --reps repetitions (fresh rollouts each time, 32 per item
before and after, as in the paper) it counts how often the one-sided stratified randomization test
(benchfill.measure.detect) finds the gain at p < 0.05 on three benchmarks:

  original      the benchmark's own items
  + gap fill    plus one item placed in the gap, as benchfill places one: true z ~ N(gap centre,
                (width / 6)^2), i.e. the search's annotation lands it inside the gap
  + uniform     plus one item at a uniformly random z in [0, 1] (the paper's baseline adds an item
                without regard to the gap)

Rates come with their Monte Carlo standard error sqrt(r (1 - r) / reps). The script also times
100,000 permutations of 30 items x 32 rollouts (the test's default), median of five runs.

    python bench/bench_detect.py [--reps 1000] [--shifts 1,2,4] [--permutations 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from _common import shared_data

ROOT = Path(__file__).resolve().parent.parent




def time_permutations() -> float:
    from benchfill.measure.detect import stratified_permutation_test

    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, 30)
    cb, ca, t = rng.binomial(32, p), rng.binomial(32, p), np.full(30, 32)
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        stratified_permutation_test(cb, t, ca, t, permutations=100_000, seed=1)
        runs.append(time.perf_counter() - t0)
    return float(np.median(runs))


def world_for(name: str, data: Path, seed: int):
    from benchfill.data import read_items, read_responses
    from benchfill.sim import World

    items = read_items(data / name / "items.jsonl")
    responses = data / name / "responses.csv"
    matrix = read_responses(responses, items=items) if responses.is_file() else None
    return World.from_items(items, evaluator="math", text_field="problem", answer_field="answer",
                            matrix=matrix, seed=seed)  # fmt: skip


def experiment(name: str, data: Path, reps: int, shift: float, permutations: int, seed: int, rollouts: int = 32):
    from benchfill.coverage import gaps
    from benchfill.measure.detect import stratified_permutation_test

    world = world_for(name, data, seed)
    originals = [it for it in world.items.values() if it.origin == "original"]
    z = np.array([world.to_z(it.difficulty) for it in originals])
    gap = gaps(z, k=1)[0]
    centre = (gap.left + gap.right) / 2
    # The probe whose ability sits nearest the gap's centre: there its success is neither 0 nor 1.
    probe = min(world.abilities, key=lambda p: abs(world.abilities[p] - world.from_z(centre)))
    theta = world.abilities[probe]
    rng = np.random.default_rng([seed, 0xD7])

    def p_of(zz: np.ndarray, after: bool) -> np.ndarray:
        b = world.from_z(zz)
        bump = np.where((zz > gap.left) & (zz < gap.right), shift, 0.0) if after else 0.0
        return 1.0 / (1.0 + np.exp(-(theta - b + bump)))

    rates = {}
    for variant in ("original", "+ gap fill", "+ uniform"):
        hits = 0
        gains = []
        for _ in range(reps):
            if variant == "original":
                zz = z
            elif variant == "+ gap fill":
                zz = np.append(z, rng.normal(centre, gap.width / 6))
            else:
                zz = np.append(z, rng.uniform(0.0, 1.0))
            t = np.full(zz.size, rollouts)
            cb, ca = rng.binomial(rollouts, p_of(zz, False)), rng.binomial(rollouts, p_of(zz, True))
            gain, p = stratified_permutation_test(cb, t, ca, t, permutations=permutations, seed=rng)
            hits += p < 0.05
            gains.append(gain)
        r = hits / reps
        rates[variant] = (r, float(np.sqrt(r * (1 - r) / reps)), float(np.mean(gains)))
    return world, gap, probe, theta, rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--benchmarks", default="aime24,aime25")
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--shifts", default="1,2,4", help="logit rises inside the gap, one experiment each (default 1,2,4)")
    ap.add_argument("--permutations", type=int, default=2000, help="per test in the experiment (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = shared_data()

    secs = time_permutations()
    print(f"100,000 permutations, 30 items x 32 rollouts: {secs:.3f} s (median of 5; target well under 1 s)")
    print()
    print(f"localized improvement: logit rise inside the largest gap; {args.reps} repetitions, "
          f"32 rollouts per item before and after, {args.permutations} permutations per test, p < 0.05")
    print(f"{'benchmark':<10} {'latent':<6} {'largest gap (z)':<16} {'probe':<13} {'shift':>5} {'variant':<11} "
          f"{'items':>5} {'detection rate':>15} {'mean gain':>10}")
    notes = []
    for name in args.benchmarks.split(","):
        for shift in (float(x) for x in args.shifts.split(",")):
            t0 = time.perf_counter()
            world, gap, probe, theta, rates = experiment(name, data, args.reps, shift, args.permutations, args.seed)
            span = f"[{gap.left:.3f}, {gap.right:.3f}]"
            for variant, (r, se, g) in rates.items():
                n = 30 if variant == "original" else 31
                print(f"{name:<10} {world.latent_origin:<6} {span:<16} {probe:<13} {shift:>5.1f} {variant:<11} {n:>5} "
                      f"{r:>8.3f} ± {se:.3f} {g:>+10.4f}")
            print(f"  {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        notes.append(f"{name}: probe theta {theta:+.2f}, largest gap width {gap.width:.3f} ({gap.width:.1%} of the axis)")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
