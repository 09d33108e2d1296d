"""Are new multiple-choice items placed on the scale of the original ones, whatever their number of options?

A child is placed by online calibration through the probes' fitted abilities (benchfill/search/annotate.py).
The fit of the original items gives each its own guessing floor, 1 / its number of options; BenchFill's
online calibration takes "the same chance-level guessing parameter used in the original IRT fitting"
(Sec. 4.1, fn. 4). This places the ORIGINAL items again through the run's annotator (fresh rollouts from the
simulated world, the fixed protocol with 64 answers per probe), once with one floor for every item (the
benchmark's median, what runs did before) and once with each item's own, and prints the mean of (placed b -
fitted b) per number of options, side by side: on the originals' scale both should be near 0.

Items: mmlu-pro's first 16 four-option and first 24 ten-option items (the median floor is then 0.1).

    python bench/bench_guessing_floor.py --seeds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys

import numpy as np
from _common import ROOT, shared_data

sys.path.insert(0, str(ROOT))


def mixed_items(n4: int = 16, n10: int = 24) -> list[dict]:
    four, ten = [], []
    with open(shared_data() / "mmlu-pro" / "items.jsonl", encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            k = len(item["options"])
            if k == 4 and len(four) < n4:
                four.append(item)
            elif k == 10 and len(ten) < n10:
                ten.append(item)
    return four + ten


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=64, help="answers per probe when placing an item again")
    # 0 by default, unlike the world's: the offsets add noise to each placement and none of the floor's bias,
    # which is what this measures
    ap.add_argument("--pair-sd", type=float, default=0.0, metavar="SD",
                    help="the world's (probe, item) offsets, sd in logits (default 0: the figures' world; the "
                         "world's own default is 3.5)")
    args = ap.parse_args()

    from benchfill.benchmarks import BenchmarkSpec
    from benchfill.engine.backend import panel_probes
    from benchfill.irt.engine import fit as irt_fit
    from benchfill.search.annotate import Annotator
    from benchfill.sim import World
    from benchfill.sim.direct import WorldServices

    items = mixed_items()
    spec = BenchmarkSpec(name="mmlu-pro-mix", text_field="question", answer_field="answer",
                         evaluator="multiple_choice", options_field="options", solver_prompt="multiple_choice",
                         chance="options")
    print(f"{len(items)} mmlu-pro items; mean(placed b - fitted b), logits, per number of options")
    print(f"{'seed':>4}  {'floor':<8}{'4 options':>11}{'10 options':>12}")
    gaps = {"median": [], "own": []}
    for seed in range(args.seeds):
        world = World.from_items(items, evaluator="multiple_choice", text_field="question", answer_field="answer",
                                 seed=seed, n_probes=12, pair_sd=args.pair_sd)
        services = WorldServices(world, spec, seed)
        fit = irt_fit(services.panel_matrix(items, trials=8), engine="map", seed=seed)
        fitted = dict(zip(fit.item_ids, fit.difficulty, strict=True))
        probes = panel_probes(fit, [(p, args.trials) for p in world.probes])
        median = float(np.median(fit.chance))
        for label, chance_of in (("median", None), ("own", spec.chance_of)):
            annotator = Annotator(services, probes, median, fit.b_min, fit.b_max, "fixed", chance_of=chance_of)
            off: dict[int, list[float]] = {4: [], 10: []}
            for it in items:
                a = asyncio.run(annotator.annotate(it["id"], it, f"again:{it['id']}"))
                if "no_finite_mle" not in a.flags:
                    off[len(it["options"])].append(a.difficulty - fitted[it["id"]])
            m4, m10 = statistics.mean(off[4]), statistics.mean(off[10])
            gaps[label].append(m4 - m10)
            print(f"{seed:>4}  {label:<8}{m4:>+11.3f}{m10:>+12.3f}")
    for label, d in gaps.items():
        print(f"{label} floor: four-option items sit {statistics.mean(d):+.3f} logits from ten-option ones "
              f"(mean over {args.seeds} seeds)")


if __name__ == "__main__":
    main()
