"""The search memory in the store (benchfill/engine/memory_store.py): retrieval, eligibility, scales, reuse.

On a real SQLite store and a real PostgreSQL server, with links and distances worked out by hand
and retrieval checked against a brute-force sort of the whole table.
"""

from __future__ import annotations

import json
import random

import pytest
from pg_server import postgres_url

from benchfill.engine.memory_store import (
    MIN_SHARED,
    Link,
    SharedMemory,
    foreign_id,
    mean_sigma_link,
    plan_memory,
    reused_child,
    scale_id,
)
from benchfill.schema import MemoryRecord, ReviewDecision, RunMeta
from benchfill.search import Memory
from benchfill.search.annotate import Annotation
from benchfill.search.loop import Child
from benchfill.search.services import Verdict
from benchfill.search.snapshot import child_to_dict
from benchfill.store import Store

BENCH = "toy"
IDS = [f"q{i:02d}" for i in range(30)]
Z_NOW = [round(0.02 + 0.032 * i, 6) for i in range(30)]  # 0.02 ... 0.948
A, B = 1.1, 0.05  # the old fit's z map onto the current one as z_now = 1.1 z_then + 0.05


def _then(z_now: float) -> float:
    return (z_now - B) / A


def _child(cid: str, z: float, *, valid=True, flags=(), confirmed=None, stop="precise") -> Child:
    ann = Annotation(difficulty=z * 6 - 3, se=0.3, z=z, z_se=0.05, rollouts=40,
                     results=[{"probe": "p0", "ability": 0.0, "correct": 3, "trials": 8}])
    conf = None if confirmed is None else Annotation(confirmed * 6 - 3, 0.12, confirmed, 0.02, 64, stop=stop)
    return Child(cid, "q05", "q05", 2, {"id": cid, "problem": f"text {cid}", "answer": "1"},
                 Verdict(valid, "ok" if valid else "wrong key", "judge"), ann, list(flags), confirmation=conf)


def _fill(store: Store) -> None:
    """Originals on the current scale and on an old one; run r1's children on the old scale."""
    old = SharedMemory(Store(store.url, run_id="r1"), BENCH, IDS, [_then(z) for z in Z_NOW])
    old.record_originals()
    target_then = _then(0.5)  # the gap [0.45, 0.55] of the current fit, on the old scale
    made = [
        _child("good", target_then + 0.004, confirmed=target_then + 0.002),  # reusable: confirmed inside
        _child("invalid", target_then + 0.0005, valid=False),
        _child("flagged", target_then - 0.0005, flags=["order_anomaly"], confirmed=target_then),
        _child("rejected", target_then + 0.001, confirmed=target_then + 0.001),
        _child("copy", target_then - 0.001, flags=["near_duplicate"]),
        _child("one_rejects", target_then - 0.002),
        _child("changed_mind", target_then - 0.0015),
        # confirmed inside, but by a confirmation cut short (its answers ruled out a narrower band): coarse
        _child("coarse", target_then + 0.0003, confirmed=target_then + 0.0003, stop="outside"),
        # confirmed nearer the middle than good, but a reviewer's edit stands: the release carries other text
        _child("edited", target_then + 0.001, confirmed=target_then + 0.001),
    ]
    for c in made:
        old.record_child(0, c)
    old.store.close()
    # Each reviewer's latest decision counts, under the release rule (r1 kept none: one accept, no reject).
    with store.session() as s:
        s.add(ReviewDecision(run_id="r1", item_id="rejected", reviewer="ann", decision="accept"))
        s.add(ReviewDecision(run_id="r1", item_id="one_rejects", reviewer="ann", decision="reject", reason="key"))
        s.add(ReviewDecision(run_id="r1", item_id="changed_mind", reviewer="ann", decision="reject", reason="key"))
        s.add(ReviewDecision(run_id="r1", item_id="edited", reviewer="ann", decision="edit",
                             edited_json=json.dumps({"id": "edited", "problem": "fixed text", "answer": "2"})))
    with store.session() as s:
        s.add(ReviewDecision(run_id="r1", item_id="rejected", reviewer="bob", decision="reject", reason="key"))
        # a later accept by another reviewer does not undo ann's rejection (release would not take it) ...
        s.add(ReviewDecision(run_id="r1", item_id="one_rejects", reviewer="bob", decision="accept"))
        # ... ann's own later accept does
        s.add(ReviewDecision(run_id="r1", item_id="changed_mind", reviewer="ann", decision="accept"))


