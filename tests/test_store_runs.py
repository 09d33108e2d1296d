"""Several runs in one store: each run's rows carry its id, a handle sees its own run, the call
cache is shared; a store from before (one run, no run ids) is upgraded with its rows kept."""

from __future__ import annotations

import sqlite3
import time

import pytest
from pg_server import postgres_url
from sqlalchemy import text

from benchfill.cli import main
from benchfill.schema import Candidate, GapState, ModelCall, ProbeResult
from benchfill.store import SCHEMA_VERSION, Store, open_run_store


def _candidate(run_id: str, cid: str, z: float) -> Candidate:
    return Candidate(run_id=run_id, id=cid, gap_index=0, round=1, parent_id="p", target_z=0.5, z=z)


def test_two_runs_keep_their_own_rows_in_one_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = Store(url, run_id="a"), Store(url, run_id="b")
    a.set_meta("seed", 1)
    b.set_meta("seed", 2)
    with a.session() as s:  # the same child id in both runs: child ids are per run
        s.add(_candidate("a", "bf-g0-r1-p0-c0", 0.1))
        s.add(ModelCall(key="k1", kind="probe"))
    with b.session() as s:
        s.add(_candidate("b", "bf-g0-r1-p0-c0", 0.9))
    assert (a.get_meta("seed"), b.get_meta("seed")) == (1, 2)
    assert [c.z for c in a.all(Candidate)] == [0.1] and [c.z for c in b.all(Candidate)] == [0.9]
    with b.session() as s:
        assert b.get(s, Candidate, "bf-g0-r1-p0-c0").z == 0.9
    assert [m.key for m in b.all(ModelCall)] == ["k1"]  # the cache is everyone's
    a.close()
    b.close()


def test_a_version_2_store_is_upgraded_to_the_run_that_opens_it(tmp_path):
    db = tmp_path / "s.db"
    with sqlite3.connect(db) as con:  # the version-2 tables this migration touches, one row each
        con.execute("create table schemaversion (id integer primary key, version integer)")
        con.execute("insert into schemaversion values (1, 2)")
        con.execute("create table runmeta (key varchar primary key, value_json varchar)")
        con.execute("insert into runmeta values ('seed', '7')")
        con.execute("create table gapstate (gap_index integer primary key, left float, right float, target_z float, "
                    "status varchar, rounds_used integer, chosen_id varchar, state_json varchar)")
        con.execute("insert into gapstate values (0, 0.1, 0.3, 0.2, 'done', 4, 'c1', '{}')")
        con.execute("create table proberesult (id integer primary key, item_id varchar, probe varchar, correct integer, "
                    "trials integer, phase varchar, call_key varchar, created_at datetime)")
        con.execute("create index ix_proberesult_item_id on proberesult (item_id)")
        con.execute("insert into proberesult values (5, 'c1', 'p1', 3, 8, 'annotate', 'k', '2026-01-01')")
    s = Store(db, run_id="old-run")
    assert s.schema_version == SCHEMA_VERSION and s.get_meta("seed") == 7
    with s.session() as ses:
        assert s.get(ses, GapState, 0).chosen_id == "c1"
        ses.add(ProbeResult(run_id="old-run", item_id="c2", probe="p1", correct=1, trials=8))
    assert sorted((r.id, r.item_id) for r in s.all(ProbeResult)) == [(5, "c1"), (6, "c2")]
    s.close()
    assert Store(db, run_id="another").get_meta("seed") is None


