"""QA polish (s40): memory look-ups that write nothing, endpoint URLs checked at load, the rewriter's knobs,
the simulated world's state path, and a key's fragments kept out of printed errors."""

from __future__ import annotations

import sqlite3

from benchfill.cli import main
from benchfill.store import Store


def test_memory_list_makes_no_store_of_an_empty_file_nor_writes_to_a_foreign_one(tmp_path, capsys):
    # `: > empty.db; memory list --store empty.db` said "the memory holds nothing" and left a 120 KB store there
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    run = tmp_path / "run"
    run.mkdir()
    (run / "store.db").write_bytes(b"")
    for where in (str(empty), f"sqlite:///{empty}", str(run)):
        for cmd in (["list"], ["forget", "--run", "x", "--dry-run"]):
            assert main(["memory", *cmd, "--store", where]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "holds no benchfill store (an empty file or database)" in err[0], err
    assert empty.stat().st_size == 0 and (run / "store.db").stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "run"]  # no -runs.lock, -wal, -shm
    # another application's database: refused as before, and no longer switched to WAL on the way
    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE x (a)")
    con.commit()
    con.close()
    before = foreign.read_bytes()
    assert main(["memory", "list", "--store", str(foreign)]) == 2
    assert "holds tables that are not a benchfill store's (x)" in capsys.readouterr().err
    assert foreign.read_bytes() == before
    text = tmp_path / "text.db"
    text.write_text("hello\n")
    assert main(["memory", "list", "--store", str(text)]) == 2
    assert "DatabaseError: file is not a database" in capsys.readouterr().err
    # a store a run wrote is read as before
    Store(tmp_path / "real.db").close()
    assert main(["memory", "list", "--store", str(tmp_path / "real.db")]) == 0
    assert "the memory holds nothing" in capsys.readouterr().out