@pytest.fixture(scope="module")
def pg():
    with postgres_url(port=54337) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        s = Store(tmp_path / "shared.db", run_id="r2")
    else:
        url = request.getfixturevalue("pg")
        s = Store(url, run_id="r2")
        with s.engine.begin() as con:  # one server for the module: start each test from an empty memory
            con.execute(MemoryRecord.__table__.delete())
            con.execute(ReviewDecision.__table__.delete())
            con.execute(RunMeta.__table__.delete())
    yield s
    s.close()


def test_mean_sigma_link_recovers_a_known_map_and_refuses_too_few_or_disagreeing_items():
    now = dict(zip(IDS, Z_NOW, strict=True))
    then = {i: _then(z) for i, z in now.items()}
    link = mean_sigma_link("old", then, now)
    assert isinstance(link, Link)
    assert link.a == pytest.approx(A) and link.b == pytest.approx(B) and link.rms == pytest.approx(0, abs=1e-12)
    assert link.shared == 30 and link(_then(0.5)) == pytest.approx(0.5)
    few = dict(list(then.items())[: MIN_SHARED - 1])
    assert "shares 9 benchmark items" in mean_sigma_link("old", few, now)
    shuffled = dict(zip(IDS, random.Random(3).sample(list(then.values()), len(then)), strict=True))
    assert "correlate" in mean_sigma_link("old", shuffled, now)


def test_the_scale_id_is_the_fit():
    assert scale_id(IDS, Z_NOW) == scale_id(list(reversed(IDS)), list(reversed(Z_NOW)))
    assert scale_id(IDS, Z_NOW) != scale_id(IDS, [z + 1e-6 for z in Z_NOW])


def test_invalid_rejected_and_flagged_entries_are_never_parents(store):
    _fill(store)
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    mem.record_originals()
    found = mem.nearest(0.5, 10)
    by = {f.row.item_id: f for f in found}
    # Every child of r1 is among the 10 nearest (all within 0.01 of the target, mapped).
    barred = {"invalid", "flagged", "rejected", "copy", "one_rejects", "edited"}
    assert barred | {"good", "changed_mind", "coarse"} <= set(by)
    assert {k for k, f in by.items() if f.row.origin == "generated" and not f.parent_ok} == barred
    assert by["good"].z == pytest.approx(A * by["good"].row.z + B)  # mapped onto the current scale
    memory = Memory(0.5, [f.entry() for f in found])
    parents = memory.parents(10)
    names = {e.item_id for e in parents}
    assert names.isdisjoint({foreign_id(i, "r1") for i in barred})
    assert foreign_id("good", "r1") in names and foreign_id("changed_mind", "r1") in names
    # ... though they stay references: measured items around the target, shown for context.
    assert foreign_id("flagged", "r1") in {e.item_id for e in memory.references(8)}


def test_reuse_takes_only_a_confirmed_eligible_child_inside_the_gap(store):
    _fill(store)
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    mem.record_originals()
    got = mem.reusable(0.45, 0.55)
    assert got is not None and got.row.item_id == "good"  # flagged, rejected, coarse, edited sit closer, confirmed too
    assert mem.reusable(0.505, 0.55) is None  # good's confirmed z maps to 0.5022: outside this gap
    c = reused_child(got, b_min=-3.0, b_max=3.0)
    assert c.item_id == "good@r1" and "reused" in c.flags and c.item["id"] == "good@r1"
    assert c.confirmation.z == pytest.approx(A * (_then(0.5) + 0.002) + B)
    assert c.confirmation.z_se == pytest.approx(A * 0.02)
    assert c.confirmation.difficulty == pytest.approx(-3.0 + 6.0 * c.confirmation.z)


