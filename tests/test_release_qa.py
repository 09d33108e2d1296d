"""Releases after a QA pass: removals that last, diffs within one benchmark, unreadable files named in one
line, a card that must agree with its data, and a store that cannot take the release's row."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main
from benchfill.review import ReviewBoard
from benchfill.store import Store


def _accept(run: Path, *ids: str, reviewer: str = "ann") -> None:
    with ReviewBoard(run) as b:
        for i in ids:
            b.decide(i, reviewer, "accept")


def _entry(release_dir: Path) -> str:
    """The CHANGELOG entry of the release itself."""
    return (release_dir / "CHANGELOG.md").read_text().split("### ", 2)[1]


def _refit_manifest(release_dir: Path, *names: str) -> None:
    """Rewrite the manifest to fit files edited by hand (what a careless or hostile editor does)."""
    mpath = release_dir / "manifest.json"
    m = json.loads(mpath.read_text())
    for name in names:
        m["files"][name]["sha256"] = hashlib.sha256((release_dir / name).read_bytes()).hexdigest()
    mpath.write_text(json.dumps(m))


def test_a_removed_item_stays_out_until_a_reviewer_accepts_it_again(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    _accept(run, CHILD_IDS[0], CHILD_IDS[1])
    root = tmp_path / "releases" / "aime24"
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    assert main(["release", str(run), "--version", "1.1.0", "--remove", CHILD_IDS[1], "--removed-by", "x",
                 "--reason", "dup"]) == 0  # fmt: skip
    capsys.readouterr()
    # the run still holds its accept of the item: without a record of the removal, 1.2.0 added it back
    assert main(["release", str(run), "--version", "1.2.0"]) == 0
    err = capsys.readouterr().err
    assert f"stay out of 1.2.0, removed from an earlier release: {CHILD_IDS[1]}" in err
    assert main(["release", "diff", str(root / "1.1.0"), str(root / "1.2.0")]) == 0
    assert capsys.readouterr().out.splitlines() == ["1.1.0 -> 1.2.0: 0 added, 0 removed, 0 changed"]
    entry = _entry(root / "1.2.0")
    assert "0 generated item(s) added" in entry
    assert f"`{CHILD_IDS[1]}` stays removed (removed in 1.1.0: x: dup); an accept or edit" in entry
    assert main(["release", str(run), "--version", "1.3.0"]) == 0  # the record lasts past one release
    assert CHILD_IDS[1] not in {json.loads(x)["id"] for x in (root / "1.3.0" / "data" / "test.jsonl").open()}
    capsys.readouterr()

    _accept(run, CHILD_IDS[1], reviewer="bob")  # a decision after the removal puts it back
    assert main(["release", str(run), "--version", "1.4.0"]) == 0
    assert "stay out" not in capsys.readouterr().err
    entry = _entry(root / "1.4.0")
    assert f"added from run `{run.name}`: `{CHILD_IDS[1]}`" in entry
    assert f"`{CHILD_IDS[1]}` back after its removal (removed in 1.1.0; accepted again by bob)" in entry
    assert json.loads((root / "1.4.0" / "manifest.json").read_text())["removed"] == {}
    assert main(["release", str(run), "--version", "1.5.0"]) == 0  # and it stays, carried forward
    assert f"carried forward from 1.4.0: `{CHILD_IDS[0]}`, `{CHILD_IDS[1]}`" in _entry(root / "1.5.0")


def test_diff_refuses_releases_of_different_benchmarks(tmp_path, shared_data, capsys):
    a = make_run(tmp_path, shared_data, "run-a")
    b = make_run(tmp_path, shared_data, "run-b")
    store = Store(b / "store.db")
    try:
        store.set_meta("benchmark", {"name": "aime24-hard", "text_field": "problem", "answer_field": "answer"})
    finally:
        store.close()
    assert main(["release", str(a), "--version", "1.0.0"]) == 0
    assert main(["release", str(b), "--version", "1.0.0"]) == 0
    capsys.readouterr()
    rel = tmp_path / "releases"
    assert main(["release", "diff", str(rel / "aime24" / "1.0.0"), str(rel / "aime24-hard" / "1.0.0")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "'aime24'" in err and "'aime24-hard'" in err and "one benchmark" in err


def test_files_that_are_not_utf8_are_named_in_one_line(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    _accept(run, CHILD_IDS[0])
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    v1 = tmp_path / "releases" / "aime24" / "1.0.0"
    capsys.readouterr()

    w = tmp_path / "w"
    (w / "data").mkdir(parents=True)
    (w / "data" / "test.jsonl").write_bytes(b"\xff\xfe\n")
    assert main(["release", "diff", str(v1), str(w)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"{w / 'data' / 'test.jsonl'} line 1: not UTF-8 text" in err[0]

    copy = tmp_path / "copy"
    shutil.copytree(v1, copy)
    (copy / "manifest.json").write_bytes(b"\xff{}")
    assert main(["release", "diff", str(v1), str(copy)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"{copy / 'manifest.json'}: not UTF-8 text" in err[0]

    # the previous release's changelog, its manifest rewritten to fit: the next release (from another run,
    # whose store recorded no manifest of 1.0.0) reads it to carry its history forward
    (v1 / "CHANGELOG.md").write_bytes(b"# Changelog of aime24\n\n\xff\n")
    _refit_manifest(v1, "CHANGELOG.md")
    later = make_run(tmp_path, shared_data, run_id="run-later")
    assert main(["release", str(later), "--version", "1.1.0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"{v1 / 'CHANGELOG.md'}: not UTF-8 text" in err[0]
    assert not (v1.parent / "1.1.0").exists()


def _one_release(tmp_path, shared_data) -> tuple[Path, Path]:
    """A run with one item accepted, and its release 1.0.0 (made by the CLI)."""
    run = make_run(tmp_path, shared_data)
    _accept(run, CHILD_IDS[0])
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    return run, tmp_path / "releases" / "aime24" / "1.0.0"


def test_verify_checks_the_data_against_the_card_and_refuses_links(tmp_path, shared_data, capsys):
    run, v1 = _one_release(tmp_path, shared_data)
    data = v1 / "data" / "test.jsonl"
    pristine, manifest = data.read_bytes(), (v1 / "manifest.json").read_bytes()
    with data.open("a") as fh:
        fh.write(json.dumps({"id": "extra", "problem": "1+1?", "answer": "2", "origin": "original"}) + "\n")
    _refit_manifest(v1, "data/test.jsonl")
    capsys.readouterr()
    assert main(["release", "verify", str(v1)]) == 2
    err = capsys.readouterr().err
    assert "test.jsonl: sha256 differs from the card's data_sha256 (README.md)" in err

    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(pristine)
    data.unlink()
    data.symlink_to(outside)  # the bytes the manifest and the card name, but not the release's own file
    _refit_manifest(v1, "data/test.jsonl")
    assert main(["release", "verify", str(v1)]) == 2
    assert f"{data}: a symbolic link; a release holds regular files only" in capsys.readouterr().err

    data.unlink()
    data.write_bytes(pristine)
    (v1 / "manifest.json").write_bytes(manifest)
    assert main(["release", "verify", str(v1), "--run", str(run)]) == 0
    # A card from before data_sha256 (releases of 2026-11-29 and earlier) is left to the manifest
    card = v1 / "README.md"
    card.write_text("".join(x for x in card.read_text().splitlines(True) if "data_sha256:" not in x))
    _refit_manifest(v1, "README.md")
    assert main(["release", "verify", str(v1)]) == 0
    os.mkfifo(v1 / "plots" / "pipe")
    assert main(["release", "verify", str(v1)]) == 2
    assert "pipe: not a regular file" in capsys.readouterr().err


def test_a_copy_downloaded_from_the_hub_verifies_with_copy(tmp_path, shared_data, capsys):
    # in any folder, with the repository's .gitattributes and huggingface_hub's download records, or in the
    # Hub's cache where every file is a link to its blob: it never verified, though the card says to check it
    import shutil

    _, v1 = _one_release(tmp_path, shared_data)
    dl = tmp_path / "dl" / "aime24-1.0.0"
    shutil.copytree(v1, dl)
    (dl / ".gitattributes").write_text("*.jsonl filter=lfs diff=lfs merge=lfs -text\n")
    (dl / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (dl / ".cache" / "huggingface" / "download" / "README.md.metadata").write_text("abc\n")
    capsys.readouterr()
    assert main(["release", "verify", str(dl)]) == 2  # as a release in its folder, it is not one
    from benchfill.release import manifest_sha256

    printed = manifest_sha256(v1)  # as `release` printed it
    assert main(["release", "verify", str(dl), "--copy", "--sha256", printed]) == 0, capsys.readouterr().err
    snap, blobs = tmp_path / "hub" / "snapshots" / "abc123", tmp_path / "hub" / "blobs"
    blobs.mkdir(parents=True)
    for f in v1.rglob("*"):
        if f.is_file():
            blob = blobs / f"b{len(list(blobs.iterdir()))}"
            shutil.copyfile(f, blob)
            (snap / f.relative_to(v1)).parent.mkdir(parents=True, exist_ok=True)
            (snap / f.relative_to(v1)).symlink_to(blob)
    assert main(["release", "verify", str(snap), "--copy"]) == 0, capsys.readouterr().err
    with (blobs / "b0").open("a") as fh:  # a blob changed: still caught
        fh.write("\n")
    assert main(["release", "verify", str(snap), "--copy"]) == 2
    assert main(["release", "diff", str(v1), str(v1), "--copy"]) == 2  # verify's flag only
    assert "--copy: does not apply to `benchfill release diff`" in capsys.readouterr().err


def _no_release_published(root: Path) -> None:
    assert not (root / "1.0.0").exists() and not (root / "CHANGELOG.md").exists()
    assert not (root / "scale_of_record.json").exists() and not list(root.glob(".*.tmp"))


def test_a_store_that_cannot_take_the_release_row_publishes_nothing(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    _accept(run, CHILD_IDS[0])
    db = sqlite3.connect(run / "store.db")  # the store refuses the row (as a full disk or a read-only file would)
    db.execute("create trigger no_release before insert on release begin select raise(abort, 'no room'); end")
    db.commit()
    root = tmp_path / "releases" / "aime24"
    with pytest.raises(Exception, match="no room"):
        from benchfill.release import release

        release(run, "1.0.0")
    _no_release_published(root)
    db.execute("drop trigger no_release")
    db.commit()
    db.close()
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    assert main(["release", "verify", str(root / "1.0.0"), "--run", str(run)]) == 0
