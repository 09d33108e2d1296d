"""BenchFill vs the best-of-N baseline vs the oracle, and adaptive vs fixed annotation (issue 4).

Each difficulty set is served by the simulated world (in-process, loopback) whose truth comes
from a MAP fit of a real response matrix in the shared data (the demo ships its own). Sets with
responses but no item texts get invented demo-style math problems (benchfill.demo templates) at
the fitted difficulties; large sets are subsampled (seeded) and the output says so. Everything
goes through the real clients: litellm for rewriter and judge, the openai SDK for probe rollouts,
each cached in a store shared by the strategies of one set (so the panel's rollouts on the
benchmark are paid once per set; every strategy's spend counts cache hits as paid).

Per set and on average it prints: top-3 gap sum reduction (annotated, and with the world's true
difficulties), target deviation annotated / confirmed / true, annotation and confirmation
rollouts, model calls. "True" places a child's latent difficulty on the run's fitted scale by the
linear map fitted-b ~ true-b over the benchmark's items (the fit's scale is the truth's up to
location and spread). The baseline gets, per gap, the rounds BenchFill used (Appendix E.1).

    python bench/bench_search.py            # all sets (~10 min on 2 busy cores)
    python bench/bench_search.py --quick    # demo + two small sets, fewer items
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETS = ("demo", "aime25", "humaneval", "mbpp", "livecodebench-codegen", "cruxeval-output", "chembench")
QUICK_SETS = ("demo", "aime25", "humaneval")
K = 3


def shared_data() -> Path:
    for cand in (os.environ.get("BENCHFILL_DATA_DIR"), ROOT.parent / "shared" / "data", ROOT / "shared" / "data"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    sys.exit("bench_search: no shared data directory (set BENCHFILL_DATA_DIR)")


def load_set(name: str, max_items: int, seed: int):
    """A Benchmark with items (real or invented) and its real response matrix, subsampled."""
    from benchfill.benchmarks import Benchmark, BenchmarkSpec, get_benchmark
    from benchfill.data import read_responses

    if name == "demo":
        return get_benchmark("demo"), "built-in demo (48 items)"
    d = shared_data() / name
    math_spec = dict(text_field="problem", answer_field="answer", evaluator="math", solver_prompt="math")
    if (d / "items.jsonl").is_file() and name.startswith("aime"):
        bench = get_benchmark(name, shared_data())
        matrix = read_responses(d / "responses.csv", items=bench.items)
        kept = set(matrix.item_ids)
        items = [it for it in bench.items if it["id"] in kept]
        note = f"real texts, {len(items)} items with responses"
    else:
        matrix = read_responses(d / "responses.csv")
        items = invent_items(matrix.item_ids, seed)
        note = f"invented demo-style texts, {matrix.n_items} items"
    if matrix.n_items > max_items:
        rng = np.random.default_rng([seed, len(name)])
        idx = np.sort(rng.choice(matrix.n_items, size=max_items, replace=False))
        matrix = matrix.select_items(idx)
        keep = set(matrix.item_ids)
        items = [it for it in items if it["id"] in keep]
        note += f", subsampled to {max_items}"
    spec = BenchmarkSpec(name=f"sim-{name}", **math_spec, source=f"fit of {d}/responses.csv")
    return Benchmark(spec=spec, items_path=None, _items=items, matrix=matrix), note


def invent_items(item_ids, seed: int) -> list[dict]:
    """Demo-style integer-answer problems; the world's truth, not the text, sets their difficulty."""
    from benchfill.demo import TEMPLATES

    rng = np.random.default_rng([seed, 0xBE7C])
    family = [t for fam in TEMPLATES for t in fam]
    out, seen = [], set()
    for i in item_ids:
        while True:
            text, answer = family[int(rng.integers(len(family)))](rng)
            if text not in seen:
                break
        seen.add(text)
        out.append({"id": i, "problem": text, "answer": str(answer)})
    return out


