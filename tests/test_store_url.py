"""A run's store at a SQLAlchemy URL instead of runs/<id>/store.db; review finds it again."""

import sqlite3

import pytest

from benchfill.cli import main
from benchfill.errors import ConfigError
from benchfill.store import open_run_store


def test_run_writes_to_the_given_store_url_and_review_follows_it(tmp_path):
    runs, db = tmp_path / "runs", tmp_path / "elsewhere" / "bf.db"
    db.parent.mkdir()
    url = f"sqlite:///{db}"
    args = ["run", "--benchmark", "demo", "--backend", "sim", "--runs-dir", str(runs), "--run-id", "r",
            "--gaps", "1", "--rounds", "1", "--parents", "2", "--children", "2", "--quiet", "--store", url]  # fmt: skip
    assert main(args) == 0
    run = runs / "r"
    assert not (run / "store.db").exists()
    assert (run / "store.url").read_text().split() == [url, "r"]  # the URL and the run id the rows carry
    with sqlite3.connect(db) as con:
        (n_items,) = con.execute("select count(*) from item where origin = 'original'").fetchone()
        (n_calls,) = con.execute("select count(*) from modelcall").fetchone()
    assert n_items == 48 and n_calls > 0
    assert main(["review", "export", str(run)]) == 0  # opens the store through store.url
    assert (run / "review" / "review_queue.csv").is_file()


def test_a_password_in_the_store_url_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(ConfigError, match="carries a password.*PGPASSWORD"):
        open_run_store(tmp_path / "run", "postgresql+psycopg://alice:s3cret@db.example/bench")
    assert not (tmp_path / "run").exists()


def test_a_run_keeps_the_store_it_started_with(tmp_path):
    first = f"sqlite:///{tmp_path / 'a.db'}"
    open_run_store(tmp_path / "run", first).close()
    with pytest.raises(ConfigError, match="already uses another store"):
        open_run_store(tmp_path / "run", f"sqlite:///{tmp_path / 'b.db'}")
    store = open_run_store(tmp_path / "run")  # no URL: the remembered one
    assert store.url == first
    store.close()


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://alice@db.example/bench?password=s3cret-q",
    "postgresql+psycopg:///bench?host=db.example&port=5432&user=alice&password=s3cret-q",
    "postgresql+psycopg://alice@db.example/bench?sslmode=require&sslpassword=s3cret-q",
])
def test_a_password_in_the_query_string_is_refused_as_one_in_the_user_info(tmp_path, url):
    with pytest.raises(ConfigError, match="^--store: the URL carries a password; .*PGPASSWORD") as err:
        open_run_store(tmp_path / "run", url)
    assert "s3cret" not in str(err.value)
    assert not (tmp_path / "run").exists()  # no store.url holds it


def test_store_urls_in_messages_hide_their_password_and_query_secrets(tmp_path):
    from types import SimpleNamespace

    from benchfill.errors import DataError
    from benchfill.review.queue import _from_store
    from benchfill.store import Store

    for url in ("postgresql+psycopg://alice@127.0.0.1:1/bench?password=s3cret-q&sslmode=disable",
                "postgresql+psycopg://alice:s3cret-u@127.0.0.1:1/bench"):
        with pytest.raises(ConfigError, match="^cannot open store postgresql") as err:  # nothing listens on port 1
            Store(url)
        assert "s3cret" not in str(err.value) and "***" in str(err.value)
    # a store.url written before query-string passwords were refused is never shown as it is
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "store.url").write_text("postgresql+psycopg://alice@db.example/bench?password=s3cret-old\nr\n")
    with pytest.raises(ConfigError, match="already uses another store") as err:
        open_run_store(tmp_path / "run", f"sqlite:///{tmp_path / 'b.db'}")
    assert "s3cret" not in str(err.value)
    row = SimpleNamespace(id="c1", gap_index=0, review_json="{not json")
    store = SimpleNamespace(url="postgresql+psycopg://alice@db.example/bench?password=s3cret-q", all=lambda *a: [row])
    with pytest.raises(DataError, match=r"^store postgresql\+psycopg://alice@db.example/bench\?password=\*\*\*: ") as err:
        _from_store(store)
    assert "s3cret" not in str(err.value)


