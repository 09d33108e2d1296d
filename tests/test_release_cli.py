"""The review/release commands end to end: on the hand-built run, and on a real `benchfill run` output."""

from __future__ import annotations

import csv
import json

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main


def _fill(csv_path, decisions):
    rows = list(csv.DictReader(csv_path.open()))
    for row in rows:
        row.update(decisions.get(row["item_id"], {}))
    with csv_path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_cli_export_import_release_verify_diff(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    assert main(["review", "export", str(run)]) == 0
    csv_path = run / "review" / "review_queue.csv"
    _fill(csv_path, {CHILD_IDS[0]: {"reviewer": "ann", "decision": "accept"}})
    assert main(["review", "import", str(csv_path)]) == 0  # the run is found from the CSV's place
    assert "recorded 1 decision(s)" in capsys.readouterr().out

    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    out = capsys.readouterr().out
    v1 = tmp_path / "releases" / "aime24" / "1.0.0"
    assert f"released 1.0.0: 30 original + 1 generated item(s) at {v1}" in out

    assert main(["release", str(run), "--version", "1.0.0"]) == 2
    assert "release 1.0.0 of aime24 already exists" in capsys.readouterr().err
    assert main(["release", str(run), "--version", "one"]) == 2
    assert "not a semantic version" in capsys.readouterr().err

    _fill(csv_path, {CHILD_IDS[1]: {"reviewer": "bob", "decision": "edit", "edited_answer": "99"}})
    assert main(["review", "import", str(csv_path)]) == 0
    assert main(["release", str(run), "--version", "1.1.0"]) == 0
    capsys.readouterr()
    assert main(["release", "diff", str(v1), str(v1.parent / "1.1.0")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "1.0.0 -> 1.1.0: 1 added, 0 removed, 0 changed", f"+ {CHILD_IDS[1]}",
    ]  # fmt: skip

    assert main(["release", "verify", str(v1)]) == 0
    (v1 / "README.md").write_text((v1 / "README.md").read_text() + "\nhand edit\n")
    assert main(["release", "verify", str(v1)]) == 2
    assert "README.md: sha256 differs from the manifest" in capsys.readouterr().err


def test_cli_import_names_the_bad_row(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    main(["review", "export", str(run)])
    csv_path = run / "review" / "review_queue.csv"
    _fill(csv_path, {CHILD_IDS[2]: {"reviewer": "ann", "decision": "reject"}})
    assert main(["review", "import", str(csv_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "review_queue.csv line" in err and "(data row 3)" in err and "'reason' is required" in err
    assert len(err.splitlines()) == 1
    stray = tmp_path / "elsewhere.csv"
    stray.write_text(csv_path.read_text())
    assert main(["review", "import", str(stray)]) == 2
    assert "pass --run RUN" in capsys.readouterr().err


@pytest.mark.slow
def test_review_and_release_a_real_demo_run(tmp_path, capsys):
    runs = tmp_path / "runs"
    args = ["run", "--benchmark", "demo", "--backend", "sim", "--runs-dir", str(runs), "--run-id", "demo",
            "--gaps", "1", "--rounds", "1", "--parents", "2", "--children", "2", "--quiet"]  # fmt: skip
    assert main(args) == 0
    run = runs / "demo"
    assert main(["review", "export", str(run)]) == 0
    records = [json.loads(x) for x in (run / "review" / "review_queue.export.jsonl").read_text().splitlines()]
    assert records and all(r["ancestor_text"] and "text_changes" in r for r in records)
    from benchfill.review import ReviewBoard

    with ReviewBoard(run) as board:
        for e in board.entries:
            board.decide(e.item_id, "ann", "accept")
    assert main(["release", str(run), "--version", "0.1.0"]) == 0
    import datasets

    ds = datasets.load_dataset(str(runs / "releases" / "demo" / "0.1.0"), split="test")
    generated = [r for r in ds if r["origin"] == "generated"]
    assert len(generated) == len(records) and all(r["simulated"] and r["ancestor_id"] for r in generated)
