"""``benchfill run``: fill a benchmark's largest coverage gaps (one BenchFill search per gap)."""

from __future__ import annotations

import argparse
import sys

from benchfill.cli.argtypes import misfit_sd, nonneg_int, pair_sd, unit_float


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="fill the K largest difficulty gaps of a benchmark",
        description="Load a benchmark, fit IRT, find its K largest gaps, fill each with a searched item, "
                    "and write runs/<run-id>/ (store, report, plots, review queue). Rerun to resume.",
    )
    p.add_argument("--benchmark", help="a registered benchmark name, or 'demo' (built in, offline)")
    p.add_argument("--items", help="items JSONL of any other benchmark (with --spec)")
    p.add_argument("--responses", help="a response matrix (model,item_id,correct,trials); else probe rollouts")
    p.add_argument("--spec", help="benchmark spec file (TOML/YAML/JSON) for --items")
    p.add_argument("--data-dir", help="local data directory (default $BENCHFILL_DATA_DIR)")
    p.add_argument("--gaps", type=int, default=3, help="number of largest gaps to fill (default 3)")
    p.add_argument("--strategy", default="benchfill", choices=("benchfill", "baseline", "oracle"),
                   help="the search (default benchfill), the paper's budget-matched baseline, or the oracle")
    p.add_argument("--annotation", default="adaptive", choices=("adaptive", "fixed"),
                   help="rollout protocol for annotation (default adaptive; fixed is the paper's)")
    p.add_argument("--no-confirm", dest="confirm", action="store_false",
                   help="skip re-annotating each selected item with fresh rollouts")
    p.add_argument("--confirm-se", type=float, default=0.02, metavar="SE",
                   help="confirm until the sampling z standard error is at most this (default 0.02)")
    p.add_argument("--misfit", type=misfit_sd, default="auto", metavar="SD",
                   help="the sd of log item discrimination the annotator allows for: probes balanced about each "
                        "item, and its se carries what the 1PL misses (default auto: the benchmark's own, "
                        "estimated from its matrix, at least 0.5; 0: items fit the 1PL exactly)")
    p.add_argument("--pair-allowance", type=pair_sd, default="auto", metavar="SD",
                   help="the sd, in logits, of each probe's own offset on an item that the annotator allows for: "
                        "rollouts of one probe cannot average it away, so items are placed through more probes "
                        "and their se carries it (default auto: estimated from the panel's repeated answers on "
                        "the benchmark's items; 0: none)")
    p.add_argument("--confirm-cap", type=float, default=4.0, metavar="BUDGETS",
                   help="... or until this many fixed-protocol budgets of rollouts (default 4); looser is "
                        "cheaper and places less exactly")
    p.add_argument("--backend", choices=("sim", "openai"),
                   help="sim: the simulated world in-process; openai: endpoints from --config "
                        "(default: openai when --config is given, else sim)")
    p.add_argument("--config", help="config file (TOML/YAML): probe panel, rewriter, judge")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed of the whole run: the search, the probes' sampling, the simulated world (default 0)")
    p.add_argument("--rounds", type=int, default=8, help="T, at most this many rounds per gap (default 8)")
    p.add_argument("--parents", type=int, default=4, help="R, parents per round (default 4)")
    p.add_argument("--children", type=int, default=4, help="C, children per parent (default 4)")
    p.add_argument("--references", type=int, default=16, help="L, reference list size (default 16)")
    p.add_argument("--tolerance", type=float, default=0.01, help="early stop on the normalized scale (default 0.01)")
    p.add_argument("--steering", choices=("on", "off"), default="off",
                   help="target steering: ask for what the learned rewriter response maps onto the target "
                        "(on), or for the target itself as the paper does (default off: the sweep of "
                        "simulated rewriters found no gain in it; docs/sim-rewriter.md)")
    p.add_argument("--selection", choices=("posterior", "reduction", "closest"), default="posterior",
                   help="pick the child with the least expected squared deviation (posterior), the least expected "
                        "top-k gap sum with it added (reduction: k = --gaps), or the least annotated deviation "
                        "(closest, the paper's rule); default posterior")
    p.add_argument("--rounds-matched", type=int, help="baseline: rounds of budget to match (default --rounds)")
    p.add_argument("--prescreen", choices=("on", "off"), default="off",
                   help="skip annotating children whose text predicts a difficulty far outside the gap "
                        "(a predictor trained on the benchmark's items; docs/predict.md); default off")
    p.add_argument("--near-duplicate", type=float, default=90.0, help="similarity (0-100) that flags a child (default 90)")
    p.add_argument("--sim-probes", type=int, default=12, help="sim backend: number of probe models (default 12)")
    p.add_argument("--sim-latency-ms", type=float, default=0.0, help="sim backend: per-request latency (default 0)")
    p.add_argument("--sim-discrimination", type=float, default=0.5, metavar="SD",
                   help="sim backend: sd of log item discrimination (default 0.5, the median of real matrices; "
                        "0: every item fits the 1PL the annotator assumes, kinder than real data)")
    p.add_argument("--sim-pair-sd", type=float, default=5.0, metavar="SD",
                   help="sim backend: sd, in logits, of each probe's own offset on an item (default 5, which "
                        "matches the published matrices; 0: its answers are independent draws about the curve, "
                        "kinder than real data)")
    p.add_argument("--sim-pair-curve", choices=("average", "added"), default="average",
                   help="sim backend: how those offsets meet the IRT curve: 'average' (default) keeps the world's "
                        "curve as their average, as real answers fitted it; 'added' puts them on it, which flattens "
                        "it (the world before s48; docs/sim-rewriter.md)")
    p.add_argument("--sim-reply-habits", type=unit_float, default=0.3, metavar="RATE",
                   help="sim backend: share of replies written in a real model's habits (reasoning blocks, bold "
                        "labels, LaTeX left single in JSON, replies cut short; form only; default 0.3, 0: all plain)")
    from benchfill.cli.sim import add_rewriter_arguments

    add_rewriter_arguments(p)
    p.add_argument("--runs-dir", help="where run directories go (default $BENCHFILL_RUNS_DIR or ./runs)")
    p.add_argument("--store", metavar="URL",
                   help="keep the run's store at this SQLAlchemy URL (e.g. postgresql+psycopg://user@host/db; "
                        "password from PGPASSWORD) instead of runs/<id>/store.db")
    p.add_argument("--run-id", help="name of the run directory (default: derived from the arguments)")
    p.add_argument("--quiet", dest="progress", action="store_false", help="no progress on stderr")
    p.add_argument("--allow-unconfined", action="store_true",
                   help="run generated code without a sandbox where bubblewrap is not available (unsafe)")
    p.add_argument("--dry-run", action="store_true", help="print the planned model calls and rollouts; run nothing")
    p.set_defaults(func=handle, resumable=True)  # a rerun of the same command resumes