def test_a_relative_sqlite_url_is_remembered_as_the_absolute_file(tmp_path, monkeypatch):
    """sqlite:///shared.db names a file in the current directory: review and release, run from another,
    must find that file, not create an empty one where they are."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "proj")
    store = open_run_store(tmp_path / "runs" / "r", "sqlite:///shared.db")
    store.set_meta("seed", 7)
    store.close()
    assert (tmp_path / "runs" / "r" / "store.url").read_text().split() == [f"sqlite:///{tmp_path}/proj/shared.db", "r"]
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = open_run_store(tmp_path / "runs" / "r")
    assert again.get_meta("seed") == 7
    again.close()
    assert list((tmp_path / "elsewhere").iterdir()) == []
    # given again from the project's folder, the same URL is the same store
    monkeypatch.chdir(tmp_path / "proj")
    open_run_store(tmp_path / "runs" / "r", "sqlite:///shared.db").close()


def test_a_store_url_given_to_a_run_that_has_its_own_store_is_refused(tmp_path):
    """Starting over into the named store would hide the run's own gaps and review decisions."""
    (tmp_path / "run").mkdir()
    own = open_run_store(tmp_path / "run")
    own.set_meta("seed", 7)
    own.close()
    with pytest.raises(ConfigError, match=r"store\.db: this run already has its own store; rerun without --store, "
                                          r"or give another --run-id$") as err:
        open_run_store(tmp_path / "run", f"sqlite:///{tmp_path / 'shared.db'}")
    assert str(tmp_path / "run" / "store.db") in str(err.value)
    assert not (tmp_path / "run" / "store.url").exists() and not (tmp_path / "shared.db").exists()
    again = open_run_store(tmp_path / "run")  # the run goes on with its own store
    assert again.get_meta("seed") == 7
    again.close()


def test_another_runs_own_store_is_refused_as_a_shared_store(tmp_path):
    """A run directory's own store.db holds rows without a run id: named as a shared store, its children
    would be "X@" and its decisions nobody's."""
    (tmp_path / "runs" / "other").mkdir(parents=True)
    other = open_run_store(tmp_path / "runs" / "other")
    other.set_meta("seed", 1)
    other.close()
    url = f"sqlite:///{tmp_path / 'runs' / 'other' / 'store.db'}"
    with pytest.raises(ConfigError, match=r"^--store sqlite:///.*/other/store\.db: this database is a run "
                                          r"directory's own store \(its rows carry no run id\); name a database"):
        open_run_store(tmp_path / "runs" / "new", url)
    assert not (tmp_path / "runs" / "new" / "store.url").exists()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite+pysqlite:///:memory:",
                                 "sqlite:///file::memory:?cache=shared&uri=true",
                                 "sqlite:///file:mem1?mode=memory&cache=shared&uri=true"])
def test_an_in_memory_sqlite_store_is_refused_in_one_line(tmp_path, url, capsys):
    with pytest.raises(ConfigError, match=r"^--store: .* is a SQLite database in memory, gone when the run ends"):
        open_run_store(tmp_path / "run", url)
    assert not (tmp_path / "run").exists()
    args = ["run", "--benchmark", "demo", "--runs-dir", str(tmp_path / "runs"), "--run-id", "r", "--gaps", "1",
            "--quiet", "--store", url]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "SQLite database in memory" in err


