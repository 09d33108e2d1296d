"""Advisory file locks (flock) that the kernel drops when their holder dies, killed or not.

An import holds its output folder while it writes (benchfill/importers/matrix.py); a run holds its run
directory while it works (benchfill/run.py). Where the platform or the file system has no such lock
(Windows, some network mounts) there is none, and the callers fall back to what they did without.
"""

from __future__ import annotations

import os
from pathlib import Path


def hold(path: Path, *, shared: bool = False, wait: bool = True) -> int | None:
    """An flock on ``path`` (a folder, opened as itself so that no lock file is left, or a file, created
    if missing): its descriptor, which ``release`` closes; None where no lock can be taken. Not
    ``wait``ing, a lock another process holds raises ``BlockingIOError``."""
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY) if path.is_dir() else os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:  # no flock on this file system
        os.close(fd)
        return None
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor releases its lock
