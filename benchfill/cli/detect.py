"""``benchfill detect``: did a model improve after a change? (the localized-improvement test)

A thin layer over benchfill.measure.detect; numpy and the library are imported in the handler.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchfill.cli.argtypes import nonneg_int, positive_int


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "detect",
        help="one-sided stratified randomization test of a model's gain after a change (paper App. E.2)",
        description="Compare one model's responses before and after a change on the same items: accuracy "
        "gain, one-sided p-value (outcomes reassigned within each item), and the gain per difficulty band.",
    )
    p.add_argument("--before", required=True, metavar="FILE", help="responses before: model,item_id,correct,trials")
    p.add_argument("--after", required=True, metavar="FILE", help="responses after (same format)")
    p.add_argument("--model", metavar="NAME", help="the model in both files (default: the only one)")
    p.add_argument("--model-before", metavar="NAME", help="the model's name in --before, if it differs")
    p.add_argument("--model-after", metavar="NAME", help="the model's name in --after, if it differs")
    p.add_argument("--fit", metavar="FILE", help="a saved fit: bands by its normalized difficulty z "
                   "(default: 1 - pooled accuracy)")
    p.add_argument("--bands", type=positive_int, default=5, help="equal-width difficulty bands on [0, 1] (default 5)")
    p.add_argument("--permutations", type=int, default=100_000,
                   help="random permutations (default 100,000, at most 10,000,000); 0 = exact, small cases only")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed of the random permutations (default 0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_detect)


def cmd_detect(args: argparse.Namespace) -> int:
    from benchfill.cli.output import warn_untried
    from benchfill.data import read_responses
    from benchfill.errors import ConfigError, DataError
    from benchfill.measure.detect import check_permutations, detect

    if args.permutations < 0:
        raise ConfigError(f"--permutations must be 0 (exact) or more, got {args.permutations}")
    if not 0 < args.alpha < 1:
        raise ConfigError(f"--alpha must lie in (0, 1), got {args.alpha}")
    if args.permutations:  # its bounds, before any file is read (benchfill.measure.detect.check_permutations)
        check_permutations(args.permutations, "--permutations", args.alpha, "--alpha")
    before, after = read_responses(args.before, min_models=1), read_responses(args.after, min_models=1)
    warn_untried(before, after)
    difficulty = None
    if args.fit:
        from benchfill.irt.fit import IrtFit

        f = IrtFit.load(args.fit)  # a malformed file: DataError naming it
        difficulty = dict(zip(f.item_ids, (float(z) for z in f.z), strict=True))
        # a fit of another benchmark would put every item in no band, and the bands would say nothing
        shared = set(after.item_ids)  # once: made per item, it took 22 s at 24,000 items
        ids = [i for i in before.item_ids if i in shared]
        if ids and not any(i in difficulty for i in ids):
            raise DataError(f"{args.fit}: none of the {len(ids)} items of {args.before} and {args.after} is in the "
                            f"fit (e.g. {ids[0]!r}); give the fit of this benchmark")
    res = detect(
        before, after, model_before=args.model_before or args.model, model_after=args.model_after or args.model,
        difficulty=difficulty, bands=args.bands, permutations=args.permutations, alpha=args.alpha, seed=args.seed,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),  # as fit says its NUTS iterations
    )  # fmt: skip
    if difficulty is not None and res.unplaced:
        print(f"benchfill: warning: {args.fit}: {res.unplaced} of the {res.n_items} items tested are not in the "
              "fit and are in no band", file=sys.stderr)
    if args.json:
        from benchfill.cli.output import dumps

        print(dumps(res.to_dict(), indent=1))
    else:
        print("\n".join(res.lines()))
    return 0
