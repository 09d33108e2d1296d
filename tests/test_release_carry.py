"""Releases behave like datasets: one shared cache, carried-forward items, world-readable files, README example."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main
from benchfill.errors import ConfigError
from benchfill.release import diff_releases, release, verify_release
from benchfill.review import ReleaseRule, ReviewBoard
from benchfill.store import Store

ROOT = Path(__file__).resolve().parent.parent


def _rename_benchmark(run: Path, name: str) -> None:
    store = Store(run / "store.db")
    try:
        store.set_meta("benchmark", {"name": name, "text_field": "problem", "answer_field": "answer"})
    finally:
        store.close()


def test_same_version_of_different_releases_load_their_own_rows_from_one_cache(tmp_path, shared_data):
    import datasets

    # conftest points HF_HOME at a temp folder for the whole test process
    assert datasets.config.HF_DATASETS_CACHE.as_posix().startswith(tempfile.gettempdir())
    a = make_run(tmp_path / "a", shared_data)
    with ReviewBoard(a) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    b_run = make_run(tmp_path / "b", shared_data)
    _rename_benchmark(b_run, "aime24-hard")
    with ReviewBoard(b_run) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
        b.decide(CHILD_IDS[2], "ann", "accept")
    c = make_run(tmp_path / "c", shared_data)  # the same benchmark and version in another root
    with ReviewBoard(c) as b:
        b.decide(CHILD_IDS[3], "ann", "accept")
    paths = [release(a, "1.0.0").path, release(b_run, "1.0.0").path, release(c, "1.0.0", out=tmp_path / "other").path]
    assert [p.name for p in paths] == ["1.0.0"] * 3
    want = [{CHILD_IDS[0]}, {CHILD_IDS[1], CHILD_IDS[2]}, {CHILD_IDS[3]}]
    for _ in range(2):  # the second pass reads from the cache the first one filled
        for path, gen in zip(paths, want, strict=True):
            ds = datasets.load_dataset(str(path), split="test")
            assert {r["id"] for r in ds if r["origin"] == "generated"} == gen, path
            assert ds.num_rows == 30 + len(gen)


def test_next_release_carries_forward_accepted_items_unless_a_reviewer_removes_them(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
        b.decide(CHILD_IDS[1], "ann", "accept")
        b.decide(CHILD_IDS[2], "ann", "accept")
        b.decide(CHILD_IDS[3], "ann", "accept")
        b.decide(CHILD_IDS[3], "bob", "reject", reason="close to its parent")
    v1 = release(run, "1.0.0", rule=ReleaseRule(max_rejects=1))
    assert sorted(v1.added) == sorted(CHILD_IDS) and v1.carried == []

    # A later run on the same benchmark, with nothing reviewed: 1.1.0 still holds 1.0.0's items.
    later = make_run(tmp_path, shared_data, run_id="run-later")
    v11 = release(later, "1.1.0")
    assert v11.n_generated == 4 and sorted(v11.carried) == sorted(CHILD_IDS) and v11.added == []
    d = diff_releases(v1.path, v11.path)
    assert (d.added, d.removed, d.changed) == ([], [], {})
    assert verify_release(v11.path) == []

    # Back on the first run: a reviewer rejects one item after 1.0.0, another edits one, one is removed
    # by hand. Item 3 (rejected before 1.0.0, released under that rule) stays under the stricter rule.
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "cy", "reject", reason="answer is wrong")
        b.decide(CHILD_IDS[2], "ann", "edit", text="Edited: find y.", answer="7")
    v12 = release(run, "1.2.0", remove={CHILD_IDS[1]: "dee: duplicate of an AIME 2023 problem"})
    assert sorted(v12.removed) == sorted([CHILD_IDS[0], CHILD_IDS[1]])
    assert v12.carried == [CHILD_IDS[3]] and v12.changed == {CHILD_IDS[2]: ["answer", "problem"]}
    d = diff_releases(v11.path, v12.path)
    assert d.removed == sorted([CHILD_IDS[0], CHILD_IDS[1]]) and d.changed == {CHILD_IDS[2]: ["answer", "problem"]}
    log = (v12.path / "CHANGELOG.md").read_text()
    entry = log.split("### 1.2.0", 1)[1].split("### 1.1.0", 1)[0]
    assert f"removed `{CHILD_IDS[0]}` (rejected by cy: answer is wrong)" in entry
    assert f"removed `{CHILD_IDS[1]}` (dee: duplicate of an AIME 2023 problem)" in entry
    assert f"changed `{CHILD_IDS[2]}` (answer, problem)" in entry
    assert f"carried forward from 1.1.0: `{CHILD_IDS[3]}`" in entry
    with pytest.raises(ConfigError, match="not a generated item of 1.2.0"):
        release(run, "1.3.0", remove={"nope": "x"})


def test_release_files_and_folders_are_world_readable(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    old = os.umask(0o077)  # the strictest usual umask: still publishable
    try:
        res = release(run, "1.0.0", out=tmp_path / "pub" / "releases")
    finally:
        os.umask(old)
    for p in [tmp_path / "pub", tmp_path / "pub" / "releases", *(tmp_path / "pub").rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        need = 0o755 if p.is_dir() else 0o644
        assert mode & need == need, (p, oct(mode))
    assert (res.path / "data" / "test.jsonl").is_file()


def test_readme_release_commands_run_as_written(tmp_path, shared_data, monkeypatch, capsys):
    lines = [ln.split("#", 1)[0].strip() for ln in (ROOT / "README.md").read_text().splitlines()]
    commands = [ln for ln in lines if ln.startswith("python -m benchfill release")]
    assert len(commands) >= 4 and any(" diff " in c for c in commands)
    monkeypatch.chdir(tmp_path)
    run = make_run(tmp_path / "runs", shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    for cmd in commands:
        argv = shlex.split(cmd.replace("<run-id>", run.name))[3:]
        assert main(argv) == 0, (cmd, capsys.readouterr().err)
    assert "1.0.0 -> 1.1.0" in capsys.readouterr().out


def test_cli_removes_an_item_with_the_reviewer_named(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
        b.decide(CHILD_IDS[1], "ann", "accept")
    assert main(["release", str(run), "--version", "1.0.0"]) == 0
    assert main(["release", str(run), "--version", "1.1.0", "--remove", CHILD_IDS[1]]) == 2
    assert "--remove needs --removed-by" in capsys.readouterr().err
    assert main(["release", str(run), "--version", "1.1.0", "--remove", CHILD_IDS[1], "--removed-by", "bob",
                 "--reason", "leaks the answer"]) == 0  # fmt: skip
    # item 0, released again by the same run, is carried forward and keeps its first release on record
    assert "1 carried forward, 1 removed, 0 changed" in capsys.readouterr().out
    v11 = tmp_path / "releases" / "aime24" / "1.1.0"
    rows = [json.loads(x) for x in (v11 / "data" / "test.jsonl").read_text().splitlines()]
    [kept] = [r for r in rows if r["origin"] == "generated"]
    assert kept["id"] == CHILD_IDS[0] and kept["released_in"] == "1.0.0"
    assert f"carried forward from 1.0.0: `{CHILD_IDS[0]}`" in (v11 / "CHANGELOG.md").read_text()
    assert f"removed `{CHILD_IDS[1]}` (bob: leaks the answer)" in (v11 / "CHANGELOG.md").read_text()
    assert main(["release", "diff", str(v11.parent / "1.0.0"), str(v11)]) == 0
    assert capsys.readouterr().out.splitlines() == ["1.0.0 -> 1.1.0: 0 added, 1 removed, 0 changed", f"- {CHILD_IDS[1]}"]


def test_every_cache_a_test_can_fill_is_a_temp_folder():
    import datasets
    import huggingface_hub.constants
    import matplotlib
    import platformdirs

    tmp = tempfile.gettempdir()
    for path in (os.environ["HF_HOME"], datasets.config.HF_DATASETS_CACHE, huggingface_hub.constants.HF_HUB_CACHE,
                 matplotlib.get_cachedir(), platformdirs.user_data_dir("inspect_ai")):  # fmt: skip
        assert str(path).startswith(tmp), path


def _two_runs_alike(tmp_path, shared_data):
    """Run a and run b, whose first child has one id and two texts, both accepted."""
    first = make_run(tmp_path, shared_data, "run-a")
    second = make_run(tmp_path, shared_data, "run-b")
    queue = second / "review_queue.jsonl"  # other items under the same ids
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    for r in recs:
        r["child"]["problem"] = "Run b asks: " + r["child"]["problem"]
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = Store(second / "store.db")  # the store's copy of the queue is what review reads first
    try:
        from benchfill.schema import Candidate

        with store.session() as s:
            for c in s.exec(store.select(Candidate)):
                if c.review_json:
                    rec = json.loads(c.review_json)
                    rec["child"]["problem"] = "Run b asks: " + rec["child"]["problem"]
                    c.review_json = json.dumps(rec)
                    s.add(c)
    finally:
        store.close()
    for run in (first, second):
        with ReviewBoard(run) as b:
            b.decide(CHILD_IDS[0], "ann", "accept")
    return first, second


def test_two_runs_that_name_their_items_alike_keep_both_items(tmp_path, shared_data):
    """Runs name children by gap, round, parent and child, so a second run on the benchmark names other
    items as the first did. Its release keeps the first run's items as carried and adds its own as
    ``<id>@<run>``; a later release from it finds them again there."""
    first, second = _two_runs_alike(tmp_path, shared_data)
    v1 = release(first, "1.0.0")
    v11 = release(second, "1.1.0")
    assert v11.carried == [CHILD_IDS[0]] and v11.changed == {} and v11.added == [f"{CHILD_IDS[0]}@run-b"]
    rows = {r["id"]: r for r in map(json.loads, (v11.path / "data" / "test.jsonl").read_text().splitlines())}
    mine, theirs = rows[f"{CHILD_IDS[0]}@run-b"], rows[CHILD_IDS[0]]
    assert mine["problem"].startswith("Run b asks: ") and not theirs["problem"].startswith("Run b")
    assert (mine["released_in"], mine["run_id"], theirs["released_in"], theirs["run_id"]) == (
        "1.1.0", "run-b", "1.0.0", "run-a")
    assert diff_releases(v1.path, v11.path).added == [f"{CHILD_IDS[0]}@run-b"]
    v12 = release(second, "1.2.0")  # released again by run b: found under its own id, first released in 1.1.0
    assert v12.added == [] and sorted(v12.carried) == sorted([CHILD_IDS[0], f"{CHILD_IDS[0]}@run-b"])
    rows = [json.loads(x) for x in (v12.path / "data" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == len({r["id"] for r in rows})
    assert {r["id"]: r["released_in"] for r in rows if r["origin"] == "generated"} == {
        CHILD_IDS[0]: "1.0.0", f"{CHILD_IDS[0]}@run-b": "1.1.0"}
    with ReviewBoard(second) as b:  # run b's later reject removes run b's item, not run a's of that name
        b.decide(CHILD_IDS[0], "cy", "reject", reason="wrong key")
    v13 = release(second, "1.3.0")
    assert list(v13.removed) == [f"{CHILD_IDS[0]}@run-b"] and v13.carried == [CHILD_IDS[0]]


def _gen(item_id: str, run: str, version: str, text: str = "q") -> dict:
    return {"id": item_id, "problem": text, "origin": "generated", "run_id": run, "released_in": version,
            "released_at": f"{version}T"}


def test_a_reused_child_is_the_item_its_run_released_not_a_second_copy():
    from benchfill.release import PROVENANCE
    from benchfill.release_carry import carry_forward

    # Run B reused run A's child "bf-g0" (B names it "bf-g0@A"); A released it as "bf-g0" in 1.0.0.
    prev = {"bf-g0": _gen("bf-g0", "A", "1.0.0"), "bf-g1": _gen("bf-g1", "A", "1.0.0", "other")}
    rows = [_gen("bf-g0@A", "B", "1.1.0"), _gen("bf-g0@B", "B", "1.1.0", "B's own")]  # (after _own_ids)
    carry = carry_forward(rows, prev, "1.0.0", None, {}, {}, PROVENANCE, "B")
    ids = sorted(r["id"] for r in rows)
    assert ids == ["bf-g0", "bf-g0@B", "bf-g1"], ids
    mine = [r for r in rows if r["id"] == "bf-g0" and r["run_id"] == "A"]
    assert len(mine) == 1 and mine[0]["released_in"] == "1.0.0"
    assert carry.aliases == {"bf-g0@A": "bf-g0"} and sorted(carry.carried) == ["bf-g0", "bf-g1"]
    # A reviewer's removal of the released item removes the reused copy too.
    rows = [_gen("bf-g0@A", "B", "1.1.0")]
    carry = carry_forward(rows, prev, "1.0.0", None, {}, {"bf-g0": "ann: wrong key"}, PROVENANCE, "B")
    assert [r["id"] for r in rows] == ["bf-g1"] and list(carry.removed) == ["bf-g0"]


def test_a_run_released_after_one_that_reused_its_child_ships_it_once():
    from benchfill.release import PROVENANCE
    from benchfill.release_carry import carry_forward

    prev = {"bf-g0@A": _gen("bf-g0@A", "B", "1.0.0")}  # B released A's child first
    rows = [_gen("bf-g0", "A", "1.1.0")]
    carry = carry_forward(rows, prev, "1.0.0", None, {}, {}, PROVENANCE, "A")
    assert [(r["id"], r["released_in"]) for r in rows] == [("bf-g0@A", "1.0.0")]
    assert carry.aliases == {"bf-g0": "bf-g0@A"} and carry.carried == ["bf-g0@A"]


def test_a_run_keeps_the_name_it_was_released_under_when_the_clash_is_removed(tmp_path, shared_data):
    """Run a's item removed, its name is free again; run b's item of that name keeps "<id>@run-b", the name
    it was released under (it came back as a second copy under the bare id, beside the carried one)."""
    first, second = _two_runs_alike(tmp_path, shared_data)
    release(first, "1.0.0")
    release(second, "1.1.0")
    freed = release(second, "1.2.0", remove={CHILD_IDS[0]: "x: a duplicate"})
    again = release(second, "1.3.0")
    assert freed.removed == [CHILD_IDS[0]] and again.added == [] and again.carried == [f"{CHILD_IDS[0]}@run-b"]
    ids = [r["id"] for r in map(json.loads, (again.path / "data" / "test.jsonl").read_text().splitlines())]
    assert CHILD_IDS[0] not in ids and len(ids) == len(set(ids))


def test_a_run_folder_renamed_between_releases_is_still_the_run_that_made_them(tmp_path, shared_data):
    # The run's name in releases was its folder's name at each release: renamed, its item came back as a
    # second copy ("<id>@<new name>"), and an item removed from a release came back as newly accepted.
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        for cid in CHILD_IDS:
            b.decide(cid, "ann", "accept")
    v1 = release(run, "1.0.0")
    v11 = release(run, "1.1.0", remove={CHILD_IDS[0]: "bob: wrong key"})
    assert sorted(v1.added) == sorted(CHILD_IDS) and v11.removed == [CHILD_IDS[0]]
    moved = run.rename(tmp_path / "aime24-v1")
    v12 = release(moved, "1.2.0")
    rows = [json.loads(x) for x in (v12.path / "data" / "test.jsonl").read_text().splitlines()]
    generated = sorted(r["id"] for r in rows if r["origin"] == "generated")
    assert generated == sorted(CHILD_IDS[1:]) and v12.added == [] and v12.n_generated == 3
    assert {r["run_id"] for r in rows} == {"run-aime24-test"}  # the name it was made and first released under
    assert f"`{CHILD_IDS[0]}` stays removed" in (v12.path / "CHANGELOG.md").read_text()


def test_a_moved_project_still_checks_the_previous_release_against_the_run_that_made_it(tmp_path, shared_data):
    # The store records a release by its absolute path: moved with its runs, the "rewritten" check stopped
    # without a word, and `release verify --run` said the store recorded no release there.
    from benchfill.release import manifest_sha256, recorded_sha256

    run = make_run(tmp_path / "p1", shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    release(run, "1.0.0")
    (tmp_path / "p1").rename(tmp_path / "p2")
    run, prev = tmp_path / "p2" / run.name, tmp_path / "p2" / "releases" / "aime24" / "1.0.0"
    assert recorded_sha256(prev, run) == manifest_sha256(prev)
    manifest = prev / "manifest.json"
    os.chmod(manifest, 0o644)
    manifest.write_text(manifest.read_text() + " ")  # rewritten: its files still match what it lists
    with pytest.raises(Exception, match=r"not the manifest this run recorded for 1\.0\.0 \(rewritten\)"):
        release(run, "1.1.0")


def test_an_item_removed_from_a_release_is_shown_removed_until_accepted_again(tmp_path, shared_data):
    import csv

    import httpx

    from benchfill.review import export_queue
    from benchfill.review.server import ReviewServer

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "frank", "edit", answer="78")
        b.decide(CHILD_IDS[1], "frank", "accept")
    release(run, "1.0.0")
    release(run, "1.2.0", remove={CHILD_IDS[0]: "dave: a duplicate"})
    with ReviewBoard(run) as b:
        gone = b.removed()
        assert list(gone) == [CHILD_IDS[0]] and "removed from release 1.2.0 (dave: a duplicate)" in gone[CHILD_IDS[0]]
        assert b.outcome_of(CHILD_IDS[0]).status == "accepted"  # the rule alone still passes it
    with ReviewServer(run) as srv:
        page = httpx.get(f"http://127.0.0.1:{srv.port}/item/{CHILD_IDS[0]}?token={srv.token}").text
        assert "<span class='status-removed'>removed</span> removed from release 1.2.0" in page
        assert "Kept out of releases (removed), as edited by frank" in page and "To be released" not in page
        queue = httpx.get(srv.url).text
        assert "1 accepted" in queue and "1 removed" in queue
    export_queue(run, tmp_path / "sheet")
    with (tmp_path / "sheet" / "review_queue.csv").open(encoding="utf-8-sig") as fh:
        status = {r["item_id"]: r["status"] for r in csv.DictReader(fh)}
    assert status[CHILD_IDS[0]].startswith("removed: removed from release 1.2.0") and status[CHILD_IDS[1]] == "accepted"
    # the editor accepts it again: back, with the edit (an accept after one's own edit keeps it)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "frank", "accept")
        assert b.removed() == {} and b.outcome_of(CHILD_IDS[0]).edited_fields is not None
    v13 = release(run, "1.3.0")
    rows = [json.loads(x) for x in (v13.path / "data" / "test.jsonl").read_text().splitlines()]
    back = next(r for r in rows if r["id"] == CHILD_IDS[0])
    assert back["edited"] is True and str(back["answer"]) == "78"


def test_a_removal_by_another_runs_release_shows_and_an_accept_given_again_brings_it_back(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _two_accepted_and_released(run)
    later = make_run(tmp_path, shared_data, run_id="run-later")  # another run of the benchmark, same releases
    release(later, "1.1.0", remove={CHILD_IDS[1]: "dave: a duplicate"})
    with ReviewBoard(run) as b:
        assert list(b.removed()) == [CHILD_IDS[1]] and "removed from release 1.1.0" in b.removed()[CHILD_IDS[1]]
        # frank accepts it again: recorded (it had been taken for a repeat of his accept and swallowed)
        again = b.decide(CHILD_IDS[1], "frank", "accept")
        assert len(b.decisions(CHILD_IDS[1])) == 2 and again.id == b.decisions(CHILD_IDS[1])[1].id
        assert b.removed() == {}
        assert b.decide(CHILD_IDS[1], "frank", "accept").id == again.id  # and once only


def test_a_release_after_an_upgrade_names_the_items_the_new_reading_of_decisions_moves(tmp_path, shared_data):
    # decisions an earlier benchfill read otherwise: alice edits, bob accepts, alice accepts (her edit had
    # dropped out of force), and 1.0.0 made then; the next release names what this benchfill reads otherwise
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "alice", "edit", answer="78")
        b.decide(CHILD_IDS[0], "bob", "accept")
        b.decide(CHILD_IDS[0], "alice", "accept")
        b.decide(CHILD_IDS[1], "ann", "accept")
    v1 = release(run, "1.0.0")
    manifest = json.loads((v1.path / "manifest.json").read_text())
    assert manifest["review_rule_version"] == 2
    del manifest["review_rule_version"]  # as a release made before the reading changed
    (v1.path / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    import hashlib

    from benchfill.schema import Release

    with ReviewBoard(run) as b, b.store.session() as s:  # and its sha256 in the store, as that release recorded it
        row = s.exec(b.store.select(Release)).one()
        row.manifest_sha256 = hashlib.sha256((v1.path / "manifest.json").read_bytes()).hexdigest()
        s.add(row)
        s.commit()
    v2 = release(run, "1.1.0")
    entry = (v2.path / "CHANGELOG.md").read_text().split("### 1.1.0", 1)[1].split("### 1.0.0", 1)[0]
    assert (f"1 item(s) stand otherwise on the decisions 1.0.0 was made from: `{CHILD_IDS[0]}` "
            "(accepted -> accepted, another edit in force)") in entry
    v3 = release(run, "1.2.0")  # made under this reading: nothing to say
    assert "stand otherwise" not in (v3.path / "CHANGELOG.md").read_text().split("### 1.1.0", 1)[0]


def test_a_sheet_exported_before_a_removal_cannot_bring_the_item_back_unseen(tmp_path, shared_data):
    import csv

    from benchfill.errors import DataError
    from benchfill.review import export_queue, import_decisions

    run = make_run(tmp_path, shared_data)
    _two_accepted_and_released(run)
    _, sheet = export_queue(run, tmp_path / "sheet")  # exported before the removal

    def filled(name: str, who: str) -> Path:
        rows = list(csv.DictReader(sheet.open(encoding="utf-8-sig")))
        row = next(r for r in rows if r["item_id"] == CHILD_IDS[1])
        row.update(reviewer=who, decision="accept")
        out = tmp_path / name
        _write_sheet(out, rows)
        return out

    frank, carol = filled("frank.csv", "frank"), filled("carol.csv", "carol")
    release(run, "1.1.0", remove={CHILD_IDS[1]: "dave: a duplicate"})
    # frank's row repeats the accept he made before the removal, which his sheet never showed: nothing recorded
    assert import_decisions(run, frank) == 0
    # carol's is new, made on the item as it stood before: refused, as a row on an item edited since is
    with pytest.raises(DataError, match="was removed from a release .* after this sheet was exported"):
        import_decisions(run, carol)
    with ReviewBoard(run) as b:
        assert list(b.removed()) == [CHILD_IDS[1]]
    # a fresh sheet shows the removal, and an accept on it brings the item back
    _, fresh = export_queue(run, tmp_path / "fresh")
    rows = list(csv.DictReader(fresh.open(encoding="utf-8-sig")))
    row = next(r for r in rows if r["item_id"] == CHILD_IDS[1])
    assert row["status"].startswith("removed: ")
    row.update(reviewer="carol", decision="accept")
    _write_sheet(fresh, rows)
    assert import_decisions(run, fresh) == 1
    with ReviewBoard(run) as b:
        assert b.removed() == {}


def test_a_removal_is_found_after_the_project_moved_and_a_releases_staging_folder_is_none(tmp_path, shared_data):
    run = make_run(tmp_path / "proj", shared_data)
    _two_accepted_and_released(run)
    release(run, "1.1.0", remove={CHILD_IDS[1]: "dave: a duplicate"})
    bench = tmp_path / "proj" / "releases" / "aime24"
    # a release killed while building leaves its staging folder, manifest and all: no release of 1.2.0
    staged = bench / ".1.2.0.kl8_42gm.tmp"
    shutil.copytree(bench / "1.1.0", staged)
    manifest = json.loads((staged / "manifest.json").read_text())
    manifest.update(version="1.2.0", released_at_us="2999-01-01T00:00:00.000000+00:00", removed={})
    (staged / "manifest.json").write_text(json.dumps(manifest))
    with ReviewBoard(run) as b:
        assert list(b.removed()) == [CHILD_IDS[1]]
    (tmp_path / "proj").rename(tmp_path / "moved")  # the store records the old path; the release looks beside
    with ReviewBoard(tmp_path / "moved" / run.name) as b:
        assert list(b.removed()) == [CHILD_IDS[1]]
        again = b.decide(CHILD_IDS[1], "frank", "accept")  # recorded: it brings the item back
        assert len(b.decisions(CHILD_IDS[1])) == 2 and again.id == b.decisions(CHILD_IDS[1])[1].id


def test_the_upgrade_note_names_only_the_items_the_previous_release_read_and_none_decided_since(tmp_path, shared_data):
    import hashlib

    from benchfill.schema import Release

    def as_old(run, res):  # a release made before the reading changed: no review_rule_version
        manifest = json.loads((res.path / "manifest.json").read_text())
        del manifest["review_rule_version"]
        (res.path / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        with ReviewBoard(run) as b, b.store.session() as s:
            row = next(r for r in s.exec(b.store.select(Release)) if Path(r.path) == res.path.resolve())
            row.manifest_sha256 = hashlib.sha256((res.path / "manifest.json").read_bytes()).hexdigest()
            s.add(row)
            s.commit()

    def read_otherwise(run):
        with ReviewBoard(run) as b:
            for item in CHILD_IDS[:2]:
                b.decide(item, "alice", "edit", answer="78")
                b.decide(item, "bob", "accept")
                b.decide(item, "alice", "accept")

    a = make_run(tmp_path, shared_data, "run-a")
    read_otherwise(a)
    as_old(a, release(a, "1.0.0", out=tmp_path / "one"))
    as_old(a, release(a, "1.0.1", out=tmp_path / "two"))
    # another run's release after it: 1.0.0 read none of its decisions
    b_run = make_run(tmp_path, shared_data, "run-b")
    read_otherwise(b_run)
    log = (release(b_run, "1.1.0", out=tmp_path / "one").path / "CHANGELOG.md").read_text().split("### 1.0.0", 1)[0]
    assert "stand otherwise" not in log
    # the run that made it, one of its two items decided again since: only the other is named
    with ReviewBoard(a) as b:
        b.decide(CHILD_IDS[1], "cy", "reject", reason="wrong")
    log = (release(a, "1.1.0", out=tmp_path / "two").path / "CHANGELOG.md").read_text().split("### 1.0.1", 1)[0]
    assert f"1 item(s) stand otherwise on the decisions 1.0.1 was made from: `{CHILD_IDS[0]}`" in log


def _two_accepted_and_released(run: Path) -> None:
    """frank accepts the first two items, and release 1.0.0 ships them."""
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "frank", "accept")
        b.decide(CHILD_IDS[1], "frank", "accept")
    release(run, "1.0.0")


def _write_sheet(path: Path, rows: list[dict]) -> None:
    import csv

    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
