"""The store on a real PostgreSQL server: a run, its review and its release."""

import pytest
from pg_server import postgres_url
from sqlalchemy import text

from benchfill.cli import main
from benchfill.store import Store


@pytest.fixture(scope="module")
def pg():
    with postgres_url() as url:
        yield url


def test_run_review_and_release_on_postgresql(pg, tmp_path):
    runs = tmp_path / "runs"
    args = ["run", "--benchmark", "demo", "--backend", "sim", "--runs-dir", str(runs), "--run-id", "pg",
            "--gaps", "1", "--rounds", "1", "--parents", "2", "--children", "2", "--quiet", "--store", pg]  # fmt: skip
    assert main(args) == 0
    run = runs / "pg"
    assert not (run / "store.db").exists()
    store = Store(pg)
    with store.engine.connect() as con:
        originals = con.execute(text("select count(*) from item where origin = 'original'")).scalar_one()
        calls = con.execute(text("select count(*) from modelcall")).scalar_one()
    assert originals == 48 and calls > 0
    # Same command again: everything comes from the PostgreSQL cache, nothing is added.
    assert main(args) == 0
    with store.engine.connect() as con:
        assert con.execute(text("select count(*) from modelcall")).scalar_one() == calls
    store.close()
    assert main(["review", "export", str(run)]) == 0
    assert main(["release", str(run), "--version", "1.0.0", "--out", str(tmp_path / "rel")]) == 0
    assert main(["release", "verify", str(tmp_path / "rel" / "demo" / "1.0.0")]) == 0


def test_a_version_4_store_on_postgresql_records_the_world_of_its_memory_entries(pg):
    """Migration m005 on PostgreSQL: the children's world from their run's recorded backend, the indexes made again."""
    store = Store(pg, run_id="sim-run")
    store.set_meta("backend", "sim")
    with store.engine.begin() as con:  # what a version-4 store looked like
        con.execute(text("delete from memoryrecord"))
        for index in ("ix_memory_near", "ix_memory_origin", "ix_reviewdecision_run_item"):
            con.execute(text(f"drop index {index}"))
        con.execute(text("alter table memoryrecord drop column simulated"))
        con.execute(text("create index ix_memory_near on memoryrecord (benchmark, scale, z)"))
        for run, origin in (("", "original"), ("sim-run", "generated"), ("lost-run", "generated")):
            con.execute(text("insert into memoryrecord (benchmark, scale, run_id, item_id, origin, z, z_se, confirmed, "
                             "parent_id, ancestor_id, flags_json, parent_ok, data_json, created_at) values "
                             "('b', 's', :run, 'c1', :origin, 0.5, 0.0, false, '', '', '[]', true, '{}', now())"),
                         {"run": run, "origin": origin})
        con.execute(text("update schemaversion set version = 4"))
    store.close()
    store = Store(pg)
    with store.engine.connect() as con:
        got = dict(((r, o), sim) for r, o, sim in con.execute(text("select run_id, origin, simulated from memoryrecord")))
        near = con.execute(text("select indexdef from pg_indexes where indexname = 'ix_memory_near'")).scalar_one()
        run_item = con.execute(text("select count(*) from pg_indexes where indexname = 'ix_reviewdecision_run_item'"))
        assert run_item.scalar_one() == 1
    store.close()
    assert got == {("", "original"): False, ("sim-run", "generated"): True, ("lost-run", "generated"): None}
    assert "(benchmark, scale, simulated, z)" in near


def test_a_server_that_stops_mid_run_is_one_line_and_a_rerun_resumes(tmp_path):
    # The server goes away while gaps are searched: one line naming the store (not SQLAlchemy's traceback
    # with its SQL), exit 2; once it answers again, the same command resumes from what was written.
    import os
    import subprocess
    import sys

    from pg_server import postgres_server

    with postgres_server(port=54339) as server:
        cmd = [sys.executable, "-m", "benchfill", "run", "--benchmark", "demo", "--backend", "sim",
               "--runs-dir", str(tmp_path / "runs"), "--run-id", "gone", "--gaps", "3", "--rounds", "3",
               "--parents", "2", "--children", "3", "--sim-probes", "6", "--seed", "8", "--store", server.url]
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "round 1/3" in line:
                break
        server.stop()
        lines += proc.stderr.readlines()
        assert proc.wait(timeout=120) == 2, "".join(lines)
        err = "".join(lines)
        assert "Traceback" not in err and "[SQL:" not in err and "Unclosed" not in err, err
        assert lines[-1].startswith(f"benchfill: error: store {server.url} stopped answering ("), err
        assert lines[-1].rstrip().endswith("rerun the same command to resume once it answers")
        server.start()
        again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        assert again.returncode == 0, again.stderr
        assert "restored after round" in again.stderr


def test_a_bare_postgresql_url_opens_on_psycopg(pg):
    bare = pg.replace("postgresql+psycopg://", "postgresql://", 1)
    assert bare != pg
    store = Store(bare)
    assert store.engine.dialect.driver == "psycopg" and store.url == bare  # the user's URL, as given
    store.close()


@pytest.mark.parametrize("where", ["postgresql", "sqlite"])
def test_two_handles_on_one_store_take_turns_at_a_runs_review(pg, tmp_path, where):
    # (Store.turns: what a review decision's check and write, or a release, hold against another folder)
    import threading

    url = pg if where == "postgresql" else f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = Store(url, run_id="turns-a"), Store(url, run_id="turns-a")
    entered = threading.Event()

    def other():
        with b.turns("review"):
            entered.set()

    with a.turns("review"):
        t = threading.Thread(target=other)
        t.start()
        assert not entered.wait(0.5)  # the other handle waits while this one holds its turn
        with b.turns("release"):  # another purpose does not wait
            pass
    assert entered.wait(10)
    t.join(10)
    a.close()
    b.close()


def test_a_store_on_a_sql_ascii_database_opens_and_keeps_text_whole(tmp_path):
    """A cluster made under LC_ALL=C is SQL_ASCII: psycopg handed back bytes there and the store failed to open
    with a TypeError. It opens, and a name outside ASCII comes back as it went in."""
    from pg_server import _bin, postgres_server

    with postgres_server(port=54331) as server:
        server._run(_bin("createdb"), "-h", str(server.sock), "-p", str(server.port), "-U", "postgres",
                    "-E", "SQL_ASCII", "-T", "template0", "--locale=C", "ascii")
        url = server.url.replace("/benchfill?", "/ascii?")
        store = Store(url)
        with store.engine.connect() as con:
            assert con.execute(text("show server_encoding")).scalar_one() == "SQL_ASCII"
        store.set_meta("who", {"name": "Zoë 名前"})
        store.close()
        assert Store(url).get_meta("who") == {"name": "Zoë 名前"}
