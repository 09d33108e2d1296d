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


@contextmanager
def postgres_url(port: int = 54329):
    base = Path(tempfile.mkdtemp(prefix="bf-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True)  # noqa: E731
    try:
        run(_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        opts = f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off"
        run(_bin("pg_ctl"), "-D", str(data), "-o", opts, "-w", "-t", "60", "-l", str(base / "log"), "start")
        run(_bin("createdb"), "-h", str(sock), "-p", str(port), "-U", "postgres", "benchfill")
        yield f"postgresql+psycopg://postgres@/benchfill?host={sock}&port={port}"
    finally:
        subprocess.run([*as_user, _bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
