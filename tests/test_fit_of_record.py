"""A resumed run keeps the fit it began with: its scale never moves under a search (a refit of a large
matrix moves in its last digits with the number of BLAS threads, and a sweep's units run elsewhere)."""

from __future__ import annotations

import json
import threading

import benchfill.irt
from benchfill.cli import main
from benchfill.engine import backend
from benchfill.store import open_run_store

ARGS = ["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1", "--parents", "2",
        "--children", "2", "--quiet", "--run-id", "r"]  # fmt: skip


def test_a_rerun_takes_the_recorded_fit_and_refits_only_when_the_matrix_changed(tmp_path, monkeypatch):
    args = [*ARGS, "--runs-dir", str(tmp_path)]
    assert main(args) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    real_fit, fits = benchfill.irt.fit, []

    def counting_fit(*a, **kw):
        # the run's fit, which runs off the event loop (netguard.off_loop); the simulated world fits its own
        if threading.current_thread().name.startswith("benchfill-"):
            fits.append(1)
        return real_fit(*a, **kw)

    monkeypatch.setattr(benchfill.irt, "fit", counting_fit)
    monkeypatch.setattr(backend, "_MEMO", {})
    assert main(args) == 0
    assert fits == []  # the recorded fit, not a new one
    assert json.loads((tmp_path / "r" / "report.json").read_text())["top_k_reduction"] == report["top_k_reduction"]
    store = open_run_store(tmp_path / "r")
    store.set_meta("fit_matrix", "another matrix")  # as if the responses had changed since
    store.close()
    backend._MEMO.clear()  # as a new process: this one made the fit of the matrix the store now disowns
    assert main(args) == 0
    assert fits == [1]


def test_a_rerun_places_the_panel_on_the_anchor_items_it_recorded(tmp_path, monkeypatch):
    from benchfill.engine import backend
    from benchfill.run import RunOptions, run

    opts = RunOptions(benchmark="demo", backend="sim", gaps=1, rounds=1, parents=2, children=2, progress=False,
                      runs_dir=str(tmp_path), run_id="a", extra={"anchor_items": 12})
    run(opts)
    store = open_run_store(tmp_path / "a")
    anchors = store.get_meta("anchor_items")
    store.close()
    assert len(anchors) == 12

    def no_new_choice(*a, **kw):
        raise AssertionError("anchor items chosen again")

    monkeypatch.setattr(backend, "anchor_items", no_new_choice)
    run(opts)  # resumes on the recorded anchors
