"""A search's state as JSON, so that a killed run restores its completed rounds instead of replaying them.

``SearchState`` (benchfill/search/loop.py) holds the children made so far with everything the
search learned of them (verdict, annotation, confirmation, flags, ask), the memory, the spend and
the learned response of the rewriter. Floats go through JSON exactly (``repr``), so a restored
search makes the very decisions the uninterrupted one made. The same child record lets a later
run propose an earlier run's child for a gap of its own (benchfill/engine/memory_store.py).
"""

from __future__ import annotations

from typing import Any

from benchfill.search.annotate import Annotation
from benchfill.search.loop import Child, GapResult, SearchState
from benchfill.search.memory import Memory
from benchfill.search.services import Spend, Verdict
from benchfill.search.steering import Steering

FORMAT = 1


def annotation_to_dict(a: Annotation | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {"difficulty": a.difficulty, "se": a.se, "z": a.z, "z_se": a.z_se, "rollouts": a.rollouts,
            "results": a.results, "flags": a.flags, "stop": a.stop, "order": a.order, "spot": a.spot,
            "ability_z_se": a.ability_z_se, "misfit_z_se": a.misfit_z_se, "chance": a.chance}


def annotation_from_dict(d: dict[str, Any] | None) -> Annotation | None:
    if d is None:
        return None
    return Annotation(float(d["difficulty"]), float(d["se"]), float(d["z"]), float(d["z_se"]), int(d["rollouts"]),
                      list(d.get("results", [])), list(d.get("flags", [])), str(d.get("stop", "")), d.get("order"),
                      list(d.get("spot", [])), float(d.get("ability_z_se", 0.0)),  # 0: a snapshot from before it
                      float(d.get("misfit_z_se", 0.0)),
                      None if d.get("chance") is None else float(d["chance"]))  # None: a snapshot from before it


def child_to_dict(c: Child) -> dict[str, Any]:
    v = c.verdict
    return {
        "item_id": c.item_id, "parent_id": c.parent_id, "ancestor_id": c.ancestor_id, "round": c.round,
        "item": c.item, "verdict": None if v is None else {"valid": v.valid, "reason": v.reason, "model": v.model},
        "annotation": annotation_to_dict(c.annotation), "flags": list(c.flags),
        "true_difficulty": c.true_difficulty, "true_z": c.true_z, "near_duplicate": c.near_duplicate,
        "confirmation": annotation_to_dict(c.confirmation), "ask": c.ask, "parent_z": c.parent_z,
    }


def child_from_dict(d: dict[str, Any]) -> Child:
    v = d.get("verdict")
    return Child(
        str(d["item_id"]), str(d["parent_id"]), str(d["ancestor_id"]), int(d["round"]), d.get("item"),
        None if v is None else Verdict(bool(v["valid"]), str(v.get("reason", "")), str(v.get("model", ""))),
        annotation_from_dict(d.get("annotation")), list(d.get("flags", [])), d.get("true_difficulty"),
        d.get("true_z"), d.get("near_duplicate"), annotation_from_dict(d.get("confirmation")), d.get("ask"),
        d.get("parent_z"),
    )


def state_to_dict(state: SearchState) -> dict[str, Any]:
    r = state.response
    return {
        "format": FORMAT, "round": state.round, "target_z": state.memory.target_z,
        "children": [child_to_dict(c) for c in state.children],
        "memory": state.memory.to_json(),
        "spend": state.spend.to_dict(),
        "response": {"points": [list(p) for p in r.points], "parents": list(r.parents),
                     "asks": [list(a) for a in r.asks]},
    }


def state_from_dict(d: dict[str, Any]) -> SearchState:
    if d.get("format") != FORMAT:
        raise ValueError(f"search state format {d.get('format')!r} (this benchfill reads {FORMAT})")
    sp = {k: v for k, v in d["spend"].items() if k in Spend.__dataclass_fields__}
    r = d["response"]
    response = Steering(points=[tuple(p) for p in r["points"]], parents=list(r["parents"]),
                        asks=[tuple(a) for a in r["asks"]])
    return SearchState(int(d["round"]), [child_from_dict(c) for c in d["children"]],
                       Memory.from_json(float(d["target_z"]), d["memory"]), Spend(**sp), response)


def result_to_dict(r: GapResult) -> dict[str, Any]:
    """A finished gap (any strategy), for a resumed run to take as it is. Keeps the ``memory``,
    ``spend`` and ``steering`` keys that readers of ``GapState.state_json`` already use."""
    return {
        "format": FORMAT, "done": True, "gap_index": r.gap_index, "left": r.left, "right": r.right,
        "target_z": r.target_z, "strategy": r.strategy, "children": [child_to_dict(c) for c in r.children],
        "chosen_index": None if r.chosen is None else next(i for i, c in enumerate(r.children) if c is r.chosen),
        "rounds_used": r.rounds_used, "spend": r.spend.to_dict(), "memory": r.memory, "stop": r.stop,
        "steering": r.steering, "shared": r.shared,
    }


def result_from_dict(d: dict[str, Any]) -> GapResult:
    if d.get("format") != FORMAT or not d.get("done"):
        raise ValueError("not a finished gap's record")
    children = [child_from_dict(c) for c in d["children"]]
    sp = {k: v for k, v in d["spend"].items() if k in Spend.__dataclass_fields__}
    chosen = None if d["chosen_index"] is None else children[int(d["chosen_index"])]
    return GapResult(int(d["gap_index"]), float(d["left"]), float(d["right"]), float(d["target_z"]), str(d["strategy"]),
                     children, chosen, int(d["rounds_used"]), Spend(**sp), d["memory"], str(d["stop"]), d["steering"],
                     dict(d.get("shared") or {}))
