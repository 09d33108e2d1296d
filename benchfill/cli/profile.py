"""``benchfill profile``: item-level structural profiles along the model axis (BSDProbe).

Only argparse is imported here; the library is imported inside the handler.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from benchfill.cli.argtypes import nonneg_int, positive_int
from benchfill.untrusted import terminal as shown

OUTPUTS = ("profile.json", "trajectories.png", "histograms.png")  # what --out DIR receives
REPEATS = 20  # subsets drawn per method with --subset, unless --repeats says


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "profile",
        help="item profiles along the model axis: boundary position/width, validity, order anomalies",
        description="Profile every item along the models ordered by strength; flag items whose correctness "
        "does not rise with model strength (order consistency o <= alpha) for review.",
    )
    p.add_argument("--responses", required=True, metavar="FILE", help="model,item_id,correct,trials (CSV or JSONL)")
    p.add_argument("--items", metavar="FILE", help="items JSONL; responses are checked against it")
    p.add_argument("--answers", metavar="FILE",
                   help="answer states: model,item_id,answer[,count] (CSV or JSONL); adds entropy trajectories")
    p.add_argument("--fit", dest="fit_path", metavar="FILE", help="order models by this saved fit's abilities "
                   "(default: by empirical performance)")
    p.add_argument("--alpha", type=float, default=0.05, help="flag items with o <= alpha (default 0.05)")
    p.add_argument("--draws", type=int, default=999,
                   help="Monte Carlo draws per reference profile, 19 to 9999 (default 999)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed of the Monte Carlo reference draws (default 0)")
    p.add_argument("--no-cache", action="store_true", help="keep the calibration in memory only")
    p.add_argument("--top", type=nonneg_int, default=20, help="flagged items shown in the table (default 20)")
    p.add_argument("--subset", type=positive_int, metavar="K",
                   help="also evaluate profile-guided subsets of K items against random ones (NDR, Kendall tau-b)")
    # None, not 20: a --repeats given without --subset is seen, and refused rather than ignored
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="subsets drawn per method with --subset (default 20)")
    p.add_argument("--out", metavar="DIR", help="write profile.json, trajectories.png and histograms.png here")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from benchfill.cli.output import check_out_dir, warn_untried
    from benchfill.data import read_responses
    from benchfill.errors import ConfigError
    from benchfill.measure.profiles import check_settings, profile

    check_settings(args.alpha, args.draws, args.seed, name=lambda key: f"--{key}")  # before any work
    if args.repeats is not None and not args.subset:
        raise ConfigError(f"--repeats {args.repeats}: sets how many subsets --subset draws, and no --subset is "
                          "given; give --subset K or leave --repeats out")
    # refused before the profiling, not after it: a folder in the way of an output file, or no way to write
    check_out_dir(args.out, "--out", OUTPUTS, inputs={"--responses": args.responses, "--items": args.items,
                                                      "--answers": args.answers, "--fit": args.fit_path})
    matrix = read_responses(args.responses, items=args.items)
    warn_untried(matrix)
    if args.subset and args.subset > matrix.n_items:
        raise ConfigError(f"--subset must be in 1..{matrix.n_items}, got {args.subset}")
    fit = None
    if args.fit_path:
        from benchfill.irt.fit import IrtFit

        fit = IrtFit.load(args.fit_path)  # a malformed file: DataError naming it
    answers = None
    if args.answers:
        from benchfill.measure.trajectory import match_answers, read_answers

        answers = read_answers(args.answers, matrix=matrix)  # a pair with more answers than trials: its line
        note = match_answers(answers, matrix, args.answers)  # none in the responses: refused
        if note:
            print(f"benchfill: warning: {note}", file=sys.stderr)
    print(f"profiling {matrix.n_items} item{'' if matrix.n_items == 1 else 's'} along {matrix.n_models} models ...", file=sys.stderr)
    bp = profile(matrix, fit=fit, fit_source=args.fit_path, answers=answers, alpha=args.alpha, draws=args.draws,
                 seed=args.seed, cache_dir=False if args.no_cache else None,
                 progress=lambda msg: print(msg, file=sys.stderr))
    result = bp.to_dict()
    if args.subset:
        from benchfill.measure.profiles_subset import evaluate_subsets

        if not 0 < args.subset <= len(bp.items):
            raise ConfigError(f"--subset must be in 1..{len(bp.items)}, got {args.subset}")
        result["subset"] = evaluate_subsets(bp, matrix, args.subset, repeats=args.repeats or REPEATS, seed=args.seed).to_dict()
    if args.out:
        _write_outputs(bp, result, Path(args.out))
    if args.json:
        from benchfill.cli.output import dumps

        sys.stdout.write(dumps(result, indent=1))
        print()
    else:
        _print_table(bp, result, args.top)
    return 0


def _write_outputs(bp: Any, result: dict, out: Path) -> None:
    from benchfill.cli.output import dumps
    from benchfill.measure.profiles_plots import plot_histograms, plot_trajectories

    out.mkdir(parents=True, exist_ok=True)
    # All three are made in a folder of their own and moved in only once all are: a plot that fails leaves
    # the folder as it was, not a new profile.json beside an earlier run's plots
    from benchfill.outputs import named, shared_mode, temp_path

    # (a killed run's folder is removed by the next: temp_path)
    work = temp_path(out, "profile", directory=True)
    try:
        (work / "profile.json").write_text(dumps(result, indent=1), encoding="utf-8")
        os.chmod(work / "profile.json", shared_mode())  # as the plots beside it
        plot_trajectories(bp, work / "trajectories.png")
        plot_histograms(bp, work / "histograms.png")
        for name in OUTPUTS:
            os.replace(work / name, out / name)
    except OSError as exc:
        named(exc, out)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out / 'profile.json'}, {out / 'trajectories.png'}, {out / 'histograms.png'}", file=sys.stderr)


def _print_table(bp: Any, result: dict, top: int) -> None:
    s = result["summary"]
    print(f"{bp.source}: {s['n_items']} items, {s['n_models']} models on the axis ({bp.axis.basis}), "
          f"{s['unprofiled']} not profiled")
    print(f"order-anomaly rate (o <= {bp.alpha}): {s['order_anomaly_rate']:.1%} ({s['n_flagged']} item{'' if s['n_flagged'] == 1 else 's'}); "
          f"flat fits: {s['flat_share']:.1%}")
    for key in ("position", "width", "validity"):
        d = s[key]
        if d.get("n"):
            print(f"  {key:<9} n={d['n']:<6} mean {d['mean']:.3f}  median {d['median']:.3f}  "
                  f"IQR {d['q25']:.3f}-{d['q75']:.3f}")
    if s.get("powerless"):
        print(f"  {s['powerless']} of {s['n_items']} items cannot be flagged however their answers run: with their "
              f"models and trials the least o a fully reversed item scores is {s['least_o']:.3f}, above "
              f"{bp.alpha} (more models or more trials per model give the test its power)")
    flagged = bp.flagged()
    if not flagged:
        print("no item flagged" + ("" if not s.get("powerless") else ": none could be" if s["powerless"] == s["n_items"]
                                   else " (of those that could be)"))
    else:
        print(f"\nflagged items, most anomalous first (showing {min(top, len(flagged))} of {len(flagged)}; "
              "correctness along the axis: one digit per model, weakest first, its share correct in tenths "
              "(9 for 0.9 or more), '.' where it tried no trial):")
        print(f"  {'item':<28} {'o':>7} {'D':>8} {'x':>6} {'w':>6} {'v':>6}  correctness along the axis")
        for p in flagged[:top]:
            traj = " ".join("." if c != c else f"{min(int(c * 10), 9)}" for c in p.correctness)
            print(f"  {shown(p.item_id)[:28]:<28} {p.order_consistency:7.4f} {p.statistic:8.2f} {p.position:6.3f} "
                  f"{p.width:6.3f} {p.validity:6.3f}  {traj}")
    if "subset" in result:
        r = result["subset"]
        def pm(pair) -> str:  # mean ± sd over draws; a word where no draw defined it (the notes say why)
            m, sd = pair
            return "undefined" if m is None or m != m else f"{m:.3f}±{sd:.3f}"

        print(f"\nsubsets of {r['size']} item{'' if r['size'] == 1 else 's'} ({r['repeats']} draws): "
              f"profile-guided NDR {pm(r['ndr_profile'])}, tau-b {pm(r['tau_profile'])}; "
              f"random NDR {pm(r['ndr_random'])}, tau-b {pm(r['tau_random'])} (higher is better for both: "
              "NDR, the subset's rises between adjacent models against the full benchmark's steps; tau-b, its "
              "ranking of the models against the full one's)")
        for note in r.get("notes") or ():
            print(f"  note: {note}")
