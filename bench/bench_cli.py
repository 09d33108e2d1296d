"""Start-up time of ``python -m benchfill diagnose --help`` next to a bare interpreter.

Both are run alternately in fresh processes, so the two figures share the
machine's state; the script prints medians, the ratio, and whether the 1 s
target holds. It also lists heavy modules the help path imported (should be none).

    python bench/bench_cli.py [--reps 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

HEAVY = ("numpy", "scipy", "matplotlib", "litellm", "openai", "sqlmodel", "benchfill.irt")


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    reps = ap.parse_args().reps
    bare = [sys.executable, "-c", "pass"]
    help_cmd = [sys.executable, "-m", "benchfill", "diagnose", "--help"]
    _time(bare), _time(help_cmd)  # warm the file cache
    t_bare, t_help = [], []
    for _ in range(reps):
        t_bare.append(_time(bare))
        t_help.append(_time(help_cmd))
    mb, mh = statistics.median(t_bare), statistics.median(t_help)
    probe = (
        "import sys, benchfill.cli as c\n"
        "try:\n    c.main(['diagnose', '--help'])\nexcept SystemExit:\n    pass\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    )
    heavy = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stderr.strip()
    print(f"reps: {reps} each, alternating")
    print(f"python -c pass                      median {mb * 1000:7.1f} ms  max {max(t_bare) * 1000:7.1f} ms")
    print(f"python -m benchfill diagnose --help median {mh * 1000:7.1f} ms  max {max(t_help) * 1000:7.1f} ms")
    print(f"ratio help / bare: {mh / mb:.2f}x; target < 1 s: {'met' if max(t_help) < 1.0 else 'MISSED'}")
    print(f"heavy modules imported by --help: {heavy or 'none'}")


if __name__ == "__main__":
    main()
