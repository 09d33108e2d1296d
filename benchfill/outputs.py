"""Where a command is about to write: checked whole before the first file is written.

A command that writes several files one after another (a run's report, plots and queue; an export's
sheets) and meets a path that cannot take its file only at that file's turn leaves the others new and
this one old. Each target is checked first instead, and refused in one line naming it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from benchfill.errors import ConfigError


def check_targets(folder: Path, files: Iterable[Path], folders: Iterable[Path] = (), *, what: str,
                  hint: str) -> None:
    """Refuse a file of ``files`` that exists but is no regular file (a folder where a file goes), a folder of
    ``folders`` that exists but is no folder, and a ``folder`` whose nearest existing part is a file (mkdir
    makes the rest). ``what`` names the writer ("the run"), ``hint`` the way out ("give another --runs-dir")."""
    for d in (folder, *folder.parents):
        if d.exists() or d.is_symlink():
            if not d.is_dir():
                raise ConfigError(f"{d}: not a folder, yet {what} writes into {folder}; move it away, or {hint}")
            break
    for d in folders:
        if (d.exists() or d.is_symlink()) and not d.is_dir():
            raise ConfigError(f"{d}: not a folder, where {what} writes its files; move it away, or {hint}")
    for f in files:
        if f.exists() and not f.is_file():
            kind = "a folder" if f.is_dir() else "not a regular file"
            raise ConfigError(f"{f}: {kind}, where {what} writes a file; move it away, or {hint}")


# A temp file (or folder) that a writer renames into place is named for the writer, ``.<name>.bf<pid>@<host>.
# <random><suffix>``, so that the next writer of ``name`` can tell one a killed writer left (its process gone)
# from one a live writer is filling. One whose writer cannot be asked (another host's, or one named otherwise)
# is a killed writer's once untouched for STALE_S.
STALE_S = 3600.0


def umask() -> int:
    """This process's umask, read without changing it (``os.umask`` can only be read by setting it, which
    another thread's file would be made under) where Linux tells it."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def shared_mode() -> int:
    """The mode of a file written through a temporary one (``mkstemp`` makes 0600): what the umask gives a
    new file, as for any file the process makes. A team sharing runs by group (umask 002) can edit each
    other's sheets (0644 forced on every file had stopped them); a private umask (077) keeps a run's
    unreleased items to its user, as it keeps the store."""
    return 0o666 & ~umask()


def named(exc: OSError, path: Path | str) -> None:
    """Make ``exc`` name ``path`` where it names no file, as a full disk's write or close does not: with the
    run folder, --out and the store on different disks, the user could not tell which was full. The writer
    that caught it raises it again (``except OSError as exc: named(exc, path); raise``)."""
    if exc.filename is None:
        exc.filename = str(path)


def temp_path(folder: Path, name: str, *, suffix: str = ".tmp", directory: bool = False) -> Path:
    """A new temp file (or folder) in ``folder`` for the file ``name`` about to be written there, after the
    ones earlier writers of ``name`` left when they were killed are removed (``sweep_temps``)."""
    import os
    import tempfile

    sweep_temps(folder, name, suffix=suffix)
    prefix = f".{name}.bf{os.getpid()}@{_host()}."
    if directory:
        return Path(tempfile.mkdtemp(dir=folder, prefix=prefix, suffix=suffix))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    os.close(fd)
    return Path(tmp)


def sweep_temps(folder: Path, name: str, *, suffix: str = ".tmp") -> list[Path]:
    """Remove the temp files (and folders) of ``name`` in ``folder`` whose writers are dead: on this host, no
    process of their pid; elsewhere, untouched for ``STALE_S``. Returns what was removed."""
    import glob
    import os
    import shutil
    import time

    removed = []
    start = f".{name}."
    for p in folder.glob(f"{glob.escape(start)}*{glob.escape(suffix)}"):
        writer = p.name[len(start) : len(p.name) - len(suffix)]
        pid, _, rest = writer.partition("@")
        host = rest.rpartition(".")[0]
        try:
            if pid.startswith("bf") and pid[2:].isdigit() and host == _host():
                if int(pid[2:]) == os.getpid() or _alive(int(pid[2:])):
                    continue
            elif time.time() - p.lstat().st_mtime < STALE_S:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
        except OSError:
            continue  # another writer's sweep took it first, or it cannot be removed: it costs room, no more
    return removed


def _host() -> str:
    import socket

    # the host as one dot-free word: the name's parts are split at the last dot
    return "".join(c if c.isalnum() or c == "-" else "_" for c in socket.gethostname()) or "host"


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: a process of another user holds the pid
        return True
    return True
