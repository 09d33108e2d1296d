"""The review/release commands end to end: on the hand-built run, and on a real `benchfill run` output."""

from __future__ import annotations

import csv
import json

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main
from benchfill.review import ReviewBoard


def _fill(csv_path, decisions):
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))
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

    # the same command again (a retry, or a kill after its last write): the release it made, not an error
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    out = capsys.readouterr().out
    assert ("already released, as this command would release it now (nothing decided since): 1.0.0: 30 original "
            f"+ 1 generated item(s) at {v1}") in out and "manifest sha256 " in out  # fmt: skip
    # ... but not under another rule, nor once a decision came after it: versions are immutable
    assert main(["release", str(run), "--version", "1.0.0", "--min-accepts", "2"]) == 2
    assert "release 1.0.0 of aime24 already exists" in capsys.readouterr().err
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "cy", "accept")  # a second accept: a decision all the same
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
    (v1 / "plot.png").unlink(missing_ok=True)
    for name in ("CHANGELOG.md", "data/test.jsonl"):
        (v1 / name).write_text((v1 / name).read_text() + "\n")
    assert main(["release", "verify", str(v1)]) == 2  # several problems: all on stderr, the error line first
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and lines[0].startswith("benchfill: error: release does not verify (")
    assert len(lines) >= 3 and all(line.startswith("  ") for line in lines[1:])


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
    assert "does not lie in a run's review/ folder); pass --run RUN" in capsys.readouterr().err


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
    # what a third party needs to make the run again is in the card: the version, the settings, the inputs
    from importlib.metadata import version

    import yaml

    card = (runs / "releases" / "demo" / "0.1.0" / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])["benchfill"]
    assert meta["benchfill_version"] == version("benchfill")
    assert meta["run_options"]["benchmark"] == "demo" and meta["run_options"]["rounds"] == 1
    # extra is part of the run id (a sweep's anchor_items), so of the card; the run's code and rewriter are named
    assert meta["run_options"]["children"] == 2 and meta["run_options"]["extra"] == {}
    assert meta["run_code"]["version"] == version("benchfill") and meta["run_options"]["sim_rewriter"] == "realistic"
    assert len(meta["inputs_sha256"]["benchmark_items"]) == 64
    # and where the original items came from, as the spec's source says (docs/contracts.md; it was not)
    assert meta["source"] == "built-in seeded demo" and "\nOriginal items: built-in seeded demo.\n" in card


def test_verify_catches_a_manifest_rewritten_to_fit_edited_files(tmp_path, shared_data, capsys):
    import hashlib
    import json
    import shutil

    run = make_run(tmp_path, shared_data)
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    printed = capsys.readouterr().out.split("manifest sha256 ")[1].split()[0]
    v1 = tmp_path / "releases" / "aime24" / "1.0.0"
    assert main(["release", "verify", str(v1), "--sha256", printed]) == 0
    assert main(["release", "verify", str(v1), "--run", str(run)]) == 0
    assert "as recorded" in capsys.readouterr().out
    # a copy under another version, with one answer changed and the manifest rewritten to match
    fake = v1.parent / "9.9.9"
    shutil.copytree(v1, fake)
    data = fake / "data" / "test.jsonl"
    old_sha = hashlib.sha256(data.read_bytes()).hexdigest()
    data.write_text(data.read_text().replace('"answer": ', '"answer": 1', 1))
    m = json.loads((fake / "manifest.json").read_text())
    m["files"]["data/test.jsonl"]["sha256"] = new_sha = hashlib.sha256(data.read_bytes()).hexdigest()
    card = fake / "README.md"  # the card names its data's sha256: rewritten to fit as well
    card.write_text(card.read_text().replace(old_sha, new_sha))
    m["files"]["README.md"]["sha256"] = hashlib.sha256(card.read_bytes()).hexdigest()
    (fake / "manifest.json").write_text(json.dumps(m))
    assert main(["release", "verify", str(fake)]) == 2
    assert "names version '1.0.0', the folder is '9.9.9'" in capsys.readouterr().err
    m["version"] = "9.9.9"
    (fake / "manifest.json").write_text(json.dumps(m))
    assert main(["release", "verify", str(fake)]) == 0  # nothing in the folder itself can tell ...
    capsys.readouterr()
    assert main(["release", "verify", str(fake), "--sha256", printed]) == 2  # ... its recorded sha256 can
    assert "the manifest was rewritten" in capsys.readouterr().err
    # a manifest that lists nothing
    (fake / "manifest.json").write_text(json.dumps({**m, "files": {}}))
    assert main(["release", "verify", str(fake)]) == 2
    assert "data/test.jsonl: a release must list it in its manifest" in capsys.readouterr().err
    (fake / "manifest.json").write_text(json.dumps({**m, "files": ["data/test.jsonl"]}))
    assert main(["release", "verify", str(fake)]) == 2
    assert "not a benchfill manifest" in capsys.readouterr().err


