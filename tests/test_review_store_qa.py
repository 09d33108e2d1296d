"""What a QA pass found: a read-only store, a sheet without its export time, outputs half written when one
path was in the way. Real runs (``benchfill run --backend sim``) and real files in tmp_path."""

from __future__ import annotations

import csv

import httpx
import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main
from benchfill.errors import ConfigError, DataError
from benchfill.review import ReviewBoard, export_queue, import_decisions
from benchfill.review.server import ReviewServer

SMALL = ["--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1", "--parents", "2",
         "--children", "2", "--quiet"]  # fmt: skip


def _run(tmp_path, run_id, *extra):
    return ["run", *SMALL, "--runs-dir", str(tmp_path / "runs"), "--run-id", run_id, *extra]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _write_sheet(path, rows, fields=None):
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields or list(rows[0]), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def test_a_read_only_store_is_refused_in_one_line_and_the_page_says_so(tmp_path, capsys):
    db = tmp_path / "shared.db"
    rw = f"sqlite:///{db}"
    assert main(_run(tmp_path, "ro", "--store", rw)) == 0
    run = tmp_path / "runs" / "ro"
    assert main(["review", "export", str(run)]) == 0
    # The same file, opened read-only (as for an immutable file, a read-only mount; root may write any
    # file whose permission bits say otherwise, so the test asks SQLite itself).
    ro = f"sqlite:///file:{db}?mode=ro&uri=true"
    (run / "store.url").write_text(f"{ro}\nro\n")
    report = (run / "report.md").stat().st_mtime_ns
    capsys.readouterr()

    # A rerun of the finished run writes to its store: refused at once, before any work.
    assert main(_run(tmp_path, "ro", "--store", ro)) == 2
    line = _one_line_error(capsys)
    assert "shared.db" in line and "read-only" in line
    assert (run / "report.md").stat().st_mtime_ns == report

    # Reading still works (export writes files, not the store); recording decisions does not.
    assert main(["review", "export", str(run)]) == 0
    sheet = run / "review" / "review_queue.csv"
    rows = list(csv.DictReader(sheet.open(encoding="utf-8-sig")))
    rows[0].update(reviewer="ann", decision="accept")
    _write_sheet(sheet, rows)
    capsys.readouterr()
    assert main(["review", "import", str(sheet), "--run", str(run)]) == 2
    line = _one_line_error(capsys)
    assert "shared.db" in line and "read-only" in line

    with ReviewServer(run) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        assert httpx.get(srv.url).status_code == 200  # the page shows the queue
        r = httpx.post(base + "/api/decision", headers={"X-Benchfill-Token": srv.token},
                       json={"item_id": rows[0]["item_id"], "reviewer": "ann", "decision": "accept"})
        assert r.status_code == 503
        assert "read-only" in r.json()["error"] and "shared.db" in r.json()["error"]
        assert srv.board.decisions() == []