def test_own_entries_are_restored_not_retrieved_and_unlinked_scales_are_left_out_with_a_reason(store):
    _fill(store)
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    mem.record_originals()
    mem.record_child(0, _child("mine", 0.5, confirmed=0.5))
    # A fit that shares only 5 items with the current one: its child right on the target stays out.
    stray = SharedMemory(Store(store.url, run_id="r0"), BENCH, IDS[:5], Z_NOW[:5])
    stray.record_originals()
    stray.record_child(0, _child("stray", 0.5, confirmed=0.5))
    stray.store.close()
    mem.link_scales()
    assert list(mem.left_out.values()) == ["shares 5 benchmark items with the current fit (at least 10 needed)"]
    names = {f.row.item_id for f in mem.nearest(0.5, 12)}
    assert "mine" not in names and "stray" not in names and "good" in names
    assert mem.reusable(0.45, 0.55).row.item_id == "good"


def test_retrieval_equals_a_brute_force_sort_of_the_whole_memory(store):
    rng = random.Random(5)
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    mem.record_originals()
    links = {"old1": (1.1, 0.05), "old2": (0.9, -0.02)}
    rows = []
    for sc, (a, b) in links.items():
        rows += [MemoryRecord(benchmark=BENCH, scale=sc, item_id=i, z=(z - b) / a) for i, z in zip(IDS, Z_NOW, strict=True)]
    for n in range(600):
        sc = rng.choice([mem.scale, "old1", "old2"])
        rows.append(MemoryRecord(benchmark=BENCH, scale=sc, run_id=rng.choice(["r1", "r2", "r3"]), item_id=f"c{n}",
                                 origin="generated", z=rng.random(), valid=True, parent_ok=rng.random() > 0.2,
                                 data_json=json.dumps({"id": f"c{n}"})))
    rows.append(MemoryRecord(benchmark="other", scale=mem.scale, item_id="x", z=0.5))
    with store.session() as s:
        s.add_all(rows)
    mem.link_scales()
    for target in (0.0, 0.13, 0.5, 0.77, 1.0):
        got = [(f.name, round(f.z, 12)) for f in mem.nearest(target, 16)]
        every = []
        for r in rows[:-1] + [MemoryRecord(benchmark=BENCH, scale=mem.scale, item_id=i, z=z)
                              for i, z in zip(IDS, Z_NOW, strict=True)]:
            if r.origin == "generated" and r.run_id == "r2" or r.scale != mem.scale and r.origin == "original":
                continue
            a, b = links.get(r.scale, (1.0, 0.0))
            name = r.item_id if r.origin == "original" else foreign_id(r.item_id, r.run_id)
            every.append((abs(a * r.z + b - target), name, round(a * r.z + b, 12)))
        assert got == [(n, z) for _, n, z in sorted(every)[:16]], target


def test_a_rerecorded_child_updates_its_row(store):
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    c = _child("c1", 0.4)
    mem.record_child(1, c)
    c.confirmation = Annotation(0.6, 0.1, 0.41, 0.02, 64)
    c.flags.append("order_anomaly")
    mem.record_child(1, c)
    rows = store.all(MemoryRecord)
    assert len(rows) == 1 and rows[0].confirmed and rows[0].z == 0.41 and not rows[0].parent_ok
    assert json.loads(rows[0].record_json) == json.loads(json.dumps(child_to_dict(c)))


def test_a_rejection_by_a_run_that_reused_the_item_counts_too(store):
    _fill(store)
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    mem.record_originals()
    assert mem.reusable(0.45, 0.55).row.item_id == "good"
    with store.session() as s:  # run r2 reused good@r1, and its reviewer turned it down
        s.add(ReviewDecision(run_id="r2", item_id=foreign_id("good", "r1"), reviewer="cy", decision="reject"))
    assert mem.reusable(0.45, 0.55) is None
    assert not {f.row.item_id: f for f in mem.nearest(0.5, 10)}["good"].parent_ok


