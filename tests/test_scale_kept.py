"""A run resumed onto another scale than it recorded: refused where review decisions rest on the old one.

After an upgrade, a run resumed by its id was fitted anew (the simulated world's answers had changed), every
gap was searched again, and the new children took the old ones' ids: a reviewer's reject and edit sat on
items they never saw, and the next release shipped them so."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from benchfill.errors import ConfigError
from benchfill.review import ReviewBoard
from benchfill.run import RunOptions, run
from benchfill.store import Store

FAST = dict(gaps=1, rounds=1, parents=2, children=2, references=8, sim_probes=6, progress=False, sim_rewriter="kind")


def _move_the_recorded_scale(run_dir) -> dict:
    """As an earlier benchfill's record reads to this one: another fit, of a matrix this one does not make."""
    store = Store(run_dir / "store.db")
    fit = store.get_meta("fit")
    fit["difficulty"] = list(np.asarray(fit["difficulty"]) + np.linspace(0, 0.3, len(fit["difficulty"])))
    store.set_meta("fit", fit)
    store.set_meta("fit_matrix", "made by an earlier benchfill")
    store.close()
    return fit


def _recorded_fit(run_dir) -> dict:
    store = Store(run_dir / "store.db")
    try:
        return store.get_meta("fit")
    finally:
        store.close()


def test_a_run_with_review_decisions_is_not_searched_again_on_another_scale(tmp_path, caplog):
    # seed 1: its one gap gets an item to decide on (at seed 0, in the world whose probes keep their curve, the
    # gap is at the easy end and its children likely beyond it are set aside)
    opts = RunOptions(**FAST, seed=1, runs_dir=str(tmp_path / "runs"))
    run_dir = run(opts)
    # nothing rests on the scale yet: the run goes on, fitted anew, and says so
    _move_the_recorded_scale(run_dir)
    with caplog.at_level(logging.WARNING, logger="benchfill"):
        assert run(opts) == run_dir
    assert "fitted onto another scale than the one the run recorded" in caplog.text
    with ReviewBoard(run_dir, writable=True) as board:
        item = next(iter(board.outcomes()))
        board.decide(item, "alice", "reject", "the key is wrong")
    moved = _move_the_recorded_scale(run_dir)
    with pytest.raises(ConfigError, match=r"^run .*: its 1 review decision and 0 releases rest on the scale it "
                                          r"recorded, .* start a new run under another run id$"):
        run(opts)
    assert _recorded_fit(run_dir) == moved  # refused before the new fit took the old one's place
    with ReviewBoard(run_dir) as board:
        assert board.outcomes()[item].status == "rejected"  # the decision stays on the item it was made on
