"""``benchfill sweep``: many benchmarks x strategies x seeds in one command, one Table 2."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="fill the gaps of many benchmarks with several strategies; one Table-2-style table",
        description="Run every (benchmark, strategy, seed) of a sweep file, each gap search one unit of work, "
                    "each run in its own run directory; write the table (markdown, JSON, plot) under "
                    "<runs-dir>/sweep-<name>/ and print it. Rerun to resume. See docs/sweep.md.",
    )
    p.add_argument("--config", required=True, metavar="SWEEP.toml", help="the sweep file (TOML or YAML)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: every unit in this process (default); ray: units as Ray tasks on the cluster "
                        "at --ray-address or $RAY_ADDRESS (needs a PostgreSQL store every node reaches)")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="the Ray cluster (default $RAY_ADDRESS)")
    p.add_argument("--store", metavar="URL", help="one SQLAlchemy URL for every run (overrides the file's store)")
    p.add_argument("--runs-dir", help="where run directories go (overrides the file's runs_dir)")
    p.add_argument("--quiet", dest="progress", action="store_false", help="no progress on stderr")
    p.set_defaults(func=handle, resumable=True)  # a rerun of the same command resumes


def handle(args: argparse.Namespace) -> int:
    from benchfill.sweep import load_sweep, run_sweep
    from benchfill.sweep_table import markdown

    sweep = load_sweep(args.config, store=args.store, runs_dir=args.runs_dir)
    table = run_sweep(sweep, executor=args.executor, ray_address=args.ray_address, progress=args.progress)
    print(markdown(table), end="")
    print(f"\nwritten: {table['paths']['table.md']}, table.json, table.png")
    return 0
