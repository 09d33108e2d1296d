"""The simulated rewriter and judge against the published figures docs/sim-rewriter.md grounds them in.

Per preset and world seed, on the demo benchmark, through the product's own prompts and parsers (the path
of the server and of `benchfill.sim.direct`): a random parent asked for a target drawn uniformly over
[0.05, 0.95], no references; then
- Spearman between the asked target and the child's true z (published: about 0.4),
- the invalid share at mild asks (target within 0.1 z of the parent's true z; published: about 5%) and at
  hard ones (more than 0.5 away; published: 30-58%),
- the judge's recall and precision on those children (published: 0.63-0.87, precision near 0.9),
- the invalid share of children of an invalid parent against a valid one (mild asks; `inherit_invalid`:
  no published figure).

Usage: .venv/bin/python bench/bench_rewriter_figures.py [--draws 1500] [--seeds 0 1 2 3]
"""

from __future__ import annotations

import argparse
import random

import numpy as np
from scipy.stats import spearmanr

from benchfill import prompts
from benchfill.benchmarks import get_benchmark
from benchfill.sim import World, roles
from benchfill.sim.rewriter import PRESETS


def _child(w: World, spec, fields: dict, target: float, k: int):
    prompt = prompts.format_rewriter_prompt(prompts.content_of(fields, spec), target, [], spec)
    child = prompts.parse_child(roles.rewrite(w, prompt, roles.prompt_hash(prompt), k, 1, [False])[0])
    return child, w.lookup(child[spec.text_field])


def _verdict(w: World, spec, child: dict) -> bool:
    prompt = prompts.format_judge_prompt(prompts.content_of(child, spec), spec)
    return prompts.parse_verdict(roles.judge(w, prompt, roles.prompt_hash(prompt), None, 1)[0])[0]


def measure(preset: str, seed: int, draws: int) -> str:
    b = get_benchmark("demo")
    spec = b.spec
    w = World.from_items(b.items, evaluator=spec.evaluator, text_field=spec.text_field,
                         answer_field=spec.answer_field, seed=seed, rewriter=preset)
    originals = list(w.items.values())
    rng = random.Random(seed)
    rows = []
    for k in range(draws):
        parent, target = rng.choice(originals), rng.uniform(0.05, 0.95)
        child, item = _child(w, spec, parent.fields, target, k)
        rows.append((target, w.true_z(parent.id), w.to_z(item.difficulty), item.valid, _verdict(w, spec, child)))
    t, zp, zc, valid, ok = np.array(rows, dtype=float).T
    ask, invalid, flagged = np.abs(t - zp), valid == 0, ok == 0
    mild, hard = ask < 0.1, ask > 0.5
    recall = flagged[invalid].mean()
    precision = (flagged & invalid).sum() / max(flagged.sum(), 1)
    # children of invalid parents (made above) against valid ones, each asked to stay where it is
    bad = [(c, it) for c, it in ((_child(w, spec, p.fields, w.true_z(p.id), draws + k)) for k, p in
                                 enumerate(originals * 4)) if not it.valid][:100]
    good = [(p.fields, p) for p in originals[:100]]
    def kids(pairs, base):
        return np.mean([not _child(w, spec, f, w.true_z(it.id), base + 10 * j + r)[1].valid
                        for j, (f, it) in enumerate(pairs) for r in range(5)])
    return (f"{preset:<10}{seed:>5}{spearmanr(t, zc)[0]:>10.2f}{invalid[mild].mean():>10.3f}{invalid[hard].mean():>10.3f}"
            f"{recall:>9.2f}{precision:>10.2f}{kids(bad, 10**6):>13.3f}{kids(good, 2 * 10**6):>11.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1500)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--presets", nargs="+", default=list(PRESETS))
    args = ap.parse_args()
    print(f"{'preset':<10}{'seed':>5}{'spearman':>10}{'inv mild':>10}{'inv hard':>10}{'recall':>9}"
          f"{'precision':>10}{'kid of inv':>13}{'of valid':>11}")
    print(f"{'published':<10}{'':>5}{'~0.4':>10}{'~0.05':>10}{'0.30-0.58':>10}{'.63-.87':>9}{'~0.9':>10}{'-':>13}{'-':>11}")
    for preset in args.presets:
        for seed in args.seeds:
            print(measure(preset, seed, args.draws), flush=True)


if __name__ == "__main__":
    main()