@dataclass
class Row:
    set: str
    strategy: str
    reduction: float
    reduction_true: float
    dev_ann: float
    dev_conf: float
    dev_true: float
    rollouts: int  # annotation
    confirm_rollouts: int
    model_calls: int
    children: int  # annotated children
    rounds: float
    bias_before: float = float("nan")  # mean | annotated dev - true dev | of the chosen items
    bias_after: float = float("nan")  # same with the confirmed difficulty
    agg_before: float = float("nan")  # mean annotated dev - mean true dev (signed: the winner's curse)
    agg_after: float = float("nan")  # mean confirmed dev - mean true dev
    zerr_before: float = float("nan")  # mean |annotated z - true z| of the chosen items
    zerr_after: float = float("nan")  # mean |confirmed z - true z|
    stops: dict = field(default_factory=dict)
    search_stops: dict = field(default_factory=dict)


async def run_set(name: str, bench, opts, work: Path) -> list[Row]:
    from benchfill import coverage
    from benchfill.search import SearchSettings, baseline_search, benchfill_search, oracle_fill
    from benchfill.search.loop import GapSearch
    from benchfill.search.traffic import open_backend
    from benchfill.store import Store

    run_dir = work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    store = Store(run_dir / "store.db")
    rows: list[Row] = []
    try:
        async with open_backend(opts, bench, store, run_dir) as backend:
            fit, _ = await backend.fit_benchmark()
            z = np.asarray(fit.z, dtype=float)
            ids = list(fit.item_ids)
            ann = backend.annotator
            world = backend.world
            # The world's truth on the fitted scale: fitted b ~ a + c * true b over the benchmark's items.
            b_fit = np.asarray(fit.difficulty, dtype=float)
            b_true = np.array([world.true_difficulty(i) for i in ids])
            c, a = np.polyfit(b_true, b_fit, 1)

            def true_z(b: float | None) -> float | None:
                return None if b is None else ann.to_z(a + c * b)

            chosen_gaps = coverage.gaps(z, k=K, item_ids=ids)
            by_id = {it["id"]: it for it in bench.items}
            items = {i: by_id[i] for i in ids if i in by_id}
            z_of = {i: float(v) for i, v in zip(ids, z, strict=True) if i in by_id}
            settings = SearchSettings(opts.rounds, opts.parents, opts.children, opts.references, opts.tolerance)
            before = coverage.top_k_gap_sum(z, K)

            async def strategy(label: str, protocol: str, rounds_matched=None):
                ann.protocol = protocol
                backend.services.phase = "annotate"
                gs = [GapSearch(g, gap.left, gap.right, items, z_of) for g, gap in enumerate(chosen_gaps)]
                if label == "baseline":
                    res = await asyncio.gather(*(
                        baseline_search(s, backend.services, ann, settings, rounds_matched=rounds_matched[s.gap_index],
                                        seed=opts.seed) for s in gs))
                else:
                    res = await asyncio.gather(*(
                        benchfill_search(s, backend.services, ann, settings, seed=opts.seed) for s in gs))
                await asyncio.gather(*(backend.confirm(r) for r in res if r.chosen is not None))
                backend.services.phase = "annotate"
                return res

            results = {}
            results["benchfill/fixed"] = await strategy("benchfill", "fixed")
            results["benchfill/adaptive"] = await strategy("benchfill", "adaptive")
            matched = {r.gap_index: r.rounds_used for r in results["benchfill/adaptive"]}
            results["baseline/adaptive"] = await strategy("baseline", "adaptive", matched)
            for label, res in results.items():
                rows.append(summarize(name, label, res, z, before, true_z))
            added = oracle_fill(z, K)
            red = 1 - coverage.top_k_gap_sum(np.concatenate([z, added]), K) / before
            rows.append(Row(name, "oracle", red, red, 0.0, 0.0, 0.0, 0, 0, 0, 0, 0.0))
    finally:
        store.close()
    return rows


