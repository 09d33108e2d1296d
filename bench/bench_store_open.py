"""Concurrent opens of a new SQLite store: how many of N trials, each T threads opening one new file at once
(as a sweep's units open a shared store), fail to open it.

Two connections switching a new file to WAL at once can deadlock on its lock, and SQLite then answers
"database is locked" at once instead of waiting out the busy timeout (benchfill.store._sqlite_pragmas tries
the switch again). Run from the repository root:

    python bench/bench_store_open.py [--trials 1500] [--threads 6]

It prints the failures and the first one's message; 0 is the target. A loaded machine (the full test suite
running beside it) makes the race likelier.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from benchfill.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1500)
    ap.add_argument("--threads", type=int, default=6)
    args = ap.parse_args()
    fails, first, t0 = 0, None, time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        for trial in range(args.trials):
            db = Path(root) / f"t{trial}" / "store.db"
            db.parent.mkdir()
            errors: list[str] = []
            together = threading.Barrier(args.threads)

            def open_store(db: Path = db, errors: list[str] = errors, together: threading.Barrier = together) -> None:
                together.wait()
                try:
                    Store(db, run_id="r").close()
                except Exception as exc:  # noqa: BLE001  (counted, whatever it is)
                    errors.append(str(exc))

            threads = [threading.Thread(target=open_store) for _ in range(args.threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                fails += 1
                first = first or errors[0]
    print(f"{args.trials} trials of {args.threads} threads opening one new store at once: {fails} failed "
          f"({time.perf_counter() - t0:.0f} s)" + (f"; first: {first}" if first else ""))


if __name__ == "__main__":
    main()
