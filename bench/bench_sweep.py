"""The paper's Table 2 on the simulated world, by `benchfill sweep`, with each executor: the same sweep
in this process (--executor local) and on a two-node Ray cluster on loopback with a PostgreSQL store
(--executor ray), their tables side by side and the cells in which they differ.

    python bench/bench_sweep.py                       # docs/sweep-shared-data.toml, both executors
    python bench/bench_sweep.py --executors local     # the table alone

The cluster and the PostgreSQL server are the acceptance test's (tests/test_sweep_ray.py,
tests/pg_server.py): two `ray start` processes of one CPU each, a throwaway server; all in /tmp.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, shared_data

sys.path.insert(0, str(ROOT / "tests"))  # the test's loopback cluster and PostgreSQL server


def _sweep(config: Path, runs: Path, store: str | None):
    from benchfill.sweep import load_sweep

    shared_data()  # the sweep file names ../shared/data; say so early if it is not there
    return load_sweep(config, store=store, runs_dir=str(runs))


CELL = "reduction, target deviation, model calls, rollouts, true reduction (simulated)"


def _cells(table: dict) -> dict[tuple[str, str], tuple]:
    """Per (benchmark, strategy): the figures of CELL, rounded to 1e-6 (the true reduction is None where
    the table has none: the oracle's, or a sweep on real endpoints)."""
    out = {}
    for row in table["rows"]:
        for s, c in row["strategies"].items():
            if c is not None:
                out[(row["benchmark"], s)] = (_round(c["reduction"]), _round(c["target_deviation"]),
                                              c["model_calls"], c["rollouts"],
                                              _round(c.get("true_reduction (simulated)")))
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "docs" / "sweep-shared-data.toml")
    ap.add_argument("--executors", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    args = ap.parse_args()
    from benchfill.sweep import run_sweep
    from benchfill.sweep_table import markdown

    tmp = Path(tempfile.mkdtemp(prefix="bfs-", dir="/tmp"))  # short: Ray's unix sockets live under it
    tables, seconds = {}, {}
    for executor in args.executors:
        t0 = time.perf_counter()
        if executor == "local":
            tables[executor] = run_sweep(_sweep(args.config, tmp / "runs-local", None), "local")
        else:
            os.environ["RAY_TMPDIR"] = str(tmp)
            os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
            from pg_server import postgres_url
            from test_sweep_ray import LocalRay

            cluster = LocalRay(tmp)
            try:
                with postgres_url() as url:
                    cluster.start()
                    tables[executor] = run_sweep(_sweep(args.config, tmp / "runs-ray", url), "ray", cluster.address)
            finally:
                cluster.stop()
        seconds[executor] = time.perf_counter() - t0
        print(f"\n--executor {executor} ({seconds[executor]:.0f} s)\n", flush=True)
        print(markdown(tables[executor]), flush=True)
    if len(tables) == 2:
        a, b = _cells(tables["local"]), _cells(tables["ray"])
        same = [k for k in a if a[k] == b.get(k)]
        print(f"\nlocal vs ray: {len(same)} of {len(a)} (benchmark, strategy) cells equal ({CELL})")
        for k in a:
            if a[k] != b.get(k):
                print(f"  {k[0]} {k[1]}: local {a[k]}  ray {b.get(k)}")
    print(f"\n(runs under {tmp})")


if __name__ == "__main__":
    main()
