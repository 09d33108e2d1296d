"""The order screen on the search's children, in the simulated world (issue 12, part 6).

Runs the BenchFill search (defaults: adaptive annotation, confirmation; steering off since s55) on the quick sets
with the realistic rewriter, several seeds, and counts, among the children the judge let through:

  invalid (wrong key)  the share the order screen flags (it should be most of them)
  valid                the share it flags (it should be at most about alpha = 5%)

Each child is screened on the probes its annotation asked (and, for a confirmed child, the
confirmation's probes pooled in); a child asked by fewer than two probes is "unscored". The
simulated slip (RewriterModel.slip) decides what a wrong key looks like; ``--slip`` overrides it.
The calibration cost per child (the Monte Carlo nulls, draws=199, on-disk cache) is measured too.

    python bench/bench_screen.py               # realistic rewriter, quick sets, 3 seeds
    python bench/bench_screen.py --seeds 5 --slip 0.3
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_search import QUICK_SETS, K, load_set, sim_setup  # noqa: E402


async def screen_seed(bench, seed: int, rounds: int, slip: float | None) -> list[tuple[bool, str, dict | None, bool, int, int, bool]]:
    """(valid, status, order record, chosen, annotation rollouts, spot rollouts, contender) per judged-valid, annotated child of every gap's search."""
    from benchfill import coverage
    from benchfill.search import SearchSettings, benchfill_search
    from benchfill.search.loop import GapSearch
    from benchfill.search.screen import ORDER_FLAG, order_record

    spec = bench.spec
    sim = sim_setup(bench, "realistic", {} if slip is None else {"slip": slip}, seed)
    world, services, z, ids = sim.world, sim.services, sim.z, sim.ids
    ann = sim.annotator()

    async def confirm(c, band=None, resume=None):
        return await ann.confirm(c.item_id, c.item, f"confirm:s{seed}:{c.item_id}", c.annotation.difficulty,
                                 band=band, resume=resume)

    gs = [GapSearch(g, gap.left, gap.right, sim.items, sim.z_of, top_k=K)
          for g, gap in enumerate(coverage.gaps(z, k=K, item_ids=ids))]
    res = await asyncio.gather(*(benchfill_search(s, services, ann, SearchSettings(rounds=rounds), seed=seed,
                                                  confirm=confirm) for s in gs))
    out = []
    for r in res:
        for c in r.children:
            if not c.valid:
                continue
            rec = order_record(c)
            status = "unscored" if rec is None else ("flagged" if ORDER_FLAG in c.flags else "clean")
            out.append((world.is_valid(str(c.item[spec.text_field])), status, rec, c is r.chosen,
                        c.annotation.rollouts, sum(x["trials"] for x in c.annotation.spot), c.annotation.stop != "far"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--sets", default=",".join(QUICK_SETS))
    ap.add_argument("--max-items", type=int, default=300)
    ap.add_argument("--slip", type=float, default=None, help="RewriterModel.slip (default: the world's)")
    ap.add_argument("--spot", type=int, default=None, help="ScreenSettings.spot_trials (default: the screen's)")
    ap.add_argument("--steps", type=int, default=None, help="ScreenSettings.spot_steps")
    ap.add_argument("--first", choices=("both", "far"), default=None, help="ScreenSettings.spot_first")
    ap.add_argument("--ends", choices=("both", "far"), default=None, help="ScreenSettings.spot_ends")
    ap.add_argument("--spot-on", choices=("contenders", "all"), default=None, help="ScreenSettings.spot_on")
    args = ap.parse_args()
    from dataclasses import replace

    from benchfill.search import screen

    if args.spot is not None:
        screen.DEFAULT_SCREEN = replace(screen.DEFAULT_SCREEN, spot_trials=args.spot)
    if args.spot_on is not None:
        screen.DEFAULT_SCREEN = replace(screen.DEFAULT_SCREEN, spot_on=args.spot_on)
    if args.steps is not None:
        screen.DEFAULT_SCREEN = replace(screen.DEFAULT_SCREEN, spot_steps=args.steps)
    if args.first is not None:
        screen.DEFAULT_SCREEN = replace(screen.DEFAULT_SCREEN, spot_first=args.first)
    if args.ends is not None:
        screen.DEFAULT_SCREEN = replace(screen.DEFAULT_SCREEN, spot_ends=args.ends)
    import os

    from benchfill.measure import order_test

    # A fresh calibration cache, so the cost measured below includes every null this run needs.
    os.environ["BENCHFILL_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-screen-cache-")
    rows = []
    t_all = time.perf_counter()
    t_cal = [0.0]
    sim = order_test._simulate

    def timed(*a, **kw):
        t0 = time.perf_counter()
        try:
            return sim(*a, **kw)
        finally:
            t_cal[0] += time.perf_counter() - t0

    order_test._simulate = timed
    for name in args.sets.split(","):
        for seed in range(args.seeds):
            bench, note = load_set(name, args.max_items, seed)
            t0 = time.perf_counter()
            got = asyncio.run(screen_seed(bench, seed, args.rounds, args.slip))
            rows += [(name, seed, *g) for g in got]
            print(f"{name} seed {seed}: {len(got)} judged-valid children, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    n_cal = len(order_test._MEMORY)
    print(f"bench_screen: realistic rewriter, sets {args.sets}, seeds {list(range(args.seeds))}, "
          f"T={args.rounds}, adaptive annotation + confirmation, slip {args.slip if args.slip is not None else 'default'}, "
          f"spot trials {screen.DEFAULT_SCREEN.spot_trials} x {screen.DEFAULT_SCREEN.spot_steps} steps max ({screen.DEFAULT_SCREEN.spot_first} ends first, then {screen.DEFAULT_SCREEN.spot_ends}, on "
          f"{screen.DEFAULT_SCREEN.spot_on})")
    print(f"{'set':<12}{'kind':<10}{'children':>10}{'flagged':>10}{'unscored':>10}{'flag rate':>11}"
          f"{'scored flag rate':>18}")
    for name in [*args.sets.split(","), "all", "contenders"]:
        for valid, kind in ((False, "invalid"), (True, "valid")):
            sel = [r for r in rows if r[2] == valid and (name in ("all", "contenders") or r[0] == name)
                   and (name != "contenders" or r[8])]
            n = len(sel)
            flagged = sum(r[3] == "flagged" for r in sel)
            unscored = sum(r[3] == "unscored" for r in sel)
            scored = n - unscored
            rate = f"{flagged / n:.3f}" if n else "-"
            srate = f"{flagged / scored:.3f}" if scored else "-"
            print(f"{name:<12}{kind:<10}{n:>10}{flagged:>10}{unscored:>10}{rate:>11}{srate:>18}")
    chosen_flagged = sum(r[3] == "flagged" and r[5] for r in rows)
    chosen_invalid = sum((not r[2]) and r[5] for r in rows)
    print(f"chosen children: {sum(r[5] for r in rows)}, of them flagged {chosen_flagged}, invalid {chosen_invalid}")
    probes = [len(r[4]["probes"]) for r in rows if r[4] is not None]
    if probes:
        print(f"probes per scored child: mean {np.mean(probes):.1f}, min {min(probes)}, max {max(probes)}")
    ann_r, spot_r = sum(r[6] for r in rows), sum(r[7] for r in rows)
    print(f"rollouts per judged-valid child: annotation {ann_r / max(len(rows), 1):.1f}, screen spot checks "
          f"{spot_r / max(len(rows), 1):.1f} (+{100 * spot_r / max(ann_r, 1):.0f}%)")
    print(f"calibration: {n_cal} distinct trials vectors, {t_cal[0]:.1f} s simulating nulls "
          f"({1000 * t_cal[0] / max(len(rows), 1):.1f} ms per screened child, amortized); total "
          f"{time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
