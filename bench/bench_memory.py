"""Retrieval from the store's search memory with 100,000 entries, on SQLite and on PostgreSQL (#16).

The memory of one benchmark: its 1,000 items on three fits' scales (the current one and two
earlier, linked by mean/sigma), and 97,000 children of 970 earlier runs (each run on one of the
scales), spread over the z scale. Child ids repeat across runs as they do in real stores
(``bf-g{gap}-r{round}-p{parent}-c{child}``: every run names its 100 children alike). A tenth of
the children are flagged or judged invalid; each run's reviewers (two) decided on 20 of its
children (about 38,900 decisions, half of them rejections), and a tenth of the runs had one of their
children rejected again by a run that reused it (``item@run``). Timed, per target (200 random
targets), as a run does it before searching a gap (benchfill/engine/memory_store.py):

- ``nearest``: the 16 entries nearest the target, mapped onto the current scale, each with its
  eligibility as a parent (two index range scans per scale, LIMIT 16 each, plus one look-up of
  the review decisions on the children found and of their runs' release rules);
- ``reusable``: an earlier child confirmed inside a gap of width 0.02 around the target.

Side by side with the same calls after the (benchmark, scale, ..., z) index is dropped, so the ratio
shows what the index buys. PostgreSQL runs in a throwaway cluster (tests/pg_server.py).

    nice -n 10 .venv/bin/python bench/bench_memory.py [--entries 100000] [--no-postgres]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the throwaway PostgreSQL server of the tests

BENCH = "bench"
ITEMS = 1000
SCALES = {"old-a": (1.08, 0.02), "old-b": (0.95, -0.01)}  # z_now = a * z_then + b


def fill(store, entries: int, seed: int = 0) -> tuple[list[str], list[float]]:
    from benchfill.engine.memory_store import scale_id
    from benchfill.schema import MemoryRecord, ReviewDecision

    rng = random.Random(seed)
    ids = [f"q{i:04d}" for i in range(ITEMS)]
    z_now = sorted(rng.random() for _ in ids)
    now = scale_id(ids, z_now)
    rows = [dict(benchmark=BENCH, scale=now, run_id="", item_id=i, origin="original", z=z, ancestor_id=i)
            for i, z in zip(ids, z_now, strict=True)]
    for sc, (a, b) in SCALES.items():
        rows += [dict(benchmark=BENCH, scale=sc, run_id="", item_id=i, origin="original", z=(z - b) / a + rng.gauss(0, .01),
                      ancestor_id=i) for i, z in zip(ids, z_now, strict=True)]
    scales = [now, *SCALES]
    record = json.dumps({"item_id": "x", "parent_id": "q0000", "ancestor_id": "q0000", "round": 1, "item": {},
                         "verdict": {"valid": True}, "annotation": None, "flags": [], "confirmation": None})
    names = [f"bf-g{g}-r{r}-p{p}-c{c}" for g in range(5) for r in range(5) for p in range(2) for c in range(2)]
    decisions = []
    run = 0
    while len(rows) < entries:
        rid, scale = f"run{run}", scales[run % len(scales)]
        for n in names[: entries - len(rows)]:
            bad = rng.random() < 0.1
            rows.append(dict(benchmark=BENCH, scale=scale, run_id=rid, item_id=n, origin="generated",
                             z=rng.random(), z_se=0.03, confirmed=rng.random() < 0.2, parent_id="q0000",
                             ancestor_id="q0000", valid=not (bad and rng.random() < 0.5), parent_ok=not bad,
                             flags_json='["order_anomaly"]' if bad else "[]",
                             data_json=json.dumps({"problem": f"child {n} of {rid}", "answer": "1"}),
                             record_json=record))
        for n in rng.sample(names, 20):
            decisions += [dict(run_id=rid, item_id=n, reviewer=who, decision=rng.choice(["accept", "reject"]),
                               reason="x") for who in ("alice", "bob")]
        if run % 10 == 9:  # a later run reused one of this run's children, and its reviewer turned it down
            decisions.append(dict(run_id=f"run{run + 1}", item_id=f"{rng.choice(names)}@{rid}", reviewer="cy",
                                  decision="reject", reason="x"))
        run += 1
    with store.engine.begin() as con:
        for i in range(0, len(rows), 5000):
            con.execute(MemoryRecord.__table__.insert(), rows[i : i + 5000])
        for i in range(0, len(decisions), 5000):
            con.execute(ReviewDecision.__table__.insert(), decisions[i : i + 5000])
        if store.engine.dialect.name == "postgresql":
            con.exec_driver_sql("ANALYZE")
    print(f"  {len(rows):,} entries of {run} runs, {len(decisions):,} review decisions", flush=True)
    return ids, z_now


def timed(fn, targets) -> tuple[float, float]:
    out = []
    for t in targets:
        t0 = time.perf_counter()
        fn(t)
        out.append(1000 * (time.perf_counter() - t0))
    out.sort()
    return statistics.median(out), out[int(0.95 * (len(out) - 1))]


def measure(store, ids, z_now, targets) -> dict[str, tuple[float, float]]:
    from benchfill.engine.memory_store import SharedMemory

    mem = SharedMemory(store, BENCH, ids, z_now)
    t0 = time.perf_counter()
    mem.link_scales()
    link_ms = 1000 * (time.perf_counter() - t0)
    got = mem.nearest(0.5, 16)
    assert len(got) == 16 and len(mem.links) == 3, (len(got), mem.links, mem.left_out)
    return {"link scales (once per run)": (link_ms, link_ms),
            "nearest 16": timed(lambda t: mem.nearest(t, 16), targets),
            "reusable in gap": timed(lambda t: mem.reusable(t - 0.01, t + 0.01), targets)}


def bench(name: str, url: str, entries: int, targets) -> None:
    from benchfill.store import Store

    store = Store(url, run_id="this-run")
    t0 = time.perf_counter()
    ids, z_now = fill(store, entries)
    print(f"{name}: {entries:,} entries written in {time.perf_counter() - t0:.1f} s", flush=True)
    with_index = measure(store, ids, z_now, targets)
    with store.engine.begin() as con:
        con.exec_driver_sql("DROP INDEX ix_memory_near")
        if store.engine.dialect.name == "postgresql":
            con.exec_driver_sql("ANALYZE")
    without = measure(store, ids, z_now, targets[:20])
    store.close()
    print(f"  {'':28s} {'indexed median / p95 ms':>26s} {'no index median ms':>20s} {'ratio':>7s}")
    for k, (med, p95) in with_index.items():
        if k.startswith("link"):  # reads the originals through their own index, not the one dropped
            print(f"  {k:28s} {med:12.2f} / {p95:9.2f}")
            continue
        slow = without[k][0]
        print(f"  {k:28s} {med:12.2f} / {p95:9.2f} {slow:20.2f} {slow / max(med, 1e-9):7.0f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args()
    targets = [random.Random(i).random() for i in range(200)]
    with tempfile.TemporaryDirectory() as tmp:
        bench("SQLite", f"sqlite:///{tmp}/memory.db", args.entries, targets)
    if not args.no_postgres:
        from pg_server import postgres_url

        with postgres_url(port=54341) as url:
            bench("PostgreSQL", url, args.entries, targets)


if __name__ == "__main__":
    main()
