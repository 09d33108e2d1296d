"""Do a confirmation's intervals say what they claim?

A run's report gives each chosen item its confirmed z with a placement se (sampling, the probes' ability
error and the item's unknown slope together), and its "how sure" figures read that se as a normal one. In
the simulated world the truth is known, so this script checks it: r = (confirmed z - true z) / stated se
should have an rms of 1, and |r| should exceed 1 and 1.96 about 32% and 5% of the time.

It checks three kinds of item, side by side, on the same worlds (realistic rewriter by default):

  unselected    children of random parents asked for targets drawn uniformly over [0.05, 0.95] (no
                references), annotated and then confirmed as the search does it, with no selection: the
                measurement alone. Split by whether the child's stated answer is right (valid) or not.
  chosen        the items benchfill's search chose (bench_search.py's run, defaults), confirmed: the
                measurement after the search's selection (it confirms up to six candidates per gap and
                keeps one confirmed inside), the figures the report shows.
  confirmed     the other children the same search confirmed and did not choose: chosen for confirmation
                by their annotation, whose probes' offsets the confirmation shares, but not chosen among
                the confirmed. Between "unselected" and "chosen", it says which of the two choices moves r.

"mean r" is r's signed mean: a confirmation that leans one way (a scale's offset, or a selection that
favoured one sign of the error) shows there, and the rms carries it.

The valid unselected children are also split into thirds by their true slope (the world's
discrimination): the stated se averages over the slopes a benchmark's spread allows, so the flattest
items are where it is most likely to be short.

An invalid child's true z is that of the item it meant to be; its answers follow its wrong key, so its
confirmed z measures a different item. Those rows say how far a judge's miss carries into the report.

    python bench/bench_intervals.py                                   # demo, aime25, humaneval; 4 seeds
    python bench/bench_intervals.py --sets demo aime25 humaneval mbpp livecodebench-codegen \\
        cruxeval-output chembench --max-items 150 --seeds 6           # the sweep's sets
    python bench/bench_intervals.py --presets kind realistic hostile
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import numpy as np
from _common import ROOT

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before anything might import litellm
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import bench_search as bs  # noqa: E402


async def unselected(bench, preset: str, seed: int, n: int) -> list[tuple[float, bool, float]]:
    """(r, valid, true slope) for up to ``n`` children of one seed's world, confirmed with no selection."""
    from benchfill.sim.truth import true_scale

    spec = bench.spec
    sim = bs.sim_setup(bench, preset, {}, seed)
    scale = true_scale(sim.world, sim.fit)
    ann = sim.annotator()
    rng = np.random.default_rng([seed, 0x1A7])
    ids = list(sim.items)
    out = []
    for k in range(n):
        parent = sim.items[ids[int(rng.integers(len(ids)))]]
        target = float(rng.uniform(0.05, 0.95))
        child = await sim.services.rewrite(parent, target, [], f"rw:interval-{seed}-{k}")
        if child is None:
            continue
        it = sim.world.lookup(str(child[spec.text_field]))
        if it is None:  # a reply the world does not know (a malformed rewrite): nothing to measure
            continue
        a = await ann.annotate(child["id"], child, f"interval:{seed}:{k}", target)
        c = await ann.confirm(child["id"], child, f"interval-confirm:{seed}:{k}", a.difficulty)
        if c.placement_z_se > 0:
            out.append(((c.z - scale.z(it.difficulty)) / c.placement_z_se, it.valid, sim.world.discrimination(it)))
    return out


