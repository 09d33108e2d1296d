"""The store's own metadata and its schema version: an older store is upgraded, a newer one refused."""

from __future__ import annotations

import sqlite3

import pytest
from sqlmodel import Field, SQLModel

from benchfill import schema, store
from benchfill.cli import main
from benchfill.errors import ConfigError
from benchfill.store import SCHEMA_VERSION, Store


def _version(db) -> int | None:
    with sqlite3.connect(db) as con:
        rows = con.execute("select version from schemaversion").fetchall()
    return rows[0][0] if rows else None


def test_the_store_keeps_its_tables_off_sqlmodels_global_metadata():
    assert "runmeta" in schema.metadata.tables and "runmeta" not in SQLModel.metadata.tables

    class Note(SQLModel, table=True):  # a user's own table on the global metadata
        id: int | None = Field(default=None, primary_key=True)

    assert "note" not in schema.metadata.tables


def test_a_new_store_records_the_current_schema_version(tmp_path):
    Store(tmp_path / "s.db").close()
    assert _version(tmp_path / "s.db") == SCHEMA_VERSION


def test_a_store_from_before_versions_is_upgraded_and_keeps_its_data(tmp_path):
    db = tmp_path / "s.db"
    s = Store(db)
    s.set_meta("seed", 7)
    s.close()
    with sqlite3.connect(db) as con:  # what a store written before this version looked like
        con.execute("drop table schemaversion")
    s = Store(db)
    assert s.schema_version == SCHEMA_VERSION and s.get_meta("seed") == 7
    s.close()
    assert _version(db) == SCHEMA_VERSION


def test_migrations_run_in_order_once_each(tmp_path, monkeypatch):
    db = tmp_path / "s.db"
    Store(db).close()
    ran = []

    def m002_add_note(conn, run_id):
        ran.append("m002")
        conn.exec_driver_sql("alter table runmeta add column note text default ''")

    monkeypatch.setattr(store, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, m002_add_note])
    Store(db).close()
    Store(db).close()
    assert ran == ["m002"] and _version(db) == SCHEMA_VERSION + 1
    with sqlite3.connect(db) as con:
        assert "note" in [r[1] for r in con.execute("pragma table_info(runmeta)")]