def test_runs_named_to_one_store_url_stay_apart_and_remember_their_id(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    common = ["run", "--benchmark", "demo", "--backend", "sim", "--runs-dir", str(tmp_path / "runs"), "--gaps", "1",
              "--rounds", "1", "--parents", "2", "--children", "2", "--quiet", "--store", url]  # fmt: skip
    assert main([*common, "--run-id", "one", "--seed", "1"]) == 0
    assert main([*common, "--run-id", "two", "--seed", "2"]) == 0
    one, two = tmp_path / "runs" / "one", tmp_path / "runs" / "two"
    assert (one / "store.url").read_text().split() == [url, "one"]
    s1, s2 = open_run_store(one), open_run_store(two)
    assert (s1.get_meta("seed"), s2.get_meta("seed")) == (1, 2)
    assert {c.id for c in s1.all(Candidate)} and all(c.run_id == "one" for c in s1.all(Candidate))
    s1.close()
    s2.close()
    for run in (one, two):  # each run's review reads its own queue
        assert main(["review", "export", str(run)]) == 0


def test_a_remembered_sqlite_store_that_is_gone_is_refused_not_made_again(tmp_path, capsys):
    # A moved shared store (or a disk not mounted): review and release would otherwise open a new, empty
    # file and record the reviewer's decisions there, lost once the real one is back.
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    run = tmp_path / "runs" / "r1"
    common = ["run", "--benchmark", "demo", "--backend", "sim", "--runs-dir", str(tmp_path / "runs"), "--gaps", "1",
              "--rounds", "1", "--parents", "2", "--children", "2", "--quiet", "--store", url, "--run-id", "r1"]  # fmt: skip
    assert main(common) == 0
    (tmp_path / "shared.db").rename(tmp_path / "moved.db")
    capsys.readouterr()
    for argv in (["review", "export", str(run)], ["release", str(run), "--version", "1.0.0"], common):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"(named in {run / 'store.url'}): {tmp_path / 'shared.db'}: no such file" in err
        assert not (tmp_path / "shared.db").exists()
    (tmp_path / "moved.db").rename(tmp_path / "shared.db")  # put back: all is as it was
    assert main(["review", "export", str(run)]) == 0


def test_a_remembered_url_from_before_keeps_the_directory_name_as_run_id(tmp_path):
    run = tmp_path / "runs" / "legacy"
    run.mkdir(parents=True)
    Store(f"sqlite:///{tmp_path / 's.db'}").close()  # the store the run wrote to (a missing one is refused)
    (run / "store.url").write_text(f"sqlite:///{tmp_path / 's.db'}\n")
    s = open_run_store(run)
    assert s.run_id == "legacy"
    s.close()
    (run / "store.url").write_text("\n")
    with pytest.raises(Exception, match="store.url: empty"):
        open_run_store(run)


def _back_to_version_2(url: str, *sql: str) -> None:
    """A new store at ``url`` made to look as version 2 left it: ``sql`` run, then the version set back."""
    s = Store(url)
    with s.engine.begin() as con:
        for statement in (*sql, "update schemaversion set version = 2"):
            con.execute(text(statement))
    s.close()


def test_the_upgrade_moves_postgresql_id_sequences_past_the_copied_rows(tmp_path):
    with postgres_url() as url:
        _back_to_version_2(  # a version-2 proberesult with two rows
            url, "drop table proberesult",
            "create table proberesult (id serial primary key, item_id varchar, probe varchar, correct integer, "
            "trials integer, phase varchar, call_key varchar, created_at timestamp)",
            "insert into proberesult (item_id, probe, correct, trials, phase, call_key, created_at) "
            "values ('a', 'p', 1, 2, 'annotate', 'k', now()), ('b', 'p', 1, 2, 'annotate', 'k', now())")
        s = Store(url, run_id="r")
        with s.session() as ses:
            ses.add(ProbeResult(run_id="r", item_id="c", probe="p", correct=0, trials=2))
        assert sorted((r.id, r.item_id) for r in s.all(ProbeResult)) == [(1, "a"), (2, "b"), (3, "c")]
        s.close()


def test_processes_opening_a_new_postgresql_store_at_once_all_succeed():
    """The tasks of a sweep may open a new store together: the upgrade holds a lock, so none fails
    creating a table another is creating."""
    import multiprocessing as mp

    with postgres_url() as url:
        with mp.get_context("spawn").Pool(4) as pool:
            versions = pool.map(_open_version, [url] * 8)
        assert versions == [SCHEMA_VERSION] * 8


def _open_version(url: str) -> int:
    s = Store(url, run_id="r")
    s.close()
    return s.schema_version


def test_a_version_2_postgresql_store_with_text_ids_is_upgraded():
    """Item's and Candidate's ids are text: the upgrade moves no sequence for them (there is none)."""
    with postgres_url() as url:
        _back_to_version_2(  # the version-2 item and candidate tables, one row each
            url, "drop table candidate", "drop table item",
            "create table item (id varchar primary key, origin varchar, data_json varchar, parent_id varchar, "
            "created_at timestamp)",
            "insert into item values ('c1', 'generated', '{}', 'p', now())",
            "create table candidate (id varchar primary key, gap_index integer, round integer, parent_id varchar, "
            "target_z float, z float, valid boolean, review_json varchar)",
            "insert into candidate (id, gap_index, round, parent_id, target_z, z) values ('c1', 0, 1, 'p', 0.5, 0.4)")
        s = Store(url, run_id="old-run")
        assert s.schema_version == SCHEMA_VERSION
        assert [(c.run_id, c.id, c.z) for c in s.all(Candidate)] == [("old-run", "c1", 0.4)]
        s.close()


_HOLDER = """
import sys, time
from benchfill.store import Store
s = Store(sys.argv[1], run_id=sys.argv[3])
let_go = s.hold_run(exclusive=sys.argv[2] == "x")
print("held", flush=True)
sys.stdin.readline()  # hold until the test says
let_go()
print("let go", flush=True)
sys.stdin.readline()
"""


def _holder(url: str, how: str, run_id: str = "r1"):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", _HOLDER, url, how, run_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def _check_hold_run(url: str) -> None:
    """One run id held by two processes: an exclusive hold shuts the other out either way, shared holds
    (a sweep's units) go together, another run id is free, and letting go frees it."""
    from benchfill.errors import ConfigError

    here, other = Store(url, run_id="r1"), Store(url, run_id="r2")
    p = _holder(url, "x")
    try:
        for exclusive in (True, False):
            with pytest.raises(ConfigError, match=r"^run r1 is in progress in another process on store .*another --run-id"):
                here.hold_run(exclusive=exclusive)
        other.hold_run()()  # another run on the same store
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "let go"
        here.hold_run()()  # free once let go (the holder still runs)
    finally:
        p.kill()
        p.wait()
    p = _holder(url, "s")
    try:
        here.hold_run(exclusive=False)()
        with pytest.raises(ConfigError, match="in progress"):
            here.hold_run()
    finally:
        p.kill()  # killed, not let go: the lock goes with it
        p.wait()
    # PostgreSQL drops a dead client's session lock once its backend sees the socket closed: at once on an idle
    # machine, a moment after the client's exit on a loaded one (CI's two test workers: refused once). So the
    # test waits for it, within a bound; a lock that outlived its process would still fail here.
    deadline = time.monotonic() + 10
    while True:
        try:
            here.hold_run()()
            break
        except ConfigError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    here.close()
    other.close()


def test_one_run_id_is_held_by_one_process_at_a_time_on_a_shared_sqlite_store(tmp_path):
    _check_hold_run(f"sqlite:///{tmp_path / 'shared.db'}")


def test_one_run_id_is_held_by_one_process_at_a_time_on_a_postgresql_store():
    with postgres_url() as url:
        _check_hold_run(url)


def test_the_same_run_from_two_folders_on_one_store_is_refused_while_the_first_works(tmp_path, capsys):
    """The run directory's lock cannot see another folder; the store's hold of the run id can."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    args = ["run", "--benchmark", "demo", "--gaps", "1", "--rounds", "1", "--sim-probes", "4", "--quiet", "--store", url]
    assert main([*args, "--runs-dir", str(tmp_path / "a")]) == 0
    (run_dir,) = (tmp_path / "a").iterdir()
    p = _holder(url, "x", run_dir.name)  # the same command at work in folder a
    try:
        capsys.readouterr()
        assert main([*args, "--runs-dir", str(tmp_path / "b")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"run {run_dir.name} is in progress in another process" in err[0], err
        assert not (tmp_path / "b" / run_dir.name).exists()  # the folder it made holds nothing: it goes
    finally:
        p.kill()
        p.wait()
    assert main([*args, "--runs-dir", str(tmp_path / "b")]) == 0  # once it is done: restored from the store
    assert (tmp_path / "b" / run_dir.name / "report.json").read_text() != ""


def test_a_store_that_cannot_be_opened_leaves_no_run_folder(tmp_path, capsys):
    bad = tmp_path / "notadb.txt"
    bad.write_text("not a database\n" * 100)
    args = ["run", "--benchmark", "demo", "--gaps", "1", "--quiet", "--runs-dir", str(tmp_path / "runs"),
            "--store", f"sqlite:///{bad}"]
    assert main(args) == 2
    assert "cannot open store" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # nor the runs dir it made