def test_release_names_pending_items_and_ignores_strays_and_stale_temp_folders(tmp_path, shared_data, capsys):
    import os

    run = make_run(tmp_path, shared_data)
    root = tmp_path / "releases" / "aime24"
    (root / "2.0.0").mkdir(parents=True)  # someone's folder, named like a version, without a manifest
    stale = root / ".1.0.0.abcd.tmp"  # what a killed release leaves
    stale.mkdir()
    (stale / "half.jsonl").write_text("{")
    os.utime(stale, (0, 0))
    fresh = root / ".0.9.0.efgh.tmp"  # a release in progress elsewhere: left alone
    fresh.mkdir()
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    err = capsys.readouterr().err
    assert "note: 4 item(s) of this run still await review and are not in 1.0.0" in err
    assert not stale.exists() and fresh.exists() and (root / "1.0.0" / "manifest.json").is_file()
    assert main(["release", str(run), "--version", "2.0.0"]) == 2
    assert "releases/aime24/2.0.0 exists but is not a release (no manifest.json); move it away" in \
        capsys.readouterr().err
    (root / "2.0.0").rmdir()
    import shutil

    shutil.rmtree(root / "1.0.0")  # gone from disk, still in the store
    assert main(["release", str(run), "--version", "1.0.0"]) == 2
    err = capsys.readouterr().err
    assert "its store records it at" in err and "which holds no release now" in err