def test_a_store_from_a_newer_benchfill_is_refused_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    Store(run / "store.db").close()
    with sqlite3.connect(run / "store.db") as con:
        con.execute("update schemaversion set version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(ConfigError, match=rf"schema version {SCHEMA_VERSION + 1} was written by a newer benchfill"):
        Store(run / "store.db")
    assert main(["review", "export", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "newer benchfill" in err
    assert _version(run / "store.db") == SCHEMA_VERSION + 1  # left as it was


def test_a_version_1_store_gains_the_review_record_column(tmp_path):
    """1 -> 2: candidates of a store written before the review queue moved into the store gain
    ``review_json``; their rows are kept."""
    db = tmp_path / "s.db"
    Store(db).close()
    with sqlite3.connect(db) as con:  # a version-1 candidate table, one row in it
        con.execute("drop table candidate")
        con.execute("create table candidate (id varchar primary key, gap_index integer, round integer, "
                    "parent_id varchar, target_z float, rollouts integer, flags_json varchar, status varchar, "
                    "judge_reason varchar, created_at datetime)")
        con.execute("insert into candidate values ('c1', 0, 1, 'p', 0.5, 8, '[]', 'selected', '', '2026-01-01')")
        con.execute("update schemaversion set version = 1")
    s = Store(db)
    assert s.schema_version == SCHEMA_VERSION
    s.close()
    with sqlite3.connect(db) as con:
        cols = {r[1] for r in con.execute("pragma table_info(candidate)")}
        assert "review_json" in cols and con.execute("select id from candidate").fetchall() == [("c1",)]
    assert _version(db) == SCHEMA_VERSION


def test_a_version_3_store_gains_the_decisions_source_column(tmp_path):
    """Version 4 records where a review decision was made (``ReviewDecision.source``); a version-3
    store's decisions are kept, their source unknown ("")."""
    db = tmp_path / "s.db"
    Store(db, run_id="r").close()
    with sqlite3.connect(db) as con:  # what a version-3 store looked like, with one decision
        con.execute("alter table reviewdecision drop column source")
        con.execute("insert into reviewdecision (run_id, item_id, reviewer, decision, reason, created_at) "
                    "values ('r', 'x', 'alice', 'accept', '', '2026-01-01 00:00:00')")
        con.execute("update schemaversion set version = 3")
    s = Store(db, run_id="r")
    rows = s.all(schema.ReviewDecision)
    s.close()
    assert _version(db) == SCHEMA_VERSION
    assert [(r.item_id, r.reviewer, r.decision, r.source) for r in rows] == [("x", "alice", "accept", "")]


def test_two_opens_of_a_new_sqlite_store_at_once_both_succeed(tmp_path, monkeypatch):
    """Two runs may open a new store together: the first takes the file's write lock before it looks,
    so the second finds the tables made (here both would otherwise pass the check, then both create)."""
    import threading

    from sqlalchemy import inspect

    real = schema.metadata.create_all
    both_checked = threading.Barrier(2, timeout=2)

    def create_all(conn, **kw):  # create_all's check-then-create, the window between the two held open
        missing = [t for t in schema.metadata.sorted_tables if not inspect(conn).has_table(t.name)]
        try:
            both_checked.wait()
        except threading.BrokenBarrierError:  # the other one waited on the lock instead
            pass
        real(conn, tables=missing, checkfirst=False)

    monkeypatch.setattr(schema.metadata, "create_all", create_all)
    db, errors = tmp_path / "s.db", []

    def open_store():
        try:
            Store(db, run_id="r").close()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and _version(db) == SCHEMA_VERSION


def test_a_store_that_cannot_be_opened_is_said_in_one_line(tmp_path):
    db = tmp_path / "s.db"
    db.write_bytes(b"not a database, " * 100)
    with pytest.raises(ConfigError) as got:
        Store(db)
    said = str(got.value)
    assert "\n" not in said and "[SQL" not in said and "file is not a database" in said


def test_a_version_4_store_records_the_world_of_its_memory_entries(tmp_path):
    """5 records whether a memory entry was made in the simulated world (``MemoryRecord.simulated``): a
    version-4 store's children take it from their run's recorded backend, unknown where none was
    recorded; the benchmark's own items are False; the memory's indexes gain the column, and the review
    decisions gain an index on (run, item)."""
    db = tmp_path / "s.db"
    s = Store(db)
    for run, backend in (("sim-run", "sim"), ("real-run", "openai")):
        with s.session() as ses:
            ses.add(schema.RunMeta(run_id=run, key="backend", value_json=f'"{backend}"'))
    s.close()
    with sqlite3.connect(db) as con:  # what a version-4 store looked like, with one row of each kind
        for index in ("ix_memory_near", "ix_memory_origin", "ix_reviewdecision_run_item"):
            con.execute(f"drop index {index}")
        con.execute("alter table memoryrecord drop column simulated")
        con.execute("create index ix_memory_near on memoryrecord (benchmark, scale, z)")
        con.execute("create index ix_memory_origin on memoryrecord (benchmark, origin, scale)")
        for run, item, origin in (("", "q1", "original"), ("sim-run", "c1", "generated"),
                                  ("real-run", "c1", "generated"), ("lost-run", "c1", "generated")):
            con.execute("insert into memoryrecord (benchmark, scale, run_id, item_id, origin, z, z_se, confirmed, "
                        "parent_id, ancestor_id, flags_json, parent_ok, data_json, created_at) values "
                        "('b', 's', ?, ?, ?, 0.5, 0.0, 0, '', '', '[]', 1, '{}', '2026-01-01')", (run, item, origin))
        con.execute("update schemaversion set version = 4")
    Store(db).close()
    assert _version(db) == SCHEMA_VERSION
    with sqlite3.connect(db) as con:
        got = dict(((run, item), sim) for run, item, sim in con.execute(
            "select run_id, item_id, simulated from memoryrecord"))
        indexes = {name: [c[2] for c in con.execute(f"pragma index_info({name})")]
                   for (name,) in con.execute("select name from sqlite_master where type = 'index'")}
    assert got == {("", "q1"): 0, ("sim-run", "c1"): 1, ("real-run", "c1"): 0, ("lost-run", "c1"): None}
    assert indexes["ix_memory_near"] == ["benchmark", "scale", "simulated", "z"]
    assert indexes["ix_memory_origin"] == ["benchmark", "origin", "simulated", "scale"]
    assert indexes["ix_reviewdecision_run_item"] == ["run_id", "item_id"]


def test_the_switch_to_wal_is_tried_again_when_a_new_file_is_locked(monkeypatch):
    """Two connections switching a new file to WAL at once can deadlock on its lock, and SQLite then answers
    "database is locked" at once, without waiting out the busy timeout: about 1 in 350 opens of a new store by
    six threads at once failed so (a stress script; too rare for a test to meet). The switch is tried again;
    any other error is raised as it comes."""
    from benchfill.store import _sqlite_pragmas

    class Cursor:
        def __init__(self, errors):
            self.errors, self.ran = list(errors), []

        def execute(self, sql):
            if sql.startswith("PRAGMA journal_mode") and self.errors:
                raise self.errors.pop(0)
            self.ran.append(sql)

        def close(self):
            pass

    class Conn:
        def __init__(self, errors):
            self.cur = Cursor(errors)

        def cursor(self):
            return self.cur

    locked = [sqlite3.OperationalError("database is locked")] * 3
    conn = Conn(locked)
    _sqlite_pragmas(conn, None)
    assert conn.cur.ran[0] == "PRAGMA journal_mode=WAL" and not conn.cur.errors
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _sqlite_pragmas(Conn([sqlite3.OperationalError("disk I/O error")]), None)
    # A lock that never lifts is raised as it came once the switch's deadline has passed.
    monkeypatch.setattr("benchfill.store.WAL_SWITCH_S", 0.05)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        _sqlite_pragmas(Conn([sqlite3.OperationalError("database is locked")] * 1000), None)


@pytest.mark.parametrize("sql", ["create table item(id TEXT, data_json TEXT)", "create table contacts(name TEXT)"])
def test_another_applications_database_is_refused_untouched(tmp_path, sql):
    # a table named item was taken for an old store's, dropped and made again with benchfill's columns (its
    # rows labelled the run's items); a database of other tables got benchfill's ten beside them
    from benchfill.errors import ConfigError

    db = tmp_path / "theirs.db"
    with sqlite3.connect(db) as con:
        con.execute(sql)
    with sqlite3.connect(db) as con:
        con.execute(sql.replace("create table ", "insert into ").split("(")[0] + " values ('a'" +
                    (", '{}')" if "item" in sql else ")"))

    def tables_and_rows():
        with sqlite3.connect(db) as con:
            names = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
            return {n: con.execute(f"select * from {n}").fetchall() for n in names}

    before = tables_and_rows()
    with pytest.raises(ConfigError, match=r"holds tables that are not a benchfill store's \((item|contacts)\); "
                                          r"give benchfill a database of its own$"):
        Store(db)
    assert tables_and_rows() == before


def test_an_upgrade_is_said_once_and_a_store_at_the_current_schema_says_nothing(tmp_path, caplog):
    # a look (`memory list`) upgraded a team's store without a word, and teammates on the older benchfill
    # then found it refused
    import logging

    db = tmp_path / "s.db"
    with caplog.at_level(logging.INFO, logger="benchfill"):
        Store(db, run_id="r").close()  # a new store: created, not upgraded
        assert "upgraded" not in caplog.text
        with sqlite3.connect(db) as con:
            con.execute("alter table reviewdecision drop column source")
            con.execute("update schemaversion set version = 3")
        Store(db, run_id="r").close()
        said = [r.getMessage() for r in caplog.records if "upgraded" in r.getMessage()]
        assert said == [f"store sqlite:///{db}: upgraded from schema 3 to {SCHEMA_VERSION}; a benchfill that reads "
                        "schema 3 at most can no longer open it"]
        Store(db, run_id="r").close()
        assert len([r for r in caplog.records if "upgraded" in r.getMessage()]) == 1
