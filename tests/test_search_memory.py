"""Memory retrieval (Algorithm 2 lines 4-8), the oracle and near-duplicates, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.search import Memory, MemoryEntry, NearDuplicateIndex, derive_seed, oracle_fill


def _memory(target: float) -> Memory:
    zs = {"a": 0.10, "b": 0.40, "c": 0.48, "d": 0.50, "e": 0.60, "f": 0.62, "g": 0.90}
    return Memory(target, [MemoryEntry(k, v) for k, v in zs.items()])


def test_near_gap_takes_the_items_closest_to_the_target():
    m = Memory.near_gap(["a", "b", "c", "d"], [0.1, 0.5, 0.58, 0.9], target_z=0.55, size=2)
    assert [e.item_id for e in m.entries] == ["c", "b"]
    assert all(e.ancestor_id == e.item_id for e in m.entries)


def test_parents_are_the_r_closest_to_the_target():
    # distances to 0.53: d 0.03, c 0.05, e 0.07, f 0.09
    assert [e.item_id for e in _memory(0.53).parents(3)] == ["d", "c", "e"]


def test_references_split_half_below_half_above():
    # The paper's example: target 0.55 with items at 0.48, 0.50, 0.60, 0.62.
    refs = _memory(0.55).references(4)
    assert [e.item_id for e in refs] == ["c", "d", "e", "f"]  # 0.48, 0.50 below; 0.60, 0.62 above


def test_references_fill_from_the_other_side_when_one_runs_short():
    refs = _memory(0.95).references(4)  # nothing above 0.95
    assert [e.item_id for e in refs] == ["d", "e", "f", "g"]


def test_memory_round_trips_through_json_and_ignores_duplicates():
    m = _memory(0.3)
    m.add(MemoryEntry("a", 0.99))
    assert len(m.entries) == 7
    again = Memory.from_json(0.3, m.to_json())
    assert again.entries == m.entries


def test_oracle_inserts_at_the_midpoint_of_the_current_largest_gap():
    # gaps: 0-0.5 (0.5), 0.5-0.6, 0.6-1.0 (0.4)
    assert oracle_fill(np.array([0.0, 0.5, 0.6, 1.0]), 3) == pytest.approx([0.25, 0.8, 0.125])


def test_near_duplicate_flags_a_light_rewrite_but_not_a_new_problem():
    idx = NearDuplicateIndex({"x": "Find the number of positive integers n below 1000 such that n is prime."})
    hit = idx.check("Find the number of positive integers n below 2000 such that n is prime.")
    assert hit is not None and hit["item_id"] == "x" and hit["similarity"] >= 90
    assert idx.check("A circle of radius 3 is inscribed in a square; compute the square's area.") is None


def test_derived_seeds_depend_on_every_part_of_the_path():
    s = {derive_seed(0, "g", 1, r) for r in range(50)}
    assert len(s) == 50
    assert derive_seed(1, "g") != derive_seed(0, "g")
    assert derive_seed(3, "x", 2) == derive_seed(3, "x", 2)