def options(args: argparse.Namespace):
    from benchfill.cli.sim import rewriter_knobs
    from benchfill.run import RunOptions

    keys = RunOptions.__dataclass_fields__
    opts = RunOptions(**{k: v for k, v in vars(args).items() if k in keys})
    opts.sim_rewriter = getattr(args, "rewriter", None)
    opts.sim_rewriter_knobs = rewriter_knobs(args)
    return opts


def handle(args: argparse.Namespace) -> int:
    from benchfill import run as run_mod

    opts = options(args)
    if not (opts.benchmark or opts.items or opts.spec or opts.config):  # the library would run the demo
        from benchfill.errors import ConfigError

        raise ConfigError("name a benchmark (--benchmark NAME; demo is built in) or give --items and --spec")
    if args.dry_run:
        with run_mod.flag_names():
            plan = run_mod.dry_run(opts)
        for key, value in plan.items():
            print(f"{key}: {value}")
        return 0
    with run_mod.flag_names():  # what is refused names the flags typed here, not RunOptions' fields
        run_dir = run_mod.run(opts)
    if opts.progress:  # the headline on stderr; stdout stays the run folder alone, for scripts
        import json

        from benchfill.report import summary_lines

        rep = json.loads((run_dir / "report.json").read_text())
        print("\n".join([*summary_lines(rep), f"  report       {run_dir / 'report.md'}"]), file=sys.stderr)
    print(run_dir)
    return 0
