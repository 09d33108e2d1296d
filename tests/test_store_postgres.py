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