def summarize(name: str, label: str, res, z: np.ndarray, before: float, true_z) -> Row:
    from benchfill.coverage import top_k_gap_sum

    chosen = [r.chosen for r in res if r.chosen is not None]
    targets = [r.target_z for r in res if r.chosen is not None]
    ann_z = [c.annotation.z for c in chosen]
    conf_z = [c.confirmation.z if c.confirmation else c.annotation.z for c in chosen]
    tz = [true_z(c.true_difficulty) for c in chosen]
    dev = lambda zs: float(np.mean([abs(v - t) for v, t in zip(zs, targets, strict=True)])) if zs else float("nan")  # noqa: E731
    red = lambda zs: 1 - top_k_gap_sum(np.concatenate([z, zs]), K) / before if zs else 0.0  # noqa: E731
    annotated = [c for r in res for c in r.children if c.annotation is not None]
    stops: dict[str, int] = {}
    for c in annotated:
        stops[c.annotation.stop] = stops.get(c.annotation.stop, 0) + 1
    ann_ro = sum(c.annotation.rollouts for c in annotated)
    conf_ro = sum(c.confirmation.rollouts for c in chosen if c.confirmation)
    devs_t = [abs(v - t) for v, t in zip(tz, targets, strict=True)]
    bias_b = np.mean([abs(abs(v - t) - d) for v, t, d in zip(ann_z, targets, devs_t, strict=True)]) if chosen else np.nan
    bias_a = np.mean([abs(abs(v - t) - d) for v, t, d in zip(conf_z, targets, devs_t, strict=True)]) if chosen else np.nan
    zerr = lambda zs: float(np.mean([abs(v - t) for v, t in zip(zs, tz, strict=True)])) if zs else float("nan")  # noqa: E731
    search_stops: dict[str, int] = {}
    for r in res:
        search_stops[r.stop or "-"] = search_stops.get(r.stop or "-", 0) + 1
    return Row(name, label, red(ann_z), red(tz), dev(ann_z), dev(conf_z), dev(tz), ann_ro, conf_ro,
               sum(r.spend.model_calls for r in res), len(annotated), float(np.mean([r.rounds_used for r in res])),
               float(bias_b), float(bias_a), dev(ann_z) - dev(tz), dev(conf_z) - dev(tz), zerr(ann_z), zerr(conf_z),
               stops, search_stops)