def row(label: str, r: list[float]) -> str:
    if not r:
        return f"  {label:34s} {0:5d}"
    signed = np.asarray(r, dtype=float)
    a = np.abs(signed)
    return (f"  {label:34s} {len(a):5d}  {np.sqrt(np.mean(a ** 2)):5.2f}  {np.mean(signed):+6.2f}  {np.median(a):6.2f}  "
            f"{np.mean(a > 1):6.3f}  {np.mean(a > 1.96):6.3f}  {np.mean(a > 2.58):6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="*", default=list(bs.QUICK_SETS))
    ap.add_argument("--presets", nargs="*", default=["realistic"])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--children", type=int, default=40, help="unselected children per set and seed (default 40)")
    ap.add_argument("--max-items", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=bs._cpus())
    ap.add_argument("--confirm-se", type=float, default=None, metavar="SE",
                    help="what-if: confirm to this sampling z se (default: a run's, 0.02) ...")
    ap.add_argument("--confirm-cap", type=float, default=None, metavar="BUDGETS",
                    help="... or this many fixed-protocol budgets (default: a run's, 4)")
    ap.add_argument("--no-search", action="store_true", help="the unselected children only (no search runs)")
    ap.add_argument("--pair-sd", type=float, default=bs.PAIR_SD, metavar="SD",
                    help=f"the world's (probe, item) offsets, sd in logits (default {bs.PAIR_SD:g}, bench_search.py's)")
    ap.add_argument("--pair-curve", choices=bs.PAIR_CURVES, default=bs.PAIR_CURVE,
                    help="how they meet the curve (default average; added: the world before s48)")
    ap.add_argument("--own-sampling", action="store_true",
                    help="what-if: the annotator states the placement's own sampling se (bench_search.py's)")
    args = ap.parse_args()
    bs.OWN_SAMPLING = args.own_sampling
    bs.PAIR_SD, bs.PAIR_CURVE = args.pair_sd, args.pair_curve
    unknown = set(args.sets) - set(bs.SETS)
    if unknown:
        sys.exit(f"bench_intervals: unknown sets {sorted(unknown)}; known: {', '.join(bs.SETS)}")
    seeds = list(range(args.seeds))
    if args.confirm_se is not None or args.confirm_cap is not None:
        from benchfill.search.annotate import ConfirmSettings

        d = ConfirmSettings()
        bs.CONFIRMATION = ConfirmSettings(z_se=d.z_se if args.confirm_se is None else args.confirm_se,
                                          max_budgets=d.max_budgets if args.confirm_cap is None else args.confirm_cap)
    print(f"# confirmation intervals against the truth: presets {', '.join(args.presets)}; sets {', '.join(args.sets)} "
          f"(max {args.max_items} items); seeds {seeds}; {args.children} unselected children per set and seed"
          f"{'' if bs.CONFIRMATION is None else f'; confirmation to z se {bs.CONFIRMATION.z_se:g}, cap {bs.CONFIRMATION.max_budgets:g} budgets'}"
          f"{'; the placement states its own sampling se' if bs.OWN_SAMPLING else ''}"
          f"; (probe, item) offsets sd {bs.PAIR_SD:g}{' added to the curve' if bs.PAIR_CURVE == 'added' else ''}",
          flush=True)
    t0 = time.perf_counter()
    for name in args.sets:
        bs._BENCHES[name] = bs.load_set(name, args.max_items, 0)  # as bench_search.py loads them
    jobs = [(f"preset {p}", p, {}, s) for p in args.presets for s in args.sets]
    cells = [] if args.no_search else bs.run_jobs(jobs, seeds, args.rounds, 0.0, args.jobs, strategies=("benchfill",))
    head = (f"  {'':34s} {'n':>5s}  {'rms':>5s}  {'mean r':>6s}  {'med|r|':>6s}  {'|r|>1':>6s}  {'>1.96':>6s}  {'>2.58':>6s}\n"
            f"  {'(a normal r)':34s} {'':5s}  {1:5.2f}  {0:+6.2f}  {0.674:6.2f}  {0.317:6.3f}  {0.050:6.3f}  {0.010:6.3f}")
    for preset in args.presets:
        print(f"\n## {preset}: r = (confirmed z - true z) / stated placement se")
        print(head)
        every: dict[str, list[float]] = {}
        for name in args.sets:
            bench = bs._BENCHES[name][0]
            un = [x for s in seeds for x in asyncio.run(unselected(bench, preset, s, args.children))]
            cell = next((c for c in cells if c.label == f"preset {preset}" and c.set == name), None)
            outs = [] if cell is None else cell.out["benchfill"]
            chosen = [(r, v) for o in outs for r, v in zip(o.conf_r, o.conf_valid, strict=True)]
            others = [(r, v) for o in outs for r, v in zip(o.others_r, o.others_valid, strict=True)]
            slopes = np.quantile([a for _, v, a in un if v], [1 / 3, 2 / 3]) if any(v for _, v, _ in un) else (0, 0)
            parts = {
                "unselected, valid": [r for r, v, _ in un if v],
                "  flattest third": [r for r, v, a in un if v and a < slopes[0]],
                "  middle third": [r for r, v, a in un if v and slopes[0] <= a < slopes[1]],
                "  steepest third": [r for r, v, a in un if v and a >= slopes[1]],
                "unselected, invalid": [r for r, v, _ in un if not v],
                "confirmed, not chosen, valid": [r for r, v in others if v],
                "chosen by the search, valid": [r for r, v in chosen if v],
                "chosen by the search, invalid": [r for r, v in chosen if not v],
            }
            print(f"{name}")
            for label, r in parts.items():
                print(row(label, r))
                every.setdefault(label, []).extend(r)
            print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        print("all sets")
        for label, r in every.items():
            print(row(label, r))
    print(f"\n# {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