def test_a_store_that_fails_mid_command_is_one_line_and_a_bug_stays_a_traceback(tmp_path):
    # The errors themselves, made by real SQLite through SQLAlchemy: a lock held past the wait, pages
    # damaged after the file opened, and SQL that is wrong (a bug: no one-line error hides it).
    import os
    import sqlite3

    from sqlalchemy import create_engine, text

    from benchfill.cli import _store_trouble

    db = tmp_path / "s.db"
    with sqlite3.connect(db) as con:
        con.execute("create table t (x)")
        con.executemany("insert into t values (?)", [(os.urandom(500),) for _ in range(2000)])
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("begin exclusive")
    engine = create_engine(f"sqlite:///{db}", connect_args={"timeout": 0.1})

    def error_of(sql: str) -> Exception:
        with pytest.raises(Exception) as got, engine.begin() as con:
            con.execute(text(sql))
        return got.value

    line = _store_trouble(error_of("insert into t values (1)"), f"sqlite:///{db}")
    assert line == (f"store sqlite:///{db} stopped answering (OperationalError: database is locked, held by another "
                    "process past the 30 s wait)")
    holder.rollback()
    holder.close()
    assert _store_trouble(error_of("select * from no_such_table")) is None
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        for at in (size // 3, size // 2, 2 * size // 3):
            fh.seek(at)
            fh.write(b"\xff" * 4096)  # no b-tree page starts so
    engine.dispose()
    line = _store_trouble(error_of("select count(*), sum(length(x)) from t"), f"sqlite:///{db}")
    assert line is not None and line.startswith(f"store sqlite:///{db} is damaged (database disk image is malformed)")


def test_dry_run_refuses_a_store_url_with_a_password_as_the_run_does(tmp_path, capsys):
    # the plan had printed with exit 0 for a command that would not run
    from benchfill.cli import main

    url = "postgresql+psycopg://bob:LEAKTESTpgFFFFFF@127.0.0.1:1/db"
    rc = main(["run", "--benchmark", "demo", "--gaps", "1", "--runs-dir", str(tmp_path), "--store", url, "--dry-run"])
    got = capsys.readouterr()
    assert rc == 2 and got.out == "" and "--store: the URL carries a password" in got.err and "LEAKTEST" not in got.err


def test_a_bare_postgresql_url_takes_the_extras_driver_and_a_missing_driver_names_the_extra(monkeypatch):
    # SQLAlchemy 2.0 read "postgresql://" as psycopg2, which the postgres extra does not install
    import sys

    from benchfill.store import Store, _driver_url

    assert _driver_url("postgresql://alice@db.example/bench") == "postgresql+psycopg://alice@db.example/bench"
    assert _driver_url("postgresql+psycopg2://alice@db.example/bench") == "postgresql+psycopg2://alice@db.example/bench"
    assert _driver_url("sqlite:///x.db") == "sqlite:///x.db"
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as where the extra is not installed
    assert _driver_url("postgresql://alice@db.example/bench") == "postgresql://alice@db.example/bench"  # psycopg2's
    with pytest.raises(ConfigError, match=r"^cannot open store postgresql://alice@db\.example/bench: "
                                          r"ModuleNotFoundError: .*psycopg.*; pip install 'benchfill\[postgres\]'$"):
        Store("postgresql://alice@db.example/bench")


def test_a_read_only_refusal_names_the_wal_files_that_hold_it(tmp_path, monkeypatch):
    # A read-only open left store.db-wal and -shm with the file's mode (or another user's): once the file was
    # writable again every write still failed, and the refusal said to make the file writable
    import os

    from benchfill.store import Store

    store = Store(tmp_path / "store.db")
    for end in ("-wal", "-shm"):
        (tmp_path / f"store.db{end}").touch()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: not str(p).endswith(("-wal", "-shm")) and real(p, mode))
    said = str(store.read_only_error())
    assert said.endswith("its store.db-wal and store.db-shm cannot be written by you (left by an open while the "
                         "store was read-only, or by another user); remove them when no one has the store open")
    monkeypatch.undo()
    assert "make it writable, or copy the run elsewhere" in str(store.read_only_error())
    store.close()


def test_a_store_that_cannot_be_opened_says_why(tmp_path):
    # SQLite says "unable to open database file" for a missing folder and a folder alike
    from benchfill.store import Store

    with pytest.raises(ConfigError, match=r"unable to open database file \(its folder .*nosuch.dir does not exist\)$"):
        Store(f"sqlite:///{tmp_path / 'nosuch' / 'dir' / 's.db'}")
    (tmp_path / "sdir.db").mkdir()
    with pytest.raises(ConfigError, match=r"unable to open database file \(.*sdir\.db is a folder, not a database file\)$"):
        Store(f"sqlite:///{tmp_path / 'sdir.db'}")