def test_an_item_removed_from_a_release_is_neither_reused_nor_a_parent_until_accepted_again(store):
    # A reviewer removed good@r1 from a release (its answer key wrong); three later runs on the store reused
    # it all the same, calling its gap filled, since the memory read only the review decisions. A release
    # keeps its removals in force in the store (REMOVED_META); an accept after the removal takes it back,
    # as the next release does.
    from datetime import UTC, datetime, timedelta

    from benchfill.engine.memory_store import REMOVED_META
    from benchfill.schema import RunMeta

    _fill(store)
    at = datetime.now(UTC) - timedelta(minutes=5)
    with store.session() as s:  # run r2's release 1.1.0 removed it (release._keep_removals)
        s.merge(RunMeta(run_id="r2", key=REMOVED_META, value_json=json.dumps([["good", "r1", at.isoformat()]])))
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    mem.record_originals()
    assert mem.reusable(0.45, 0.55) is None
    assert not {f.row.item_id: f for f in mem.nearest(0.5, 10)}["good"].parent_ok
    from benchfill.engine.memory_store import memory_contents

    def may_parent() -> int:  # what `memory list` says of run r1 (3 before the removal: good, changed_mind, coarse)
        (r1,) = [r for r in memory_contents(store) if r["run_id"] == "r1"]
        return r1["may_parent"]

    assert may_parent() == 2
    with store.session() as s:  # accepted again after the removal: back, as a release takes it back
        s.add(ReviewDecision(run_id="r1", item_id="good", reviewer="dee", decision="accept"))
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    assert mem.reusable(0.45, 0.55).row.item_id == "good"
    assert may_parent() == 3


def test_a_release_keeps_its_removals_in_force_in_the_store(tmp_path, shared_data):
    from test_review_support import CHILD_IDS, make_run

    from benchfill.engine.memory_store import REMOVED_META
    from benchfill.release import release
    from benchfill.review import ReviewBoard
    from benchfill.store import open_run_store

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        for i in CHILD_IDS[:2]:
            b.decide(i, "ann", "accept")
    release(run, "1.0.0")
    release(run, "1.1.0", remove={CHILD_IDS[0]: "ann: the key is wrong"})
    own = open_run_store(run, create=False)
    kept = own.get_meta(REMOVED_META)
    own.close()
    assert [e[:2] for e in kept] == [[CHILD_IDS[0], run.name]] and datetime_ok(kept[0][2])


def datetime_ok(text: str) -> bool:
    from datetime import datetime

    return datetime.fromisoformat(text).tzinfo is not None


def test_a_reusable_child_that_would_widen_the_coverage_at_an_end_gap_is_searched_past(tmp_path, monkeypatch):
    # The engine reuses an earlier run's child confirmed inside a gap, but not one that, at an end of a dense
    # benchmark's axis, likely lies beyond the hardest item: the search's own children would not be taken
    # there either (GapSearch.widens). The search is replaced by a marker; the store is a real SQLite.
    import asyncio
    from types import SimpleNamespace

    from benchfill.engine import backend as engine
    from benchfill.search import GapResult, Spend

    zs = [round(v / 200, 6) for v in range(201) if v / 200 < 0.986 or v / 200 > 0.999]  # top end gap [0.985, 1]
    z_of = {f"q{i:03d}": v for i, v in enumerate(zs)}
    searched = []

    async def search(gs, *args, **kwargs):
        searched.append(gs.gap_index)
        return GapResult(gs.gap_index, gs.left, gs.right, gs.target_z, "benchfill", [], None, 0, Spend())

    monkeypatch.setattr(engine, "benchfill_search", search)
    b = object.__new__(engine.Backend)
    b.opts = SimpleNamespace(gaps=3, rounds=2, parents=2, children=2, references=8, tolerance=0.01, steering="on",
                             selection="posterior", strategy="benchfill", seed=0, confirm=True)
    b.store, b.prescreen, b.shared, b.services, b.annotator = Store(f"sqlite:///{tmp_path / 's.db'}", run_id="r2"), None, None, None, None
    b.bench = SimpleNamespace(spec=SimpleNamespace(text_field="problem"))
    dup = SimpleNamespace(check=lambda text: None)
    gap = SimpleNamespace(left=0.985, right=1.0)

    def reuse(g, placed_se):
        c = _child("old", 0.9925, confirmed=0.9925)
        c.confirmation.z_se = placed_se
        c.flags.append("reused")
        b.memory_plan = {"gaps": {str(g): {"left": 0.985, "right": 1.0, "entries": [], "items": {},
                                           "reuse": {"child": child_to_dict(c), "from": {"run_id": "r1"}}}}}
        return asyncio.run(b.search_gap(g, gap, {}, z_of, dup, lambda msg: None))

    precise = reuse(0, 0.002)  # measured precisely enough to lie inside: reused, no search
    assert precise.chosen is not None and precise.chosen.item_id == "old" and searched == []
    coarse = reuse(1, 0.015)  # a third of the time beyond the hardest item: searched instead
    assert coarse.chosen is None and searched == [1]


