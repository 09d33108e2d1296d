"""Writing a search's progress to the store as it happens (only the orchestrator calls these).

Every child becomes an ``Item(origin="generated")`` and a ``Candidate`` the moment
it is annotated; the memory is saved with ``GapState`` after each round. Rows
are merged by id, so a resumed run that replays a round rewrites the same rows.
"""

from __future__ import annotations

import json

from benchfill.schema import Candidate, GapState, Item
from benchfill.search.loop import Child, GapSearch
from benchfill.search.memory import Memory
from benchfill.search.services import Spend


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


def record_round(store, gap_index: int, gap: GapSearch, rnd: int, memory: Memory, spend: Spend) -> None:
    with store.session() as s:
        s.merge(GapState(run_id=store.run_id, gap_index=gap_index, left=gap.left, right=gap.right, target_z=gap.target_z,
                         status="running", rounds_used=rnd,
                         state_json=json.dumps({"memory": memory.to_json(), "spend": spend.to_dict()})))