def test_a_store_in_a_folder_that_cannot_be_written_is_read_as_it_stands(tmp_path, monkeypatch, request):
    # an archived run (chmod -R a-w, a read-only mount): SQLite cannot make the WAL's -shm beside the file, and
    # every command, reading ones too, was refused "read-only, cannot be written"
    import os

    import benchfill.store as store_mod
    from benchfill.store import ReadOnlyStore, Store

    folder = tmp_path / "a run #2 at 100%"  # a file URI escapes these
    folder.mkdir()
    store = Store(folder / "store.db", run_id="r")
    store.set_meta("seed", 7)
    store.close()
    assert not (folder / "store.db-wal").exists()  # checkpointed at close: nothing the file lacks

    def no_shm(dbapi_conn, record):  # what SQLite says where it cannot create store.db-shm
        raise sqlite3.OperationalError("unable to open database file")

    real = os.access
    monkeypatch.setattr(store_mod, "_sqlite_pragmas", no_shm)
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(folder) and mode & os.W_OK
                        else real(p, mode))
    # a folder only this user cannot write (a shared run, its owner at work) is no frozen file: an immutable
    # read of it showed stale and torn rows once the owner wrote
    with pytest.raises(ConfigError, match=r"its folder is read-only"):
        Store(folder / "store.db", run_id="r")
    (folder / "store.db").chmod(0o444)
    folder.chmod(0o555)  # no one's to write: archived
    request.addfinalizer(lambda: folder.chmod(0o755))
    frozen = Store(folder / "store.db", run_id="r")
    try:
        assert frozen.read_only and frozen.get_meta("seed") == 7
        assert frozen.where == str(folder / "store.db")
        with pytest.raises(ReadOnlyStore, match=r"read-only, cannot be written"):
            frozen.set_meta("seed", 8)
    finally:
        frozen.close()
    with pytest.raises(ConfigError, match=r"its folder is read-only"):  # a command that will write: refused
        Store(folder / "store.db", run_id="r", writable=True)
    folder.chmod(0o755)
    (folder / "store.db-wal").write_bytes(b"x" * 32)  # changes the file may lack: not read as if it held them
    folder.chmod(0o555)
    with pytest.raises((ReadOnlyStore, ConfigError)):
        Store(folder / "store.db", run_id="r")
    link = tmp_path / "link.db"  # named by a link from elsewhere: the WAL beside the target counts
    link.symlink_to(folder / "store.db")
    with pytest.raises((ReadOnlyStore, ConfigError)):
        Store(f"sqlite:///{link}", run_id="r")


def test_a_library_caller_is_named_the_field_it_set_not_the_cli_flag(tmp_path):
    from benchfill.run import RunOptions, dry_run, run

    opts = RunOptions(gaps=1, runs_dir=str(tmp_path / "runs"), store="postgresql+psycopg://u:pw@db.example/b")
    for call in (dry_run, run):
        with pytest.raises(ConfigError, match="^store: the URL carries a password"):
            call(opts)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_simulated_run_on_a_shared_store_resumed_from_another_folder_keeps_its_worlds_children(tmp_path,
                                                                                                monkeypatch):
    # the run's world state lived in the first folder, and the store named only the last folder's: resumed
    # elsewhere, the world knew none of the children made before, their probe calls were answered as unknown
    # prompts and graded wrong, and the run chose other items than an uninterrupted one
    import json

    import benchfill.engine.record as record
    from benchfill.cli import main

    def args(folder, store):
        return ["run", "--benchmark", "demo", "--gaps", "2", "--rounds", "2", "--parents", "2", "--children", "2",
                "--sim-probes", "4", "--references", "4", "--runs-dir", str(tmp_path / folder), "--store",
                f"sqlite:///{tmp_path / store}", "--quiet", "--sim-pair-sd", "0"]  # (plumbing: a child is chosen)

    assert main(args("whole", "whole.db")) == 0
    rounds, real = [], record.record_round

    def stop_after_two(*a, **kw):
        real(*a, **kw)
        rounds.append(1)
        if len(rounds) == 2:
            raise KeyboardInterrupt  # the moment a kill would land

    monkeypatch.setattr(record, "record_round", stop_after_two)
    assert main(args("first", "shared.db")) == 130
    monkeypatch.setattr(record, "record_round", real)
    assert main(args("second", "shared.db")) == 0

    def chosen(folder):
        rep = json.loads(next((tmp_path / folder).glob("*/report.json")).read_text())
        return [(g["chosen_id"], g["confirmed_z"]) for g in rep["gaps"]], rep["top_k_sum_after"]

    assert chosen("second") == chosen("whole")


def test_a_sqlite_file_given_as_a_path_is_refused_with_the_url_it_means(tmp_path, monkeypatch):
    from benchfill.errors import ConfigError
    from benchfill.store import check_store_url

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=rf"--store 'shared\.db': expected a SQLAlchemy URL .*; for this SQLite "
                                          rf"file: sqlite:///{tmp_path}/shared\.db$"):
        check_store_url("shared.db")
    with pytest.raises(ConfigError, match=r"user@host/db$"):  # a name that says nothing of SQLite: no guess
        check_store_url("mystore")