def test_reuse_passes_over_a_child_whose_placement_is_only_a_bound(store):
    """Every probe wrong: the child's z is a bound (flags no_finite_mle, all_wrong), not a place in the gap;
    an audit saw such children reused and counted as filling it."""
    old = SharedMemory(Store(store.url, run_id="r1"), BENCH, IDS, [_then(z) for z in Z_NOW])
    old.record_originals()
    target_then = _then(0.5)
    old.record_child(0, _child("good", target_then + 0.004, confirmed=target_then + 0.002))
    old.record_child(0, _child("unbounded", target_then, flags=["no_finite_mle", "all_wrong"],
                               confirmed=target_then))
    old.store.close()
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    mem.record_originals()
    assert mem.reusable(0.45, 0.55).row.item_id == "good"


def test_two_runs_on_one_fit_may_record_the_originals_at_once(store):
    """Run a writes the originals between run b's look for them and b's own write: b leaves them be."""
    from sqlalchemy import event
    from sqlmodel import select

    a = SharedMemory(Store(store.url, run_id="r1"), BENCH, IDS, Z_NOW)
    b = SharedMemory(store, BENCH, IDS, Z_NOW)
    wrote = []

    def a_writes_after_b_looked(conn, cursor, statement, params, context, executemany):
        if not wrote and statement.lstrip().upper().startswith("SELECT") and "memoryrecord" in statement:
            wrote.append(True)
            a.record_originals()

    event.listen(store.engine, "after_cursor_execute", a_writes_after_b_looked)
    try:
        b.record_originals()
    finally:
        event.remove(store.engine, "after_cursor_execute", a_writes_after_b_looked)
        a.store.close()
    with store.session() as s:
        originals = list(s.exec(select(MemoryRecord).where(MemoryRecord.origin == "original")))
    assert wrote and sorted(r.item_id for r in originals) == IDS
    assert {r.z for r in originals} == set(Z_NOW) and all(r.created_at is not None for r in originals)


def test_review_counts_as_release_counts_it_under_the_rule_the_making_run_kept(store):
    """Each reviewer's latest decision, pooled over the runs that queued the child (X in the run that made
    it, X@run in a run that reused it), judged by the release rule the making run kept."""
    made = SharedMemory(Store(store.url, run_id="r3"), BENCH, IDS, Z_NOW)
    made.record_child(0, _child("lenient", 0.501, confirmed=0.501))  # r3 kept a rule allowing one rejection
    made.record_child(0, _child("pooled", 0.502, confirmed=0.502))
    made.store.set_meta("release_rule", {"min_accepts": 1, "max_rejects": 1})
    made.store.close()
    strict = SharedMemory(Store(store.url, run_id="r1"), BENCH, IDS, Z_NOW)
    strict.record_child(0, _child("strict", 0.4995, confirmed=0.4995))  # r1 kept none: no rejection allowed
    strict.store.close()
    with store.session() as s:
        for run, item in (("r3", "lenient"), ("r1", "strict")):
            s.add(ReviewDecision(run_id=run, item_id=item, reviewer="ann", decision="reject", reason="key"))
            s.add(ReviewDecision(run_id=run, item_id=item, reviewer="bob", decision="accept"))
        # ann and bob reject "pooled" where it was made; in run r4, which reused it, ann changed her mind
        s.add(ReviewDecision(run_id="r3", item_id="pooled", reviewer="ann", decision="reject", reason="key"))
        s.add(ReviewDecision(run_id="r3", item_id="pooled", reviewer="bob", decision="reject", reason="key"))
    with store.session() as s:
        s.add(ReviewDecision(run_id="r4", item_id=foreign_id("pooled", "r3"), reviewer="ann", decision="accept"))
    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    mem.record_originals()
    by = {f.row.item_id: f for f in mem.nearest(0.5, 8)}
    assert (by["lenient"].parent_ok, by["strict"].parent_ok, by["pooled"].parent_ok) == (True, False, True)
    assert mem.reusable(0.4985, 0.5015).row.item_id == "lenient"  # strict sits nearer the middle
    with store.session() as s:  # bob, too, now rejects it in r4: two rejections, one more than r3 allows
        s.add(ReviewDecision(run_id="r4", item_id=foreign_id("pooled", "r3"), reviewer="cy", decision="reject",
                             reason="ambiguous"))
    assert not {f.row.item_id: f for f in mem.nearest(0.5, 8)}["pooled"].parent_ok