def print_table(rows: list[Row]) -> None:
    head = (f"{'set':<24}{'strategy':<20}{'top3 red':>9}{'(true)':>8}{'dev ann':>9}{'dev conf':>9}{'dev true':>9}"
            f"{'rollouts':>9}{'confirm':>8}{'calls':>7}{'children':>9}{'ro/child':>9}{'rounds':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        per = r.rollouts / r.children if r.children else 0.0
        print(f"{r.set:<24}{r.strategy:<20}{r.reduction:>9.3f}{r.reduction_true:>8.3f}{r.dev_ann:>9.4f}"
              f"{r.dev_conf:>9.4f}{r.dev_true:>9.4f}{r.rollouts:>9d}{r.confirm_rollouts:>8d}{r.model_calls:>7d}"
              f"{r.children:>9d}{per:>9.1f}{r.rounds:>7.1f}")


def averages(rows: list[Row]) -> list[Row]:
    out = []
    for label in dict.fromkeys(r.strategy for r in rows):
        rs = [r for r in rows if r.strategy == label]

        def m(f: str, rs: list[Row] = rs) -> float:
            vals = [getattr(r, f) for r in rs if not np.isnan(getattr(r, f))]
            return float(np.mean(vals)) if vals else float("nan")

        out.append(Row("MEAN", label, m("reduction"), m("reduction_true"), m("dev_ann"), m("dev_conf"),
                       m("dev_true"), int(round(m("rollouts"))), int(round(m("confirm_rollouts"))),
                       int(round(m("model_calls"))), int(round(m("children"))), m("rounds"),
                       m("bias_before"), m("bias_after"), m("agg_before"), m("agg_after"), m("zerr_before"),
                       m("zerr_after"), _sum_counts(r.stops for r in rs), _sum_counts(r.search_stops for r in rs)))
    return out


def _sum_counts(dicts) -> dict:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 sets, 60 items each, 4 rounds")
    ap.add_argument("--sets", nargs="*", help=f"subset of {', '.join(SETS)}")
    ap.add_argument("--max-items", type=int, help="subsample larger sets to this many items (default 150)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from benchfill.run import RunOptions
    from benchfill.search import ConfirmSettings, SearchSettings

    conf = ConfirmSettings()

    sets = args.sets or (QUICK_SETS if args.quick else SETS)
    max_items = args.max_items or (60 if args.quick else 150)
    opts = RunOptions(benchmark=None, gaps=K, seed=args.seed, backend="sim", progress=False,
                      rounds=4 if args.quick else 8)
    print(f"bench_search: sim world, seed {args.seed}, top-{K} gaps, T={opts.rounds} R={opts.parents} "
          f"C={opts.children} L={opts.references} tol={opts.tolerance}, {opts.sim_probes} probes x 8 trials "
          f"(fixed = {opts.sim_probes * 8} rollouts/child); adaptive stops also when the best child is within "
          f"{SearchSettings().indistinct:g} se of the target; confirmation = fresh seed, informative probes, "
          f"z se <= {conf.z_se} or {conf.cap(opts.sim_probes * 8)} rollouts")
    rows: list[Row] = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_search_") as tmp:
        for name in sets:
            bench, note = load_set(name, max_items, args.seed)
            t0 = time.perf_counter()
            got = asyncio.run(run_set(name, bench, replace(opts, benchmark=name), Path(tmp)))
            rows += got
            print(f"[{name}: {note}; {time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
    print()
    print_table(rows + averages(rows))
    mean = {r.strategy: r for r in averages(rows)}
    fx, ad, bl, orc = (mean.get(k) for k in ("benchfill/fixed", "benchfill/adaptive", "baseline/adaptive", "oracle"))
    print("\nAnnotation, fixed vs adaptive (BenchFill, mean over sets; same seeds, same worlds):")
    print(f"{'':<34}{'fixed':>10}{'adaptive':>10}{'ratio':>8}")
    for lab, f in (("rollouts per child", lambda r: r.rollouts / max(r.children, 1)),
                   ("annotation rollouts per gap", lambda r: r.rollouts / K),
                   ("+ confirmation, per gap", lambda r: (r.rollouts + r.confirm_rollouts) / K),
                   ("rounds per gap", lambda r: r.rounds),
                   ("true deviation", lambda r: r.dev_true),
                   ("annotated deviation", lambda r: r.dev_ann),
                   ("confirmed deviation", lambda r: r.dev_conf)):
        print(f"{lab:<34}{f(fx):>10.4f}{f(ad):>10.4f}{f(fx) / max(f(ad), 1e-12):>8.2f}")
    print(f"  search stops: fixed {fx.search_stops}, adaptive {ad.search_stops}")
    print(f"  adaptive annotation stops: {ad.stops}")
    print("\nConfirmation (chosen items; fresh rollouts on the most informative probes until z se <= "
          f"{conf.z_se} or {conf.max_budgets:g} fixed budgets):")
    print(f"  {'':<20}{'mean dev - mean true dev':>28}{'mean |z - true z|':>22}{'mean ||dev| - true dev|':>26}")
    for r in (fx, ad, bl):
        print(f"  {r.strategy:<20}{r.agg_before:>+13.4f} -> {r.agg_after:>+9.4f}{r.zerr_before:>11.4f} -> "
              f"{r.zerr_after:.4f}{r.bias_before:>15.4f} -> {r.bias_after:.4f}")
    print(f"\nTop-3 gap sum reduction (true difficulties): benchfill {ad.reduction_true:.3f}, baseline "
          f"{bl.reduction_true:.3f}, oracle {orc.reduction_true:.3f}  (annotated: {ad.reduction:.3f}, "
          f"{bl.reduction:.3f}, {orc.reduction:.3f}); true deviation benchfill {ad.dev_true:.4f} vs baseline "
          f"{bl.dev_true:.4f}")
    print(f"total {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
