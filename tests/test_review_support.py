"""A realistic finished run for the review and release tests, built by hand per docs/contracts.md.

Original items are the real AIME 2024 problems; their IRT difficulties are a seeded
draw kept in ``fit.json``; four generated children (one whose text holds ``<script>``)
sit in the store as Item + Candidate rows and in ``review_queue.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchfill.irt.fit import IrtFit
from benchfill.review import load_queue
from benchfill.schema import Candidate, Item, ProbeResult
from benchfill.store import Store

CHILD_IDS = ("gen-g0-r1-c0", "gen-g1-r2-c1", "gen-g2-r1-c3", "gen-g0-r3-c2")
SCRIPT_ID = "gen-g2-r1-c3"


def make_run(root: Path, shared_data: Path, run_id: str = "run-aime24-test") -> Path:
    run = root / run_id
    run.mkdir(parents=True)
    items = [json.loads(x) for x in (shared_data / "aime24" / "items.jsonl").read_text().splitlines() if x.strip()]
    rng = np.random.default_rng(7)
    b = np.sort(rng.normal(0.0, 1.5, len(items)))[rng.permutation(len(items))]
    fit = IrtFit(model="1pl", engine="map", models=("m1", "m2", "m3"), item_ids=tuple(i["id"] for i in items),
                 ability=np.array([-0.5, 0.4, 1.3]), ability_se=np.full(3, 0.3), difficulty=b,
                 difficulty_se=np.full(len(items), 0.45), chance=np.zeros(len(items)), seed=7)  # fmt: skip
    fit.save(run / "fit.json")
    z = fit.z
    store = Store(run / "store.db")
    store.set_meta("benchmark", {"name": "aime24", "text_field": "problem", "answer_field": "answer"})
    store.set_meta("seed", 7)
    store.set_meta("backend", "sim")
    store.set_meta("fit", fit.to_dict())
    order = np.argsort(z)
    spacing = np.diff(z[order])
    gaps = np.argsort(spacing)[::-1][:3]  # the three largest gaps between consecutive items
    records = []
    with store.session() as s:
        for it in items:
            s.add(Item(id=it["id"], origin="original", data_json=json.dumps(it)))
        for n, child_id in enumerate(CHILD_IDS):
            g = int(gaps[n % 3])
            left, right = float(z[order[g]]), float(z[order[g + 1]])
            parent = items[int(order[g])]
            child = dict(parent, id=child_id)
            child["problem"] = parent["problem"].replace("Find", "Determine", 1) + f" (variant {n})"
            child["answer"] = str(int(parent["answer"]) + n + 1)
            if child_id == SCRIPT_ID:
                child["problem"] = "<script>alert('x')</script> " + child["problem"]
            target = (left + right) / 2
            ann_z = target + 0.03 * (n - 1.5)
            conf_z = ann_z + 0.01
            to_b = lambda zz: float(fit.denormalize(zz))  # noqa: E731
            s.add(Item(id=child_id, origin="generated", parent_id=parent["id"], data_json=json.dumps(child)))
            s.add(Candidate(id=child_id, gap_index=n % 3, round=1 + n, parent_id=parent["id"], target_z=target,
                            valid=True, judge_reason="answer checks out", difficulty=to_b(ann_z), difficulty_se=0.4,
                            z=ann_z, rollouts=24, confirmed_difficulty=to_b(conf_z), confirmed_se=0.3,
                            confirmed_z=conf_z, flags_json=json.dumps(["near_duplicate"] if n == 3 else []),
                            status="selected"))  # fmt: skip
            probes = [{"probe": f"p{j}", "ability": float(a), "correct": 3 + j, "trials": 8}
                      for j, a in enumerate(fit.ability)]  # fmt: skip
            for p in probes:
                s.add(ProbeResult(item_id=child_id, probe=p["probe"], correct=p["correct"], trials=8))
            records.append({
                "item_id": child_id, "run_id": run_id, "benchmark": "aime24", "gap_index": n % 3,
                "gap": {"left": left, "right": right}, "ancestor_id": parent["id"], "ancestor": parent,
                "child": child, "text_field": "problem", "answer_field": "answer", "target_z": target,
                "annotated": {"difficulty": to_b(ann_z), "se": 0.4, "z": ann_z},
                "confirmed": {"difficulty": to_b(conf_z), "se": 0.3, "z": conf_z},
                "ecdf_position": float(np.mean(z <= conf_z)), "probe_results": probes,
                "judge": {"valid": True, "reason": "answer checks out", "model": "sim/judge"},
                "rewriter_model": "sim/rewriter", "judge_model": "sim/judge", "probe_panel": ["p0", "p1", "p2"],
                "flags": ["near_duplicate"] if n == 3 else [], "simulated": True,
                "true_difficulty": to_b(conf_z) + 0.1, "created_at": f"2025-01-0{n + 1}T10:00:00+00:00",
            })  # fmt: skip
    store.close()
    (run / "review_queue.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def record_fit(run: Path, fit: IrtFit | None) -> None:
    """Give the run another fit, as a run records one: in its store (what a release reads) and as fit.json
    beside it; None: the run has none at all."""
    store = Store(run / "store.db")
    if fit is None:
        from benchfill.schema import RunMeta

        with store.session() as s:
            s.delete(s.get(RunMeta, (store.run_id, "fit")))
        (run / "fit.json").unlink()
    else:
        store.set_meta("fit", fit.to_dict())
        fit.save(run / "fit.json")
    store.close()


def test_fixture_run_follows_the_contract(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    queue = load_queue(run)
    assert [e.item_id for e in queue] == list(CHILD_IDS)
    store = Store(run / "store.db")
    try:
        originals = store.all(Item, Item.origin == "original")
        assert len(originals) == 30  # AIME 2024 I and II
        for e in queue:
            assert e.child["problem"] != e.ancestor["problem"]
            assert e.record["gap"]["left"] < e.record["target_z"] < e.record["gap"]["right"]
    finally:
        store.close()