def test_the_review_look_up_reads_only_the_decisions_on_the_children_found(store):
    """Child ids repeat across runs (bf-g0-r1-p0-c0 in every run): the decisions are looked up by (run, item)
    and item@run, not by the id alone, which would read every run's decisions on that id."""
    from sqlalchemy import event

    mem = SharedMemory(store, BENCH, IDS, Z_NOW)
    rows = [MemoryRecord(benchmark=BENCH, scale=mem.scale, run_id=f"r{n}", item_id="bf-g0-r1-p0-c0",
                         origin="generated", z=0.5 + n / 100, valid=True) for n in range(40)]
    with store.session() as s:
        s.add_all(rows)
        s.add_all([ReviewDecision(run_id=f"r{n}", item_id="bf-g0-r1-p0-c0", reviewer="ann", decision="accept")
                   for n in range(40)])
        s.add(ReviewDecision(run_id="r9", item_id="bf-g0-r1-p0-c0@r0", reviewer="bob", decision="reject", reason="x"))
    loaded = []

    def count(target, context):
        loaded.append((target.run_id, target.item_id))

    event.listen(ReviewDecision, "load", count)
    try:
        (found,) = mem.nearest(0.5, 1)  # r0's child, right on the target
    finally:
        event.remove(ReviewDecision, "load", count)
    assert found.name == "bf-g0-r1-p0-c0@r0" and not found.parent_ok  # bob rejected it where it was reused
    assert sorted(loaded) == [("r0", "bf-g0-r1-p0-c0"), ("r9", "bf-g0-r1-p0-c0@r0")]


def test_a_run_reads_only_the_children_of_its_own_world_and_says_how_many_it_left_out(store):
    """A simulated run's children are never parents, references or picks of a run on real endpoints, nor
    a real run's of a simulated run (its world cannot know their truth). The world is the run's recorded
    backend; the benchmark's own items are read by both."""
    from types import SimpleNamespace

    from sqlmodel import select

    for run, backend, cid in (("s1", "sim", "dreamt"), ("o1", "openai", "measured")):
        st = Store(store.url, run_id=run)
        st.set_meta("backend", backend)
        SharedMemory(st, BENCH, IDS, Z_NOW).record_child(0, _child(cid, 0.5, confirmed=0.5))
        st.close()
    with store.session() as s:
        assert dict(s.exec(select(MemoryRecord.item_id, MemoryRecord.simulated)).all()) == {"dreamt": True, "measured": False}
    gap = SimpleNamespace(left=0.45, right=0.55)
    for run, simulated, own, other, whose in (("r2", False, "measured@o1", "dreamt@s1", "simulated children"),
                                               ("s2", True, "dreamt@s1", "measured@o1", "real children")):
        mem = SharedMemory(Store(store.url, run_id=run), BENCH, IDS, Z_NOW, simulated=simulated)
        mem.record_originals()
        names = [f.name for f in mem.nearest(0.5, 3)]
        assert names == [own, "q15", "q14"] and other not in names  # the items at 0.5 and 0.468 (0.532 ties)
        assert mem.reusable(0.45, 0.55).name == own
        plan = plan_memory(mem, [gap], 3, -3.0, 3.0)
        (said,) = plan["left_out"].items()  # into the report's memory summary, where the scales left out are
        assert said[0] == f"{mem.scale} ({whose})" and said[1].startswith("1 children made ")
        assert plan["gaps"]["0"]["reuse"]["from"]["item_id"] == own.split("@")[0]
        mem.store.close()


