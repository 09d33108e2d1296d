"""A throwaway PostgreSQL server for tests: its own cluster in a temp dir, a unix socket, no TCP.

PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` user that
Debian's package creates. `.ci/run` installs the package where it is missing.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name)]
    if not found or not found[-1]:
        raise RuntimeError(f"PostgreSQL's {name} not found: apt-get install postgresql")
    return found[-1]


class PgServer:
    """One cluster: ``url``, and ``stop()`` / ``start()`` for tests of a server that goes away mid-command."""

    def __init__(self, base: Path, port: int) -> None:
        self.base, self.port = base, port
        self.data, self.sock = base / "data", base / "sock"
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.url = f"postgresql+psycopg://postgres@/benchfill?host={self.sock}&port={port}"

    def _run(self, *cmd: str) -> None:
        subprocess.run([*self.as_user, *cmd], check=True, capture_output=True, text=True)

    def start(self) -> None:
        opts = f"-k {self.sock} -p {self.port} -c listen_addresses='' -c fsync=off"
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", opts, "-w", "-t", "60", "-l", str(self.base / "log"),
                  "start")

    def stop(self, mode: str = "fast") -> None:
        subprocess.run([*self.as_user, _bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"],
                       capture_output=True)


@contextmanager
def postgres_server(port: int = 54329):
    base = Path(tempfile.mkdtemp(prefix="bf-pg-"))
    pg = PgServer(base, port)
    pg.sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(pg.sock, "postgres")
    try:
        # UTF-8 whatever the caller's locale: under LC_ALL=C initdb made a SQL_ASCII cluster (the store copes
        # with one, test_store_postgres; its fixtures should not depend on the shell that ran them)
        pg._run(_bin("initdb"), "-D", str(pg.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
                "--locale=C.UTF-8")
        pg.start()
        pg._run(_bin("createdb"), "-h", str(pg.sock), "-p", str(port), "-U", "postgres", "benchfill")
        yield pg
    finally:
        pg.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def postgres_url(port: int = 54329):
    with postgres_server(port) as pg:
        yield pg.url
