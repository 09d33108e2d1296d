"""Two runs, one store: the second run's search starts from the first run's children (issue 16).

`benchfill run --benchmark demo --gaps 3` on the simulated world into a store named by URL, then a
second run on the same store with another seed (so another fit: its scale is linked to the first
one's) and five gaps. It retrieves parents the first run made and says so in its report, reuses
the first run's confirmed children for the gaps they fit, and spends fewer model calls than the very
same run on an empty store, none on a gap it reuses.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from cache_lookups import count_cache_lookups

from benchfill.cli import main

# plumbing: probes that answer independently about the curve, so that a short run through a few of them
# chooses a child (the default world's offsets are run by test_report_claims.py and test_readme_demo.py)
BUDGET = ["--rounds", "3", "--parents", "2", "--children", "3", "--sim-probes", "6", "--sim-pair-sd", "0", "--quiet"]


def _run(root, store, *args) -> dict:
    runs = root / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    extra = ["--store", store] if store else []
    assert main(["run", "--benchmark", "demo", "--runs-dir", str(runs), *extra, *BUDGET, *args]) == 0
    (d,) = set(runs.iterdir()) - before
    rep = json.loads((d / "report.json").read_text())
    rep["_dir"] = d
    return rep


@pytest.mark.slow
def test_a_second_run_on_the_same_store_builds_on_the_first(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first = _run(tmp_path / "a", url, "--gaps", "3", "--seed", "0")
    second = _run(tmp_path / "a", url, "--gaps", "5", "--seed", "1")
    alone = _run(tmp_path / "b", None, "--gaps", "5", "--seed", "1")  # the same run on an empty store
    m = second["memory"]
    assert first["memory"]["earlier_runs"] == [] and first["memory"]["gaps_reused"] == 0
    assert m["earlier_runs"] == [first["run_id"]]
    assert list(m["linked"]) and not m["left_out"]  # another seed, another fit: mapped through the originals
    # Parents produced by the first run, and the report says so.
    assert m["parents_from_earlier_runs"] >= 1 and m["children_of_earlier_parents"] >= 1
    md = (second["_dir"] / "report.md").read_text()
    assert "## Shared memory" in md and f"({first['run_id']})" in md
    with sqlite3.connect(tmp_path / "shared.db") as db:  # kept in the store, where a release's card reads it
        (kept,) = db.execute("select value_json from runmeta where run_id = ? and key = 'memory'",
                             (second["run_id"],)).fetchone()
    assert json.loads(kept)["earlier_runs"] == [first["run_id"]]
    with sqlite3.connect(tmp_path / "shared.db") as db:
        parents = {p for (p,) in db.execute("select parent_id from candidate where run_id = ?", (second["run_id"],))}
        earlier = {f"{i}@{first['run_id']}": ok for i, ok in db.execute(
            "select item_id, parent_ok from memoryrecord where run_id = ? and origin = 'generated'",
            (first["run_id"],))}
        worlds = {w for (w,) in db.execute("select distinct simulated from memoryrecord where origin = 'generated'")}
    used = parents & set(earlier)
    assert used and all(earlier[p] for p in used)  # only eligible entries of the first run were parents
    assert worlds == {1}  # both runs' children were made in the simulated world, and say so
    # Reuse: a gap the first run's confirmed child fits is filled by it, for nothing.
    reused = [g for g in second["gaps"] if (g["memory"] or {}).get("reused_from")]
    assert m["gaps_reused"] == len(reused) >= 1
    # The seeded entries are counted once however many gaps' memories held them, and a reused gap, never
    # searched, reads none: at most the first run's children, and the searched gaps' distinct entries.
    searched = [g["memory"] for g in second["gaps"] if not (g["memory"] or {}).get("reused_from")]
    distinct = {e for s in searched for e in s["earlier_entries"]}
    assert m["entries_from_earlier_runs"] == len(distinct) <= len(earlier)
    assert all(g["memory"]["entries_from_earlier_runs"] == 0 for g in reused)
    assert f"{len(distinct)} entries from earlier runs ({first['run_id']}) seeded the searched gaps' memories" in md
    queue = {q["item_id"]: q for q in map(json.loads, (second["_dir"] / "review_queue.jsonl").read_text().splitlines())}
    for g in reused:
        assert g["chosen_id"].endswith(f"@{first['run_id']}") and "reused" in g["flags"]
        assert g["status"] == "filled" and g["spend"]["model_calls"] == 0 and g["spend"]["rollouts"] == 0
        assert g["left"] < g["confirmed_z"] < g["right"]
        assert queue[g["chosen_id"]]["reused_from"]["run_id"] == first["run_id"]
        assert f"**reused** `{queue[g['chosen_id']]['reused_from']['item_id']}`" in md
    # Measurably cheaper than the same run on an empty store.
    s, e = second["spend"], alone["spend"]
    print(f"second run on the shared store: {s['model_calls']} model calls, {s['rollouts']} rollouts, "
          f"{second['gaps_filled']} of 5 gaps filled; on an empty store: {e['model_calls']} model calls, "
          f"{e['rollouts']} rollouts, {alone['gaps_filled']} filled")
    assert alone["memory"]["earlier_runs"] == [] and alone["memory"]["gaps_reused"] == 0
    assert s["model_calls"] < e["model_calls"]
    # What reuse saves is each reused gap's whole search: nothing spent on it here, where the same run on an
    # empty store spent calls and rollouts on that gap. The gaps searched start from other parents and may
    # spend more or fewer rollouts (at this seed more: 2,448 in all against 2,072, since ties between
    # children answered alike go to the id), so the total is printed above, not asserted.
    alone_gaps = {(g["left"], g["right"]): g for g in alone["gaps"]}
    for g in reused:
        twin = alone_gaps[(g["left"], g["right"])]
        assert twin["spend"]["model_calls"] > 0 and twin["spend"]["rollouts"] > 0


def test_a_finished_run_run_again_is_restored_whole_with_the_same_report(tmp_path, monkeypatch):
    """Every gap comes back from the store as it finished: no rewrite or judge call is looked up again,
    and the report (the pre-screen's summary included, which counts every child it screened) is the same."""
    args = ["run", "--benchmark", "demo", "--runs-dir", str(tmp_path), "--gaps", "2", "--rounds", "2",
            "--parents", "2", "--children", "2", "--sim-probes", "6", "--quiet", "--prescreen", "on"]
    assert main(args) == 0
    (d,) = list(tmp_path.iterdir())
    before = json.loads((d / "report.json").read_text())
    asked = count_cache_lookups(monkeypatch)
    assert main(args) == 0
    after = json.loads((d / "report.json").read_text())
    for rep in (before, after):
        rep["backend"].pop("traffic")
    assert before["backend"]["prescreen"]["screened"] > 0
    assert after == before
    with sqlite3.connect(d / "store.db") as db:
        kinds = dict(db.execute("select key, kind from modelcall"))
    assert not [k for k in asked if kinds.get(k) in ("rewriter", "judge")]


@pytest.mark.slow
def test_the_simulated_world_knows_the_children_of_runs_in_other_folders_on_the_store(tmp_path):
    """A run in another --runs-dir on the same store: its world reads the first run's children (through
    the state file the first run recorded in the store), so reused children have a true z and the true
    figures cover every gap."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first = _run(tmp_path / "a", url, "--gaps", "3", "--seed", "0")
    second = _run(tmp_path / "b", url, "--gaps", "5", "--seed", "1")
    reused = [g for g in second["gaps"] if (g["memory"] or {}).get("reused_from")]
    assert reused and all(g["true_z"] is not None for g in reused)
    assert second["true_z_unknown (simulated)"] == 0 and second["top_k_sum_after_true (simulated)"] is not None
    chosen = [g for g in second["gaps"] if g.get("chosen_id")]
    assert all(g.get("true_z") is not None for g in chosen)
    assert first["run_id"] in {g["memory"]["reused_from"]["run_id"] for g in reused}



@pytest.mark.slow
def test_a_reused_child_counts_the_decisions_made_on_it_where_it_was_made(tmp_path):
    """A run that reuses another's child queues it as "X@A": a reviewer of the first run turned it down
    there, so the second run, whose reviewer accepted it, does not release it, and the review page says in
    which run each decision was made. (The first run's decision is written as its board writes one: its
    reviewers see only the first run's picks, and which child the memory reuses is the memory's choice.)"""
    from benchfill.release import release
    from benchfill.review import ReviewBoard
    from benchfill.review.server import _item_body
    from benchfill.schema import ReviewDecision
    from benchfill.store import Store

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first = _run(tmp_path / "a", url, "--gaps", "3", "--seed", "0")
    second = _run(tmp_path / "a", url, "--gaps", "5", "--seed", "0")
    queue = {q["item_id"]: q for q in map(json.loads, (second["_dir"] / "review_queue.jsonl").read_text().splitlines())}
    reused = [i for i, q in queue.items() if q.get("reused_from")]
    assert reused, "the second run reused nothing of the first"
    got, made = reused[0], queue[reused[0]]["reused_from"]["item_id"]
    with ReviewBoard(second["_dir"]) as b:
        b.decide(got, "ann", "accept")
        assert b.outcomes()[got].status == "accepted"
    store = Store(url, run_id=first["run_id"])
    try:
        with store.session() as s:
            s.add(ReviewDecision(run_id=first["run_id"], item_id=made, reviewer="bob", decision="reject",
                                 reason="the answer is wrong", source="page"))
    finally:
        store.close()
    with ReviewBoard(second["_dir"]) as b:
        o = b.outcomes()[got]
        assert o.status == "rejected" and o.rejected_by == ["bob"] and o.accepted_by == ["ann"]
        assert [(d.run_id, d.item_id) for d in o.decisions] == [(second["run_id"], got), (first["run_id"], got)]
        page = _item_body(b.entry(got), o, run=b.store.run_id)  # the page says where each decision was made
        assert "bob: reject" in page and f"in run {first['run_id']}" in page and f"in run {second['run_id']}" not in page
    rel = release(second["_dir"], "1.0.0", out=tmp_path / "releases")
    assert got not in rel.added and made not in rel.added
    # And the other way round: a decision another run made on one of the first run's picks, under the name
    # it reuses it by, counts in the first run.
    with ReviewBoard(first["_dir"]) as b:  # (one bob has not turned down above)
        pick = next(e.item_id for e in b.entries if e.item_id != made)
    store = Store(url, run_id=second["run_id"])
    try:
        with store.session() as s:
            s.add(ReviewDecision(run_id=second["run_id"], item_id=f"{pick}@{first['run_id']}", reviewer="cy",
                                 decision="reject", reason="ambiguous", source="page"))
    finally:
        store.close()
    with ReviewBoard(first["_dir"]) as b:
        assert b.outcomes()[pick].rejected_by == ["cy"] and b.outcomes()[pick].status == "rejected"