def test_memory_list_and_forget_through_the_cli(store, capsys):
    # a user had no way to see the shared memory, nor to drop a bad run's children from it, but raw SQL
    from benchfill.cli import main
    from benchfill.engine.memory_store import memory_contents

    _fill(store)
    where = str(store.url) if store.url.startswith("postgresql") else store.engine.url.database
    assert main(["memory", "list", "--store", where, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {(r["run_id"], r["origin"], r["scales"]): r for r in rows}
    assert by[("r1", "generated", 1)]["entries"] == 9 and by[("r1", "generated", 1)]["world"] == "real"
    assert by[("r1", "generated", 1)]["confirmed"] == 4  # good, flagged, rejected, edited (coarse was cut short)
    # as a later run's retrieval takes them: good, changed_mind, coarse; not invalid, flagged or copy (the judge and
    # the screens), nor rejected, one_rejects or edited (review). It counted those three too.
    assert by[("r1", "generated", 1)]["may_parent"] == 3
    assert by[("", "original", 1)]["entries"] == 30
    assert main(["memory", "list", "--store", where]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["benchmark", "run", "world", "entries", "confirmed", "may", "parent", "fits"]
    assert table[1].split()[:4] == ["toy", "(its", "own", "items)"] and table[2].split()[:4] == ["toy", "r1", "real", "9"]
    # forget: a dry run removes nothing; then r1's children go, the benchmark's own items stay
    assert main(["memory", "forget", "--store", where, "--run", "r1", "--dry-run"]) == 0
    assert capsys.readouterr().out == "would forget 9 entries of run r1\n"
    assert main(["memory", "forget", "--store", where, "--run", "r1", "--benchmark", BENCH]) == 0
    assert capsys.readouterr().out == "forgot 9 entries of run r1 (toy)\n"
    assert [(r["run_id"], r["origin"]) for r in memory_contents(store)] == [("", "original")]
    # a run the memory does not hold is named, with one line
    assert main(["memory", "forget", "--store", where, "--run", "r1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"benchfill: error: --run r1: no children of that run in the memory of {store.where} (it holds "
                   "no run's children)"]


def test_memory_commands_refuse_a_store_that_is_not_there(tmp_path, capsys):
    from benchfill.cli import main

    for where, said in ((str(tmp_path / "none.db"), "no such file or run directory"),
                        (f"sqlite:///{tmp_path / 'none.db'}", "no such SQLite file"),
                        # a folder that exists but was never a run
                        (str(tmp_path), f"{tmp_path}: not a run directory (it holds neither store.db nor "
                                        "store.url)")):
        assert main(["memory", "list", "--store", where]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()  # not made empty by a look


def test_a_simulated_run_reads_no_child_of_another_simulated_world(store):
    # A store an older benchfill filled (its world drew no item discrimination) or a run with another
    # --sim-discrimination: their confirmed children had filled this run's gaps outright, unmeasured here.
    world = {"backend": "sim", "sim_discrimination": 0.5}
    metas = {"r1": {"backend": "sim"}, "r3": world, "r4": {"backend": "sim", "sim_discrimination": 0.35}}
    for run, options in metas.items():
        other = Store(store.url, run_id=run)
        other.set_meta("options", options)
        mem = SharedMemory(other, BENCH, IDS, Z_NOW, simulated=True)
        mem.record_originals()
        mem.record_child(0, _child(f"{run}-kid", 0.5, confirmed=0.5))
        other.close()
    store.set_meta("options", world)
    mem = SharedMemory(store, BENCH, IDS, Z_NOW, simulated=True)
    names = {f.name for f in mem.nearest(0.5, 10)}
    assert "r3-kid@r3" in names and not names & {"r1-kid@r1", "r4-kid@r4"}
    assert mem.reusable(0.45, 0.55).name == "r3-kid@r3"
    assert mem.left_out == {
        "run r1 (another simulated world)": "1 children made in another simulated world (item discrimination sd 0; "
        "this run's: item discrimination sd 0.5): measured against other probes' answers, so none is a parent, a "
        "reference or reused",
        "run r4 (another simulated world)": "1 children made in another simulated world (item discrimination sd "
        "0.35; this run's: item discrimination sd 0.5): measured against other probes' answers, so none is a "
        "parent, a reference or reused"}


def test_memory_forget_takes_a_run_directory_for_its_own_store(tmp_path, capsys):
    # a run's own store keeps its children under no run id: "forget --store RUN_DIR --run RUN_DIR's name" had
    # found nothing, and listed a run of no name
    from benchfill.cli import main

    run = tmp_path / "demo-benchfill-0123456789"
    run.mkdir()
    own = Store(run / "store.db")
    mem = SharedMemory(own, BENCH, IDS, Z_NOW, simulated=True)
    mem.record_originals()
    mem.record_child(0, _child("kid", 0.5, confirmed=0.5))
    own.close()
    assert main(["memory", "list", "--store", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[:3] == ["toy", run.name, "simulated"]
    assert main(["memory", "list", "--store", str(run), "--json"]) == 0  # named the same way ("" before)
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out) if r["origin"] == "generated"] == [run.name]
    assert main(["memory", "forget", "--store", str(run), "--run", "nope"]) == 2
    assert f"(runs there: {run.name})" in capsys.readouterr().err
    for where in (str(run / "store.db"), f"sqlite:///{run / 'store.db'}"):  # its file, or a URL of it
        assert main(["memory", "forget", "--store", where, "--run", run.name, "--dry-run"]) == 0
        assert capsys.readouterr().out == f"would forget 1 entry of run {run.name}\n"
    assert main(["memory", "forget", "--store", str(run), "--run", run.name]) == 0
    assert capsys.readouterr().out == f"forgot 1 entry of run {run.name}\n"


def test_memory_forget_refuses_a_run_in_progress(store, tmp_path, capsys):
    # A forget while the run worked said "forgot 39 entries", and the run wrote them all back as each of its
    # gaps ended. The run holds its id on a shared store (Store.hold_run), and its folder's lock on its own
    # store; here another process holds them as a running run does.
    import subprocess
    import sys

    from benchfill.cli import main
    from benchfill.run import LOCK_FILE

    _fill(store)
    where = str(store.url) if store.url.startswith("postgresql") else store.engine.url.database
    hold = ("import sys, time; from benchfill.store import Store; s = Store(sys.argv[1], run_id='r1'); "
            "let_go = s.hold_run(); print('held', flush=True); sys.stdin.read()")  # fmt: skip
    own = tmp_path / "demo-benchfill-0123456789"
    own.mkdir()
    Store(own / "store.db").close()
    lock_own = ("import sys; from pathlib import Path; from benchfill import locks; "
                "fd = locks.hold(Path(sys.argv[1]), wait=False); print('held', flush=True); sys.stdin.read()")  # fmt: skip
    for code, arg, args in ((hold, str(store.url), ["--store", where, "--run", "r1"]),
                            (lock_own, str(own / LOCK_FILE), ["--store", str(own), "--run", own.name])):  # fmt: skip
        holder = subprocess.Popen([sys.executable, "-c", code, arg], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)  # fmt: skip
        try:
            assert holder.stdout.readline().strip() == "held"
            assert main(["memory", "forget", *args]) == 2
            assert "that run is in progress (another process holds it)" in capsys.readouterr().err
            # a dry run writes nothing: not refused (tests/test_s40_memory_config_polish.py says what it says)
            main(["memory", "forget", *args, "--dry-run"])
            assert f"--run {args[-1]}: that run is in progress" not in capsys.readouterr().err  # (the refusal's)
        finally:
            holder.communicate("")
    assert main(["memory", "forget", "--store", where, "--run", "r1"]) == 0  # ended: forgotten
    assert capsys.readouterr().out == "forgot 9 entries of run r1\n"