def test_diff_refuses_a_data_file_with_a_repeated_or_odd_line(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    v1 = tmp_path / "releases" / "aime24" / "1.0.0"
    data = v1 / "data" / "test.jsonl"
    lines = data.read_text().splitlines()
    data.write_text("\n".join([*lines, lines[0]]) + "\n")
    assert main(["release", "diff", str(v1), str(v1)]) == 2
    assert f"test.jsonl line {len(lines) + 1}: item" in capsys.readouterr().err
    data.write_text("\n".join([*lines, "[1, 2]"]) + "\n")
    assert main(["release", "diff", str(v1), str(v1)]) == 2
    assert "not an item" in capsys.readouterr().err


def test_a_release_killed_after_it_appeared_is_finished_by_the_rerun(tmp_path, shared_data, capsys, monkeypatch):
    """The folder is renamed into place first, then the store's row and the changelog are written: a kill
    in between left a release the same command refused ('already exists') and verify --run could not
    check. The rerun now records it; a staging folder of the same version is swept."""
    from pathlib import Path

    from benchfill.review import ReviewBoard

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    root = tmp_path / "releases" / "aime24"
    real = Path.rename

    def killed_after(self, target):
        out = real(self, target)
        if Path(target).name == "1.0.0":
            raise KeyboardInterrupt  # the moment a kill would land
        return out

    monkeypatch.setattr(Path, "rename", killed_after)
    with pytest.raises(KeyboardInterrupt):
        from benchfill.release import release

        release(run, "1.0.0")
    monkeypatch.setattr(Path, "rename", real)
    assert (root / "1.0.0" / "manifest.json").is_file() and not (root / "CHANGELOG.md").exists()
    assert (root / "scale_of_record.json").is_file()  # the release stands: so does the scale it was placed on
    (root / ".1.0.0.abcd.tmp").mkdir()  # what a kill before the rename leaves
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    out = capsys.readouterr().out
    assert "finished the interrupted release 1.0.0: 30 original + 1 generated item(s)" in out
    assert (root / "CHANGELOG.md").is_file() and not (root / ".1.0.0.abcd.tmp").exists()
    assert main(["release", "verify", str(root / "1.0.0"), "--run", str(run)]) == 0
    assert main(["release", str(run), "--version", "1.0.0"]) == 0  # recorded now: whole, as it said
    assert "already released, as this command would release it now" in capsys.readouterr().out


def test_a_release_without_a_rule_uses_the_one_the_review_page_was_served_with(tmp_path, shared_data, capsys):
    """`review serve --min-accepts 2` showed an item with one accept as pending; a release without flags
    shipped it under the default rule all the same. The page's rule is kept with the run now."""
    from benchfill.review import ReleaseRule, ReviewBoard
    from benchfill.review.server import ReviewServer

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
        b.decide(CHILD_IDS[1], "ann", "accept")
        b.decide(CHILD_IDS[1], "bob", "accept")
    with ReviewServer(run, rule=ReleaseRule(min_accepts=2)) as srv:
        assert srv.board.outcomes()[CHILD_IDS[0]].status == "pending"
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    out, err = capsys.readouterr()
    assert "30 original + 1 generated item(s)" in out and "note: released under" not in err  # CHILD_IDS[1] only
    assert main(["release", str(run), "--version", "1.1.0", "--min-accepts", "1"]) == 0
    out, err = capsys.readouterr()
    assert "30 original + 2 generated item(s)" in out
    assert ("note: released under the rule given (accepted by at least 1 reviewer(s) and rejected by at most 0), "
            "not the one the review page was served with (accepted by at least 2") in err


def test_a_release_does_not_carry_an_altered_earlier_one_forward(tmp_path, shared_data, capsys):
    """Its rows are carried into the new release, whose fresh manifest would vouch for them: an answer
    changed in the earlier release's data once shipped in the next one, which verified clean."""
    from benchfill.review import ReviewBoard

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    root = tmp_path / "releases" / "aime24"
    data = root / "1.0.0" / "data" / "test.jsonl"
    kept = data.read_text(encoding="utf-8")
    rows = [json.loads(line) for line in kept.splitlines()]
    rows[-1]["answer"] = "tampered"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    capsys.readouterr()
    assert main(["release", str(run), "--version", "1.1.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not verify" in err[0] and "test.jsonl: does not match its manifest" in err[0]
    assert not (root / "1.1.0").exists()
    data.write_text(kept, encoding="utf-8")  # restored: the release goes ahead
    (root / "1.0.0" / ".DS_Store").write_bytes(b"\0")  # a file no release reads does not hold it back
    assert main(["release", str(run), "--version", "1.1.0"]) == 0
    # a manifest rewritten to fit changed data: only the sha256 the store recorded tells, also where the
    # store holds the path as an older benchfill wrote it (relative to a folder it no longer knows)
    from sqlalchemy import text

    from benchfill.release import manifest_sha256
    from benchfill.store import open_run_store

    store = open_run_store(run, create=False)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE release SET path = 'releases/aime24/' || version"))
    store.close()
    v11 = root / "1.1.0"
    manifest = json.loads((v11 / "manifest.json").read_text())
    rows = (v11 / "data" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    (v11 / "data" / "test.jsonl").write_text("\n".join(rows[:-1]) + "\n", encoding="utf-8")
    import hashlib

    manifest["files"]["data/test.jsonl"]["sha256"] = hashlib.sha256((v11 / "data" / "test.jsonl").read_bytes()).hexdigest()
    (v11 / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert manifest_sha256(v11)  # (verifies on its own files now)
    capsys.readouterr()
    assert main(["release", str(run), "--version", "1.2.0"]) == 2
    assert "manifest.json: not the manifest this run recorded for 1.1.0" in capsys.readouterr().err


def test_the_store_keeps_where_a_release_is_whatever_folder_it_was_made_from(tmp_path, shared_data, capsys,
                                                                             monkeypatch):
    """A release made with a relative --out was recorded relative to the folder it was made from, so
    `verify --run` from anywhere else said the store recorded no release there. A recorded release whose
    folder is gone is named as such, not as one that exists."""
    import shutil

    run = make_run(tmp_path, shared_data)
    monkeypatch.chdir(tmp_path)
    assert main(["release", str(run), "--version", "1.0.0", "--out", "rel"]) == 0
    monkeypatch.chdir(run)
    rel = tmp_path / "rel" / "aime24" / "1.0.0"
    assert main(["release", "verify", str(rel), "--run", str(run)]) == 0
    shutil.rmtree(tmp_path / "rel")
    capsys.readouterr()
    assert main(["release", str(run), "--version", "1.0.0", "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert "was made by this run" in err and "which holds no release now" in err


def test_a_release_killed_before_its_changelog_is_finished_by_the_rerun(tmp_path, shared_data, capsys,
                                                                        monkeypatch):
    """The store's row is written, then the benchmark's changelog: a kill in between left the changelog
    behind, and the rerun said 'already exists'."""
    import benchfill.release as rel
    from benchfill.review import ReviewBoard

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")

    def killed(bench_dir, text):
        raise KeyboardInterrupt

    monkeypatch.setattr(rel, "_write_changelog", killed)
    with pytest.raises(KeyboardInterrupt):
        rel.release(run, "1.0.0")
    monkeypatch.undo()
    root = tmp_path / "releases" / "aime24"
    assert not (root / "CHANGELOG.md").exists()
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    assert "finished the interrupted release 1.0.0" in capsys.readouterr().out
    assert (root / "CHANGELOG.md").read_bytes() == (root / "1.0.0" / "CHANGELOG.md").read_bytes()
    assert main(["release", str(run), "--version", "1.0.0"]) == 0  # finished: whole, as it said
    assert "already released, as this command would release it now" in capsys.readouterr().out
    (root / "1.0.0" / "data" / "test.jsonl").write_text("{}\n")  # altered since: no longer the one recorded
    assert main(["release", str(run), "--version", "1.0.0"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_release_flags_that_do_not_apply_and_a_malformed_sha256_are_named(tmp_path, shared_data, capsys):
    """`release verify DIR --version 2.0.0` verified and ignored the flag; `--sha256 abc` was reported as
    a rewritten manifest."""
    run = make_run(tmp_path, shared_data)
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    v1 = str(tmp_path / "releases" / "aime24" / "1.0.0")
    for argv, message in (
        (["release", "verify", v1, "--version", "2.0.0"], "--version: does not apply to `benchfill release verify`"),
        (["release", "diff", v1, v1, "--run", str(run)], "--run: does not apply to `benchfill release diff`"),
        (["release", str(run), "--version", "1.1.0", "--sha256", "0" * 64],
         "--sha256: does not apply to `benchfill release`"),
        (["release", "verify", v1, "--sha256", "abc"], "--sha256: not a sha256 (64 hexadecimal digits), got 'abc'"),
        (["release", "verify", v1, "--sha256", "0" * 64, "--run", str(run)], "--sha256 and --run: give one"),
    ):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
    assert not (tmp_path / "releases" / "aime24" / "1.1.0").exists()
    assert main(["release", "verify", v1, "--run", str(run)]) == 0


def test_two_imports_of_one_sheet_at_once_record_it_once(tmp_path, shared_data):
    # Each import read the decisions before the other wrote, and both recorded every row.
    from concurrent.futures import ThreadPoolExecutor

    from benchfill.review import import_decisions
    from benchfill.review.board import ReviewBoard

    run = make_run(tmp_path, shared_data)
    assert main(["review", "export", str(run)]) == 0
    sheet = run / "review" / "review_queue.csv"
    _fill(sheet, {i: {"reviewer": "ann", "decision": "accept"} for i in CHILD_IDS})
    with ThreadPoolExecutor(3) as pool:
        counts = list(pool.map(lambda _: import_decisions(run, sheet), range(3)))
    assert sorted(counts) == [0, 0, len(CHILD_IDS)]
    with ReviewBoard(run) as board:
        assert len(board.decisions()) == len(CHILD_IDS)


def test_a_release_the_store_could_not_record_says_a_rerun_finishes_it(tmp_path, shared_data, capsys, monkeypatch):
    # the store's line had not said that the same command completes the release
    import sqlite3

    from sqlalchemy.exc import OperationalError

    import benchfill.release as rel

    run = make_run(tmp_path, shared_data)

    def full(*a, **kw):  # the store fails as the release is recorded
        raise OperationalError("INSERT INTO release ...", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(rel.ScaleOfRecord, "write", full)
    assert main(["release", str(run), "--version", "1.0.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("benchfill: error: store ") and "database or disk is full" in err[-1]
    assert err[-1].endswith("rerun the same command to resume once it answers")
    assert not (tmp_path / "releases" / "aime24" / "1.0.0").exists()  # nothing published


def test_a_copy_of_a_run_does_not_take_its_twins_release_for_its_own(tmp_path, shared_data, capsys):
    # a copy's store names the run alike: its "release 1.0.0" had "finished the interrupted release" its twin
    # made, recorded it as its own, and carried an item its own reviewer had rejected
    import shutil

    from benchfill.review import ReviewBoard
    from benchfill.store import Store, run_name

    run = make_run(tmp_path, shared_data)
    store = Store(run / "store.db")
    run_name(store, run, keep=True)  # as a run made by `benchfill run` keeps it from the start
    store.close()
    twin = tmp_path / "copy"
    shutil.copytree(run, twin)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    with ReviewBoard(twin) as b:
        b.decide(CHILD_IDS[0], "bob", "reject", reason="wrong key")
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    capsys.readouterr()
    assert main(["release", str(twin), "--version", "1.0.0", "--out", str(tmp_path / "releases")]) == 2
    assert "release 1.0.0 of aime24 already exists" in capsys.readouterr().err
    assert main(["release", "verify", str(tmp_path / "releases" / "aime24" / "1.0.0"), "--run", str(twin)]) == 2


def test_the_pending_note_names_no_item_the_release_holds(tmp_path, shared_data, capsys):
    # an item released in 1.0.0 and withdrawn after is carried forward into 1.1.0 pending: it is in 1.1.0
    from benchfill.review import ReviewBoard

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "withdraw")
    capsys.readouterr()
    assert main(["release", str(run), "--version", "1.1.0"]) == 0
    got = capsys.readouterr()
    assert "1 carried forward" in got.out
    note = [ln for ln in got.err.splitlines() if "still await review" in ln]
    assert note and CHILD_IDS[0] not in note[0] and CHILD_IDS[1] in note[0]


def test_the_same_command_again_is_judged_by_what_it_asked_and_when_it_read(tmp_path, shared_data, capsys,
                                                                            monkeypatch):
    """A retry of a release with --remove was refused (any --remove counted as another command); the old
    1.0.0 command after 1.1.0 said 1.0.0 was "as this command would release it now" (it would be refused as
    not newer); and a decision made while the release was being built was not "since"."""
    import benchfill.release as rel

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        for i in CHILD_IDS[:2]:
            b.decide(i, "ann", "accept")
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    cmd = ["release", str(run), "--version", "1.1.0", "--remove", CHILD_IDS[0], "--removed-by", "ann",
           "--reason", "key wrong"]  # fmt: skip
    assert main(cmd) == 0
    capsys.readouterr()
    assert main(cmd) == 0
    out = capsys.readouterr().out
    assert "already released, as this command would release it now" in out and "1 removed" in out
    assert main([*cmd[:-1], "another reason"]) == 2  # another removal asked: another command
    assert main(["release", str(run), "--version", "1.0.0"]) == 2
    assert "already exists" in capsys.readouterr().err
    # bob accepts while the release reads the decisions: the retry must not call it unchanged
    run2 = make_run(tmp_path / "two", shared_data)
    with ReviewBoard(run2) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    real = rel._rows

    def rows_then_bob(board, *args, **kw):
        got = real(board, *args, **kw)
        with ReviewBoard(run2) as other:
            other.decide(CHILD_IDS[1], "bob", "accept")
        return got

    monkeypatch.setattr(rel, "_rows", rows_then_bob)
    assert main(["release", str(run2), "--version", "1.0.0"]) == 0
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["release", str(run2), "--version", "1.0.0"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_release_names_generated_items_that_copy_another_items_text(tmp_path, shared_data, capsys):
    # a reviewer's edit made a child an original's copy (in another case and spacing): released without a word
    run = make_run(tmp_path, shared_data)
    original = json.loads((shared_data / "aime24" / "items.jsonl").read_text().splitlines()[0])
    with ReviewBoard(run) as board:
        board.decide(CHILD_IDS[0], "ann", "edit", text="  " + original["problem"].upper().replace(" ", "   ") + "\n")
        board.decide(CHILD_IDS[1], "ann", "accept")
    capsys.readouterr()
    assert main(["release", str(run), "--version", "1.0.0", "--out", str(tmp_path / "rel")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "have the text of another item" in line]
    assert notes == [f"note: 1 generated item(s) in 1.0.0 have the text of another item there: "
                     f"{CHILD_IDS[0]} = {original['id']}; a reviewer's reject or edit takes one out"]


def test_a_scale_of_record_whose_release_never_appeared_is_not_the_next_runs(tmp_path, shared_data, caplog):
    """The scale file is written just before the release's folder is renamed into place: a kill between left a
    scale for a release that never appeared, and another run's first release was placed on it, its card
    naming the killed run as the one that fixed the benchmark's scale."""
    import logging

    from benchfill.release import ScaleOfRecord, release
    from benchfill.review import ReviewBoard

    first, second = make_run(tmp_path, shared_data, "run-first"), make_run(tmp_path, shared_data, "run-second")
    for run in (first, second):
        with ReviewBoard(run) as b:
            b.decide(CHILD_IDS[0], "ann", "accept")
    root = tmp_path / "releases" / "aime24"
    root.mkdir(parents=True)
    with ReviewBoard(first) as b:
        ScaleOfRecord.from_run(b, "1.0.0", "run-first").write(root)  # what the kill left
    with caplog.at_level(logging.WARNING, "benchfill.release"):
        made = release(second, "1.0.0")
    assert any("which never appeared" in r.getMessage() for r in caplog.records)
    card = (made.path / "README.md").read_text()
    assert "run `run-second`" in card and "run-first" not in card
    assert ScaleOfRecord.read(root).run_id == "run-second"


def test_verify_names_a_path_that_is_no_folder_as_such(tmp_path, capsys):
    # "nope/manifest.json: missing" read as a release that had lost its manifest
    assert main(["release", "verify", str(tmp_path / "nope")]) != 0
    assert f"{tmp_path / 'nope'}: no such folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["release", "verify", str(tmp_path / "file")]) != 0
    assert f"{tmp_path / 'file'}: not a folder (a release is one)" in capsys.readouterr().err
    assert main(["release", "verify", ""]) != 0  # not the current folder
    assert "release verify: an empty path" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["release", "verify", str(tmp_path / "empty")]) != 0
    assert f"{tmp_path / 'empty' / 'manifest.json'}: missing" in capsys.readouterr().err


def test_a_release_rests_on_the_fit_the_run_recorded_and_fit_will_not_replace_a_runs(tmp_path, shared_data, capsys,
                                                                                      monkeypatch):
    # `benchfill fit` run inside a run folder wrote its fit.json (the default --out) over the run's own, with no
    # word; the release read that file, published other "before" figures than the run's report, and fixed them
    # as the benchmark's scale of record.
    import shutil

    from benchfill.irt.fit import IrtFit

    kept, moved = make_run(tmp_path / "a", shared_data), make_run(tmp_path / "b", shared_data)
    fit = IrtFit.load(moved / "fit.json")
    other = IrtFit.from_dict({**fit.to_dict(), "difficulty": [b + 0.5 * (k % 2) for k, b in enumerate(fit.difficulty)]})
    other.save(tmp_path / "other.json")
    shutil.copy(tmp_path / "other.json", moved / "fit.json")  # what a file manager, or an older benchfill, does
    for run in (kept, moved):
        with ReviewBoard(run) as b:
            b.decide(CHILD_IDS[0], "ann", "accept")
        assert main(["release", str(run), "--version", "1.0.0", "--out", str(run.parent / "rel")]) == 0
    cards = [(r / "rel" / "aime24" / "1.0.0" / "README.md").read_text() for r in (tmp_path / "a", tmp_path / "b")]
    figures = [[ln for ln in c.splitlines() if ln.startswith("| max gap") or ln.startswith("| top-")] for c in cards]
    assert figures[0] and figures[0] == figures[1]
    capsys.readouterr()
    monkeypatch.chdir(kept)
    assert main(["fit", "--responses", str(shared_data / "aime25" / "responses.csv")]) == 2
    assert f"--out 'fit.json': is the fit.json of the run in {kept}" in capsys.readouterr().err
    assert IrtFit.load(kept / "fit.json").difficulty.tolist() == fit.difficulty.tolist()
