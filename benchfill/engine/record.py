"""Writing a search's progress to the store as it happens (only the orchestrator calls these).

Every child becomes an ``Item(origin="generated")`` and a ``Candidate`` the moment
it is annotated; the search's whole state (search/snapshot.py) is saved with
``GapState`` after each round, and a finished gap's result once it is done.
A resumed run restores both (``restored_gap``) instead of replaying the
completed rounds; rows are merged by id, so the interrupted round it does
replay rewrites the same rows.
"""

from __future__ import annotations

import json

from benchfill.schema import Candidate, GapState, Item
from benchfill.search.loop import Child, GapResult, GapSearch, SearchState
from benchfill.search.snapshot import result_from_dict, state_from_dict, state_to_dict


def record_child(store, gap_index: int, child: Child, target_z: float) -> None:
    a = child.annotation
    with store.session() as s:
        if child.item is not None:
            s.merge(Item(run_id=store.run_id, id=child.item_id, origin="generated", data_json=json.dumps(child.item),
                         parent_id=child.parent_id))
        s.merge(Candidate(
            run_id=store.run_id, id=child.item_id, gap_index=gap_index, round=child.round, parent_id=child.parent_id, target_z=target_z,
            valid=None if child.verdict is None else child.verdict.valid,
            judge_reason="" if child.verdict is None else child.verdict.reason,
            difficulty=a.difficulty if a else None, difficulty_se=a.se if a else None, z=a.z if a else None,
            rollouts=a.rollouts if a else 0, true_difficulty=child.true_difficulty,
            flags_json=json.dumps(child.flags),
        ))


def record_round(store, gap_index: int, gap: GapSearch, state: SearchState) -> None:
    with store.session() as s:
        s.merge(GapState(run_id=store.run_id, gap_index=gap_index, left=gap.left, right=gap.right,
                         target_z=gap.target_z, status="running", rounds_used=state.round,
                         state_json=json.dumps(state_to_dict(state))))


def restored_gap(store, gap_index: int, left: float, right: float) -> tuple[GapResult | None, SearchState | None]:
    """What the store holds of this run's gap: its finished result, or the state after its last
    completed round (neither: search it from the start). A gap with other bounds (another fit) or
    a state this benchfill cannot read is searched again."""
    with store.session() as s:
        row = store.get(s, GapState, gap_index)
    if row is None or (row.left, row.right) != (left, right):
        return None, None
    d = json.loads(row.state_json or "{}")
    try:
        if row.status == "done" and d.get("done"):
            return result_from_dict(d), None
        if row.status == "running" and "round" in d:
            return None, state_from_dict(d)
    except (ValueError, KeyError, TypeError):
        pass
    return None, None
