"""``benchfill import lm-eval|inspect PATH... --out DIR``: results from the tools users already run.

A thin layer over benchfill.importers, imported inside the handler so --help stays fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchfill.cli.argtypes import finite_float


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "import",
        help="lm-eval-harness or inspect_ai logs -> responses.csv (+ items.jsonl)",
        description="Read evaluation logs into one response matrix (model,item_id,correct,trials) and, "
        "where the logs carry them, the items' texts and targets.",
    )
    p.add_argument("tool", choices=("lm-eval", "inspect"), help="which tool wrote the logs")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="logs or folders of logs (lm-eval: the --output_path folder or samples_*.jsonl; "
                   "inspect: .eval/.json logs)")
    p.add_argument("--out", required=True, metavar="DIR", help="where to write responses.csv, items.jsonl, import.json")
    p.add_argument("--metric", help="the score that counts as correct (lm-eval default: acc, else exact_match; "
                   "inspect default: the first scorer)")
    p.add_argument("--filter", metavar="NAME",
                   help="lm-eval: the filter whose scores count, for a task that logs several (gsm8k: strict-match, "
                   "flexible-extract); the same as --metric METRIC,NAME, lm-eval's own notation")
    p.add_argument("--threshold", type=finite_float, help="count a non-binary score >= T as correct (recorded in import.json)")
    p.add_argument("--task", help="import only this task when the logs hold several")
    p.add_argument("--sum", dest="sum_repeats", action="store_true",
                   help="add up two logs of the same model and task (default: an error)")
    p.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from benchfill.cli.output import check_out_dir
    from benchfill.errors import ConfigError
    from benchfill.importers import ImportProblems, import_logs, write
    from benchfill.importers.matrix import OUTPUTS

    # before the logs are read (thousands of samples, or a large inspect log): a file where the folder goes,
    # a folder that takes no file, an output that is one of the logs
    check_out_dir(args.out, "--out", OUTPUTS, inputs={f"log {p}": p for p in args.paths})
    metric = args.metric
    if args.filter is not None:
        # lm-eval names a metric under a filter "METRIC,FILTER" (its results file's keys); the reader takes that
        if args.tool != "lm-eval":
            raise ConfigError("--filter: only lm-eval logs have filters")
        if "," in (metric or ""):
            raise ConfigError(f"--metric {metric} names a filter already; drop --filter {args.filter}")
        metric = f"{metric or ''},{args.filter}"
    try:
        result = import_logs(args.tool, args.paths, metric=metric, threshold=args.threshold,
                             task=args.task, sum_repeats=args.sum_repeats)  # fmt: skip
    except ImportProblems as exc:
        for line in exc.problems[:-1]:
            print(f"benchfill: error: {line}", file=sys.stderr)
        exc.args = (exc.problems[-1],)
        raise
    written = write(result, args.out)
    for line in result.warnings():
        print(f"benchfill: warning: {line}", file=sys.stderr)
    print("\n".join(result.lines()))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
