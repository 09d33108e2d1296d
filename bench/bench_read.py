"""Time to read a long-format response file (``benchfill.read_responses``) at a real leaderboard's size.

A file of M models x I items (100 x 20,000 by default: two million rows, 47 MB of CSV), made here in a temp
folder, is read as CSV and as JSONL. Beside benchfill's reading, side by side in the same process:
- the csv module's reader alone, doing nothing with the fields: the floor of any reading built on it;
- ``json.loads`` of every line alone, the same for JSONL;
- where pandas is installed (it is not a dependency of benchfill), ``pandas.read_csv`` with its C engine and
  with pyarrow's, each followed by the factorizing of the names that benchfill's reading also does.
Printed: seconds, microseconds a row, and each over benchfill's own. benchfill's reading checks every row and
names the first line at fault; the pandas readings check nothing, so they are a bound on what a library
could save, not a like-for-like replacement. Then the peak memory of benchfill's reading of each file, in a
fresh process, above the interpreter's with benchfill imported, beside the file's size.

    nice -n 10 .venv/bin/python bench/bench_read.py [--models 100] [--items 20000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _write(folder: Path, models: int, items: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    csv_path, jsonl_path = folder / "responses.csv", folder / "responses.jsonl"
    with open(csv_path, "w") as c, open(jsonl_path, "w") as j:
        c.write("model,item_id,correct,trials\n")
        for m in range(models):
            right = rng.integers(0, 5, items)
            c.write("".join(f"model-{m},item-{i},{right[i]},4\n" for i in range(items)))
            j.write("".join(json.dumps({"model": f"model-{m}", "item_id": f"item-{i}", "correct": int(right[i]),
                                        "trials": 4}) + "\n" for i in range(items)))
    return csv_path, jsonl_path


def _csv_alone(path: Path) -> None:
    with open(path, newline="") as fh:
        for _ in csv.reader(fh):
            pass


def _json_alone(path: Path) -> None:
    with open(path) as fh:
        for line in fh:
            json.loads(line)


def _pandas(engine: str):
    import pandas as pd

    def read(path: Path) -> None:
        frame = pd.read_csv(path, dtype={"model": str, "item_id": str}, engine=engine)
        pd.factorize(frame["model"])
        pd.factorize(frame["item_id"])
    return read


# VmHWM, not ru_maxrss: Linux keeps a forked child's ru_maxrss across exec, so a child of this process (grown by
# the reads above) starts with this one's peak and showed 0
PEAK = """
import re, sys
from benchfill.data import read_responses
def hwm():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1])
base = hwm()
read_responses(sys.argv[1])
print((hwm() - base) / 1024)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--items", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=2, help="best of this many reads, each")
    args = ap.parse_args()

    from benchfill.data import read_responses

    with tempfile.TemporaryDirectory() as tmp:
        csv_path, jsonl_path = _write(Path(tmp), args.models, args.items)
        rows = args.models * args.items
        print(f"{args.models} models x {args.items:,} items = {rows:,} rows; CSV {csv_path.stat().st_size / 1e6:.0f} MB, "
              f"JSONL {jsonl_path.stat().st_size / 1e6:.0f} MB; best of {args.repeat}")
        readers = [("CSV", "benchfill read_responses", csv_path, read_responses),
                   ("CSV", "csv.reader alone (floor)", csv_path, _csv_alone)]
        try:
            import pandas  # noqa: F401
            readers += [("CSV", "pandas.read_csv, C engine", csv_path, _pandas("c")),
                        ("CSV", "pandas.read_csv, pyarrow", csv_path, _pandas("pyarrow"))]
        except ImportError:
            print("(pandas is not installed: its rows are left out)")
        readers += [("JSONL", "benchfill read_responses", jsonl_path, read_responses),
                    ("JSONL", "json.loads alone (floor)", jsonl_path, _json_alone)]
        ours: dict[str, float] = {}
        print(f"{'file':6} {'reader':28} {'seconds':>8} {'us/row':>7} {'x benchfill':>12}")
        for kind, name, path, read in readers:
            best = float("inf")
            for _ in range(args.repeat):
                t = time.perf_counter()
                try:
                    read(path)
                except ImportError as exc:  # pyarrow's engine without pyarrow
                    print(f"{kind:6} {name:28} (not run: {exc})")
                    break
                best = min(best, time.perf_counter() - t)
            else:
                ours.setdefault(kind, best)
                print(f"{kind:6} {name:28} {best:8.2f} {best / rows * 1e6:7.2f} {best / ours[kind]:12.2f}")
        print(f"{'file':6} {'file MB':>8} {'peak MB above the interpreter, fresh process':>46}")
        for kind, path in (("CSV", csv_path), ("JSONL", jsonl_path)):
            peak = float(subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True, text=True,
                                        check=True).stdout)
            print(f"{kind:6} {path.stat().st_size / 1e6:8.0f} {peak:46.0f}")


if __name__ == "__main__":
    main()