def test_a_sheet_without_its_export_time_cannot_replace_a_recorded_decision(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _, old_path = export_queue(run, tmp_path / "old")
    _, new_path = export_queue(run, tmp_path / "new")
    new = list(csv.DictReader(new_path.open(encoding="utf-8-sig")))
    new[0].update(reviewer="bob", decision="reject", reason="two answers fit")
    _write_sheet(new_path, new)
    assert import_decisions(run, new_path) == 1

    old = list(csv.DictReader(old_path.open(encoding="utf-8-sig")))
    old[0].update(reviewer="bob", decision="accept")
    cut = tmp_path / "cut.csv"  # the export time's column deleted
    _write_sheet(cut, old, [c for c in old[0] if c != "exported_at"])
    with pytest.raises(DataError, match=r"^\S*cut\.csv line \d+: bob decided 'reject' on .* no 'exported_at' column"
                                        r".*freshly exported sheet"):
        import_decisions(run, cut)
    blank = tmp_path / "blank.csv"  # the column kept, its cells cleared
    _write_sheet(blank, [{**r, "exported_at": ""} for r in old])
    with pytest.raises(DataError, match=r"^\S*blank\.csv line \d+ \(data row 1\): field 'exported_at' is empty"):
        import_decisions(run, blank)
    with ReviewBoard(run) as board:
        assert [(d.reviewer, d.decision) for d in board.decisions()] == [("bob", "reject")]
        assert board.outcomes()[CHILD_IDS[0]].status == "rejected"

    # A sheet made by hand still adds decisions nobody has made yet.
    hand = tmp_path / "hand.csv"
    _write_sheet(hand, [{"item_id": CHILD_IDS[1], "reviewer": "cy", "decision": "accept"}])
    assert import_decisions(run, hand) == 1
    # ... and export does not hold back for the rows import refuses: they can never be recorded.
    sheet = run / "review" / "review_queue.csv"
    sheet.parent.mkdir()
    cut.replace(sheet)
    export_queue(run)
    assert "exported_at" in sheet.read_text(encoding="utf-8").splitlines()[0]


def test_export_checks_every_target_before_writing_any(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    jsonl, csv_path = export_queue(run)
    before = jsonl.stat().st_mtime_ns
    csv_path.unlink()
    csv_path.mkdir()
    with pytest.raises(ConfigError, match=r"review_queue\.csv: a folder, where the export writes a file"):
        export_queue(run)
    assert jsonl.stat().st_mtime_ns == before
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ConfigError, match=r"taken: not a folder"):
        export_queue(run, tmp_path / "taken" / "review")


def test_a_run_checks_its_outputs_before_writing_any(tmp_path, capsys):
    assert main(_run(tmp_path, "out")) == 0
    run = tmp_path / "runs" / "out"
    written = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    for png in (run / "plots").iterdir():
        png.unlink()
    (run / "plots").rmdir()
    (run / "plots").write_text("x\n")
    capsys.readouterr()
    assert main(_run(tmp_path, "out")) == 2
    line = _one_line_error(capsys)
    assert "plots: not a folder" in line
    for name in ("report.md", "report.json", "review_queue.jsonl", "fit.json", "store.db"):
        assert (run / name).stat().st_mtime_ns == written[run / name], name

    (run / "plots").unlink()
    (run / "report.md").unlink()
    (run / "report.md").mkdir()  # a folder where a file goes
    assert main(_run(tmp_path, "out")) == 2
    assert "report.md: a folder, where the run writes a file" in _one_line_error(capsys)
    assert (run / "report.json").stat().st_mtime_ns == written[run / "report.json"]


def test_export_of_a_path_that_is_no_run_says_so(tmp_path, capsys):
    """A file given for the run is named as no run, not as something in the export's way to move."""
    from benchfill.cli import main

    report = tmp_path / "report.json"
    report.write_text("{}")
    assert main(["review", "export", str(report)]) != 0
    err = capsys.readouterr().err.strip()
    assert err == f"benchfill: error: {report}: no such run directory", err


def test_a_decision_the_store_cannot_write_is_a_503_that_says_why(tmp_path, shared_data, monkeypatch):
    # a full disk had answered "Internal Server Error", and the page said "Not recorded: Internal Server Error"
    import sqlite3

    from sqlalchemy.exc import OperationalError

    run = make_run(tmp_path, shared_data)
    with ReviewServer(run) as srv:
        def full(*a, **k):
            raise OperationalError("INSERT INTO reviewdecision ...", {}, sqlite3.OperationalError("database or disk is full"))

        monkeypatch.setattr(srv.board, "decide", full)
        r = httpx.post(f"http://127.0.0.1:{srv.port}/api/decision", headers={"X-Benchfill-Token": srv.token},
                       json={"item_id": CHILD_IDS[0], "reviewer": "ann", "decision": "accept"})
        assert r.status_code == 503
        assert r.json()["error"] == (f"store {srv.board.store.where}: the decision could not be written (database or "
                                     "disk is full); nothing was recorded: decide again once it can be")


def test_a_report_or_plot_write_that_fails_leaves_no_temp_file(tmp_path, monkeypatch):
    import errno
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchfill.report import _savefig, _write

    def full(*a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        _write(tmp_path / "report.json", "{}")
    fig = plt.figure()
    with pytest.raises(OSError):
        _savefig(fig, tmp_path / "ecdf.png")
    plt.close(fig)
    assert list(tmp_path.iterdir()) == []
