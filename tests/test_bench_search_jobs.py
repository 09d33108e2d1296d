"""bench/bench_search.py --jobs: the sweep's (cell, seed) pairs on worker processes give the same
figures as one process (each seed's world and run depend on the seed alone)."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_search  # noqa: E402


def test_jobs_on_worker_processes_match_one_process():
    bench_search._BENCHES["demo"] = bench_search.load_set("demo", 60, 0)
    jobs = [("preset hostile", "hostile", {}, "demo")]
    one = bench_search.run_jobs(jobs, [0, 1], 3, 0.0, workers=1)
    two = bench_search.run_jobs(jobs, [0, 1], 3, 0.0, workers=2)
    assert [c.seeds for c in two] == [[0, 1]]
    for a, b in zip(one, two, strict=True):
        assert a.out.keys() == b.out.keys()
        for s in a.out:
            assert [asdict(o) for o in a.out[s]] == [asdict(o) for o in b.out[s]], s
    # the seeds differ from each other, so the comparison above could tell a mix-up
    assert asdict(one[0].out["benchfill"][0]) != asdict(one[0].out["benchfill"][1])
